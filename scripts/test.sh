#!/usr/bin/env bash
# The whole test suite: set up, then the C++ unit tests (GoogleTest via ctest) and the Python
# tests (pytest: ops vs eager, torch.compile end to end, real models).
# Extra arguments go to pytest, e.g. `bash scripts/test.sh -m "not slow"`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
. .venv/bin/activate
echo "[test] C++ unit tests"
ctest --test-dir build/py --output-on-failure -j2
echo "[test] the C/C++ runtime as a user installs it (examples/ against the installed package)"
bash scripts/example.sh
echo "[test] Python tests"
python -m pytest -q "$@"
