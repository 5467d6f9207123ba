"""Recompilation control: CompilerConfig.recompile_limit, the warning that names what changed,
and the compiles/recompiles the report (updraft.explain) shows."""
import warnings

import pytest
import torch

import updraft
from updraft import CompilerConfig, get_backend
from updraft import _C as C


def _mlp():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4)).eval()


def _calls(compiled, model, batches):
    outs = []
    with torch.no_grad():
        for b in batches:
            x = torch.randn(b, 8)
            got = compiled(x)
            torch.testing.assert_close(got, model(x), rtol=1e-4, atol=1e-5)  # f32 gemm order
            outs.append(got)
    return outs


def test_static_recompiles_are_named_and_limited():
    m = _mlp()
    compiled = torch.compile(m, backend=get_backend(CompilerConfig(recompile_limit=1)), dynamic=False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _calls(compiled, m, [2, 3])  # first compile, one recompile: within the limit
        rep = updraft.last_report()
        assert rep.recompiles == [("recompile", "input 0 'arg2_1' dim 0 2 -> 3")] or \
            rep.recompiles[0][1].endswith("dim 0 2 -> 3"), rep.recompiles
        assert rep.coverage == 1.0
        _calls(compiled, m, [5])  # second recompile: over the limit, runs in PyTorch
    msgs = [str(w.message) for w in caught if "recompile" in str(w.message)]
    assert len(msgs) == 1, msgs
    assert "recompile_limit=1" in msgs[0] and "dim 0 3 -> 5" in msgs[0] and "mark_dynamic" in msgs[0]
    rep = updraft.last_report()
    assert rep.num_partitions == 0 and "recompile limit reached" in str(rep)


def test_dynamic_dims_do_not_count_as_recompiles():
    m = _mlp()
    compiled = torch.compile(m, backend=get_backend(CompilerConfig(recompile_limit=0)), dynamic=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no recompile warning
        _calls(compiled, m, [2, 3, 7, 1])
    rep = updraft.last_report()
    assert rep.recompiles == [] and rep.coverage == 1.0
    assert "compile: first compile of this graph" in str(rep)


def test_parameter_changes_count_and_the_warning_names_the_parameter():
    m = _mlp()
    compiled = torch.compile(m, backend=get_backend(CompilerConfig(recompile_limit=1)))
    x = torch.randn(2, 8)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with torch.no_grad():
            compiled(x)
            for step in range(2):  # an optimiser step, twice
                m[0].weight.add_(0.1)
                torch.testing.assert_close(compiled(x), m(x), rtol=1e-4, atol=1e-5)
    msgs = [str(w.message) for w in caught if "recompile" in str(w.message)]
    assert len(msgs) == 1 and "was modified in place" in msgs[0] and "weight" in msgs[0], msgs
    rep = updraft.last_report()
    assert [k for k, _ in rep.recompiles] == ["recompile", "recompile"]
    assert all("in PyTorch" in p.status for p in rep.partitions), str(rep)


def test_bad_limit_is_a_config_error():
    with pytest.raises(ValueError, match=r"\[updraft.config\] recompile_limit=-1"):
        CompilerConfig(recompile_limit=-1)


def test_engine_version_matches_the_package():
    assert C.engine_version() == updraft.__version__
