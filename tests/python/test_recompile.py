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


def _instances(n):
    out = []
    for seed in range(n):
        torch.manual_seed(seed)
        out.append(torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4)).eval())
    return out


def _round_robin(models, compiled, rounds):
    with torch.no_grad():
        for _ in range(rounds):
            for m, c in zip(models, compiled):
                x = torch.randn(3, 8)
                torch.testing.assert_close(c(x), m(x), rtol=1e-4, atol=1e-5)  # f32 gemm order


def test_module_instances_of_one_class_each_keep_their_engine_graph():
    """A server holding several models of one architecture: Dynamo runs them through one compiled
    graph. Each instance is built once; switching between them rebuilds nothing, and a change in
    place rebuilds only that instance's state."""
    models = _instances(3)
    backend = get_backend(CompilerConfig(inference="engine", recompile_limit=4))
    compiled = [torch.compile(m, backend=backend) for m in models]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no recompile-limit warning
        _round_robin(models, compiled, 6)
        rep = updraft.last_report()
        (part,) = rep.partitions
        assert part.engine_compiles == 3 and part.status == "ok", str(rep)
        assert len(rep.recompiles) == 2 and all("another module instance" in why and "parameter_sets=4" in why
                                                for _, why in rep.recompiles), rep.recompiles
        with torch.no_grad():
            models[1][0].weight.add_(0.25)
        _round_robin(models, compiled, 2)
    assert part.engine_compiles == 4 and "was modified in place" in rep.recompiles[-1][1], rep.recompiles


def test_parameter_sets_bounds_the_kept_instances():
    """Three instances in turn through a graph that keeps two: every call meets a set it dropped
    and builds it again (each a recompile), still with every result right."""
    models = _instances(3)
    backend = get_backend(CompilerConfig(inference="engine", parameter_sets=2, recompile_limit=100))
    compiled = [torch.compile(m, backend=backend) for m in models]
    _round_robin(models, compiled, 3)
    (part,) = updraft.last_report().partitions
    assert part.engine_compiles == 9


def test_a_deleted_instance_is_released_when_the_next_one_arrives():
    import gc
    import weakref

    first, second, third = _instances(3)
    backend = get_backend(CompilerConfig(inference="engine"))
    _round_robin([first, second], [torch.compile(first, backend=backend), torch.compile(second, backend=backend)], 1)
    gone = weakref.ref(first[0].weight)
    del first
    gc.collect()
    assert gone() is not None  # the graph's state for it holds it until a new set arrives
    _round_robin([second], [torch.compile(second, backend=backend)], 1)  # a kept set: no scan
    gc.collect()
    assert gone() is not None
    _round_robin([third], [torch.compile(third, backend=backend)], 1)
    gc.collect()
    assert gone() is None
    _round_robin([second, third], [torch.compile(second, backend=backend), torch.compile(third, backend=backend)], 1)
    (part,) = updraft.last_report().partitions
    assert part.engine_compiles == 3  # second was kept: it is alive


def test_threads_running_two_instances_through_one_graph():
    """Each thread's call uses its own instance's engine state, whatever the other thread
    switched to meanwhile."""
    import threading

    models = _instances(2)
    backend = get_backend(CompilerConfig(inference="engine"))
    compiled = [torch.compile(m, backend=backend) for m in models]
    _round_robin(models, compiled, 1)  # both built
    errors = []

    def work(k):
        try:
            _round_robin([models[k]], [compiled[k]], 150)
        except Exception as e:  # reported below: an assertion in a thread does not fail the test
            errors.append(e)

    threads = [threading.Thread(target=work, args=(k % 2,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[0]
    (part,) = updraft.last_report().partitions
    assert part.engine_compiles == 2
