"""updraft's default OpenMP wait (python/updraft/__init__.py): a short spin (GOMP_SPINCOUNT=1000)
when updraft is imported before any OpenMP runtime loads, and never over a user's own setting."""
import os
import subprocess
import sys


def _policy_after(code: str, **env_overrides: str) -> str:
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}
    env.update(env_overrides)
    code += ("\nimport os; print(os.environ.get('OMP_WAIT_POLICY', '<unset>') + ' '"
             " + os.environ.get('GOMP_SPINCOUNT', '<unset>'))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip().splitlines()[-1]


def test_short_spin_when_imported_first():
    assert _policy_after("import updraft") == "<unset> 1000"


def test_user_setting_wins():
    assert _policy_after("import updraft", OMP_WAIT_POLICY="active") == "active <unset>"
    assert _policy_after("import updraft", GOMP_SPINCOUNT="5") == "<unset> 5"


def test_untouched_once_an_openmp_runtime_is_loaded():
    # torch loads libgomp, which has then read its settings: changing the variable would only
    # mislead (and leak into child processes).
    assert _policy_after("import torch\nimport updraft") == "<unset> <unset>"
