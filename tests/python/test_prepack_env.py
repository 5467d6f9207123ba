"""UPDRAFT_PREPACK_WEIGHTS=0: linear/matmul read their constant weights in place (no packed
copy), trading some speed for memory. Run in a subprocess, as a user would set it (the variable
is read when the CompilerConfig is built; test_kernel_knobs.py has the in-process checks).
Tolerance: f32 linear, 1e-4 (as test_ops: oneDNN sums K in blocks)."""
import os
import subprocess
import sys

_CODE = """
import torch, updraft
torch.manual_seed(0)
m = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.GELU(), torch.nn.Linear(64, 8)).eval()
x = torch.randn(5, 32)
fast = torch.compile(m, backend="updraft")
with torch.no_grad():
    torch.testing.assert_close(fast(x), m(x), rtol=1e-4, atol=1e-4)
prof = updraft.profile(fast, x, runs=1, warmup=1)
print(sorted({r["kernel"] for r in prof.rows if r["op"] == "linear"}))
"""


def _linear_kernels(setting: str | None) -> str:
    env = {k: v for k, v in os.environ.items() if k != "UPDRAFT_PREPACK_WEIGHTS"}
    if setting is not None:
        env["UPDRAFT_PREPACK_WEIGHTS"] = setting
    out = subprocess.run([sys.executable, "-c", _CODE], capture_output=True, text=True, timeout=300, env=env)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip().splitlines()[-1]


def test_weights_in_place_when_prepack_is_off():
    kernels = _linear_kernels("0")
    assert "inplace_w" in kernels and "prepacked" not in kernels, kernels


def test_prepacked_by_default():
    assert "prepacked" in _linear_kernels(None)
