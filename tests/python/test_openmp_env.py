"""updraft's default OpenMP wait (python/updraft/__init__.py): when updraft is imported before any
OpenMP runtime loads, libgomp's own default (nothing set) on a machine with free cores and
passive waiting (OMP_WAIT_POLICY=passive) on one whose load average already fills them; never
over a user's own setting."""
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


CALM = "import os\nos.getloadavg = lambda: (0.0, 0.0, 0.0)\nimport updraft"
LOADED = "import os\nos.getloadavg = lambda: (float(os.cpu_count()), 0.0, 0.0)\nimport updraft"


def test_runtime_default_on_a_calm_machine():
    assert _policy_after(CALM) == "<unset> <unset>"


def test_passive_when_the_load_already_fills_the_cores():
    assert _policy_after(LOADED) == "passive <unset>"


def test_rule_boundaries():
    from updraft import _wait_setting

    assert _wait_setting(0.0, 2) is None
    assert _wait_setting(1.9, 2) is None
    assert _wait_setting(2.0, 2) == ("OMP_WAIT_POLICY", "passive")
    assert _wait_setting(20.0, 64) is None


def test_user_setting_wins():
    for code in (CALM, LOADED):
        assert _policy_after(code, OMP_WAIT_POLICY="active") == "active <unset>"
        assert _policy_after(code, GOMP_SPINCOUNT="5") == "<unset> 5"


def test_untouched_once_an_openmp_runtime_is_loaded():
    # torch loads libgomp, which has then read its settings: changing the variable would only
    # mislead (and leak into child processes).
    assert _policy_after("import torch\n" + LOADED) == "<unset> <unset>"
