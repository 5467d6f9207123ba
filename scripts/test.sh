#!/usr/bin/env bash
# The whole test suite: set up, then the C++ unit tests (GoogleTest via ctest) and the Python
# tests (pytest: ops vs eager, torch.compile end to end, real models).
# Extra arguments go to pytest, e.g. `bash scripts/test.sh -m "not slow"`; the Python tests run
# in one worker process per core (pytest-xdist: most of a test's time is Dynamo and the
# compiler in one Python thread, so one process leaves a core idle); `-n 0` runs them in this
# process.
set -euo pipefail
cd "$(dirname "$0")/.."
t0=$(date +%s)
since() { echo "$(( $(date +%s) - t0 )) s"; }
bash scripts/setup.sh
echo "[test] set-up: $(since)"
. .venv/bin/activate
echo "[test] C++ unit tests"
ctest --test-dir build/py --output-on-failure -j2
echo "[test] the C/C++ runtime as a user installs it (examples/ against the installed package)"
bash scripts/example.sh
echo "[test] Python tests ($(since) so far)"
# One worker per core, each running multi-threaded steps: the cores are oversubscribed, where
# threads that spin while they wait (libgomp's default, which `import updraft` keeps on a calm
# machine) collapse; sleeping at once keeps the suite's time (docs/llm.md, "Threads waiting").
export OMP_WAIT_POLICY="${OMP_WAIT_POLICY:-passive}"
python -m pytest -q -n auto --dist worksteal --durations=25 "$@"
echo "[test] all: $(since)"
