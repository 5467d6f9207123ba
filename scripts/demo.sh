#!/usr/bin/env bash
# The main job: set up, then compile a real model with torch.compile(backend="updraft"),
# check it against eager PyTorch and print eager vs updraft latency and compile time.
# Extra arguments go to the demo, e.g. `bash scripts/demo.sh --model bert`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
. .venv/bin/activate
python -m updraft.demo "$@"
