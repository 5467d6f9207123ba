"""updraft.debug.bisect and its switches (CompilerConfig.disable_passes, eager_nodes, debug_fault):
a deliberate fault injected into one pass or one kernel of a real zoo model is found, and the
reproducer it writes fails on its own."""
import os
import subprocess
import sys

import pytest
import torch

import updraft
from updraft import CompilerConfig, _C, zoo
from updraft.debug import bisect


def _small_resnet():
    return zoo.build("resnet50", size=32, depths=(1, 1, 1, 1))


def _small_mlp():
    return zoo.build("mlp", width=32, depth=3, batch=2)


# ---- the switches ----

def test_pass_names_come_from_the_pipeline():
    names = _C.pass_names()
    assert names[0] == "verify" and "fuse_epilogue" in names and len(set(names)) == len(names)
    assert _C.pass_is_mandatory("verify") and not _C.pass_is_mandatory("cse")


@pytest.mark.parametrize("kwargs, match", [
    ({"disable_passes": ("no_such_pass",)}, "unknown pass 'no_such_pass'"),
    ({"disable_passes": ("verify",)}, "'verify' is mandatory"),
    ({"disable_passes": "cse"}, "sequence of names"),
    ({"eager_nodes": "addmm"}, "sequence of names"),
    ({"debug_fault": "pass:verify"}, "not a pass that rewrites"),
    ({"debug_fault": "kernel:no_such_op"}, "not an engine op"),
    ({"debug_fault": "fuse_epilogue"}, "use 'pass:NAME' or 'kernel:OP'"),
])
def test_bisect_switches_are_validated(kwargs, match):
    with pytest.raises((TypeError, ValueError), match=match):
        CompilerConfig(**kwargs)


def test_switches_that_change_the_graph_are_in_the_cache_key():
    base = CompilerConfig().cache_options()
    assert CompilerConfig(disable_passes=("cse",)).cache_options() != base
    assert CompilerConfig(debug_fault="pass:cse").cache_options() != base
    # A kernel fault changes no graph: kernels are picked at plan build, as for the kernel knobs.
    assert CompilerConfig(debug_fault="kernel:linear").cache_options() == base
    assert CompilerConfig(debug_fault="kernel:linear").engine_options()["fault_op"] == "linear"


def test_explain_shows_skipped_passes_and_eager_nodes():
    model, inputs = _small_mlp()
    report = updraft.explain(model, *inputs, config=CompilerConfig(
        cache_dir="", disable_passes=("fuse_epilogue",), eager_nodes=("relu",)))
    text = str(report)
    assert "passes skipped (disable_passes): fuse_epilogue" in text
    assert "eager_nodes (bisect)" in text
    assert report.fallback_ops["aten.relu.default"] == 1


def test_disabled_pass_keeps_results_and_faults_change_them():
    model, inputs = _small_mlp()
    with torch.no_grad():
        want = model(*inputs)

    def run(**kw):
        torch._dynamo.reset()
        cfg = CompilerConfig(cache_dir="", fallback=False, **kw)
        with torch.no_grad():
            return torch.compile(model, backend=updraft.get_backend(cfg), dynamic=False)(*inputs)

    torch.testing.assert_close(run(disable_passes=("fuse_epilogue", "fuse_elementwise")), want)
    assert not torch.allclose(run(debug_fault="pass:fuse_epilogue"), want, atol=1e-3)
    bad = run(debug_fault="kernel:linear")
    assert not torch.allclose(bad, want, atol=1e-3)
    torch._dynamo.reset()


# ---- bisect ----

def test_clean_model_gives_no_difference(tmp_path):
    model, inputs = _small_mlp()
    result = bisect(model, *inputs, out_dir=str(tmp_path / "out"), verbose=False)
    assert result.kind == "none" and result.trials == 1
    assert "no difference found" in str(result)
    assert not (tmp_path / "out").exists()


def _repro_env():
    python_dir = os.path.dirname(updraft.__path__[0])
    return dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in [python_dir, os.environ.get("PYTHONPATH", "")] if p))


def _check_repro(out, culprit_text):
    """The reproducer fails on its own, in a fresh process; without the test-only fault it passes."""
    for f in ("graph.txt", "constants.pt", "inputs.pt", "expected.pt", "options.json", "repro.py"):
        assert (out / f).exists(), f
    run = subprocess.run([sys.executable, str(out / "repro.py")], capture_output=True, text=True, env=_repro_env(),
                         timeout=120)
    assert run.returncode == 1, run.stdout + run.stderr
    assert "FAIL" in run.stdout and "BEYOND tolerance" in run.stdout and culprit_text in run.stdout
    fixed = subprocess.run([sys.executable, str(out / "repro.py"), "--no-fault"], capture_output=True, text=True,
                           env=_repro_env(), timeout=120)
    assert fixed.returncode == 0, fixed.stdout + fixed.stderr
    assert "OK" in fixed.stdout
    return run.stdout


def test_pass_fault_is_found_with_a_reproducer(tmp_path):
    model, inputs = _small_mlp()
    out = tmp_path / "repro"
    result = bisect(model, *inputs, config=CompilerConfig(debug_fault="pass:fuse_epilogue"), out_dir=str(out),
                    verbose=False)
    assert result.kind == "pass" and result.passes == ["fuse_epilogue"], str(result)
    assert "culprit: pass fuse_epilogue" in str(result) and result.repro_dir == str(out)
    text = _check_repro(out, "fuse_epilogue")
    # Disabling the culprit in the reproducer fixes it.
    assert "without the culprit (disable_passes=['fuse_epilogue'])" in text and "within tolerance)" in text


@pytest.mark.slow
def test_pass_fault_in_a_resnet_is_found(tmp_path):
    model, inputs = _small_resnet()
    out = tmp_path / "repro"
    result = bisect(model, *inputs, config=CompilerConfig(debug_fault="pass:fold_conv_bn"), out_dir=str(out),
                    verbose=False)
    assert result.kind == "pass" and result.passes == ["fold_conv_bn"], str(result)
    _check_repro(out, "fold_conv_bn")


def test_kernel_fault_is_found_at_the_nodes_of_that_op(tmp_path):
    model, inputs = _small_mlp()
    out = tmp_path / "repro"
    result = bisect(model, *inputs, config=CompilerConfig(debug_fault="kernel:linear"), out_dir=str(out),
                    verbose=False)
    assert result.kind == "nodes", str(result)
    assert result.passes == []
    assert "no pass set explains it" in str(result)
    assert result.nodes and {op for _, op, _ in result.nodes} == {"aten.addmm.default"}, str(result)
    # nn.Sequential has no frame of user code: the source is the Linear module.
    assert all("(Linear)" in src for _, _, src in result.nodes), str(result)
    _check_repro(out, "'nodes'")


def test_cli_bisect(tmp_path, capsys):
    from updraft import cli

    rc = cli.main(["bisect", "--model", "mlp", "--out", str(tmp_path / "o"), "--debug-fault", "pass:fuse_epilogue"])
    text = capsys.readouterr().out
    assert rc == 1, text
    assert "culprit: pass fuse_epilogue" in text and (tmp_path / "o" / "repro.py").exists()
    assert cli.main(["bisect", "--model", "mlp", "--debug-fault", "pass:verify"]) == 2
