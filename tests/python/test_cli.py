"""The `updraft` command line: explain and run on a zoo model, in a fresh interpreter."""
import re
import subprocess
import sys

import pytest

from updraft.cli import main


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "updraft.cli", *args],
                          capture_output=True, text=True, timeout=300)


def test_explain_mlp_reports_engine_coverage():
    out = _cli("explain", "--model", "mlp", "--batch", "2")
    assert out.returncode == 0, out.stderr[-3000:]
    assert "model mlp batch 2" in out.stdout
    m = re.search(r"compute ops in engine: (\d+)/(\d+) \(100\.0%\)", out.stdout)
    assert m and int(m.group(1)) == int(m.group(2)) > 0, out.stdout
    assert "aten.addmm.default" in out.stdout and "aten.relu.default" in out.stdout, out.stdout


def test_run_mlp_checks_against_eager():
    out = _cli("run", "--model", "mlp", "--iters", "2", "--warmup", "1")
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert re.search(r"updraft: (\d+)/\1 compute ops in the engine \(100\.0%\)", out.stdout), out.stdout
    assert "OK at rtol=atol=1e-3" in out.stdout
    assert "| updraft |" in out.stdout


@pytest.mark.parametrize("command", ["explain", "run"])
def test_unknown_model(command, capsys):
    assert main([command, "--model", "no-such-model"]) == 2
    err = capsys.readouterr().err
    assert "unknown model 'no-such-model'" in err and "mlp" in err


def test_explain_rejects_unknown_options(capsys):
    with pytest.raises(SystemExit) as e:
        main(["explain", "--model", "mlp", "--iters", "3"])
    assert e.value.code == 2
    assert "unrecognized arguments: --iters 3" in capsys.readouterr().err
