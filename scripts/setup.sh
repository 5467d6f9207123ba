#!/usr/bin/env bash
# Sets up everything updraft needs on a fresh Debian machine, idempotently:
# system packages (GoogleTest; Graphviz, which draws the graph dumps' pictures), a virtual environment in .venv with the pinned Python
# dependencies, the package itself (C++ engine + extension + C++ tests) built into build/py, and
# torchvision for the tests in build/torchvision (tools/torchvision_cpu.py).
set -euo pipefail
cd "$(dirname "$0")/.."

apt_missing=()
if ! [ -f /usr/lib/x86_64-linux-gnu/cmake/GTest/GTestConfig.cmake ] && ! [ -f /usr/lib/cmake/GTest/GTestConfig.cmake ]; then
  apt_missing+=(libgtest-dev)
fi
command -v dot >/dev/null || apt_missing+=(graphviz)  # `dot`: .svg pictures in graph dumps
if [ ${#apt_missing[@]} -gt 0 ]; then
  echo "[setup] installing Debian packages: ${apt_missing[*]}"
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq "${apt_missing[@]}" >/dev/null
fi

PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  echo "[setup] creating .venv"
  "$PY" -m venv .venv
fi
. .venv/bin/activate
echo "[setup] installing Python dependencies (torch==2.13.0 CPU, oneDNN 3.2, nanobind, transformers, pytest, pytest-xdist)"
# pip's output goes to a log that is shown only when a step fails.
pip_quiet() {
  local log; log=$(mktemp)
  if ! python -m pip install -q --disable-pip-version-check "$@" >"$log" 2>&1; then
    grep -v "^WARNING: Location" "$log"; rm -f "$log"
    echo "[setup] pip install failed (see above)"; exit 1
  fi
  rm -f "$log"
}
pip_quiet torch==2.13.0 numpy transformers pytest pytest-xdist expecttest matplotlib pillow \
  nanobind scikit-build-core ninja cmake \
  onednn-cpu-gomp==2023.2.0 onednn-devel-cpu-gomp==2023.2.0

echo "[setup] building and installing updraft (engine, extension, C++ tests) into .venv"
pip_quiet --no-build-isolation --no-deps -Ccmake.define.UPDRAFT_BUILD_TESTS=ON .
python -c "import updraft, updraft._C" || { echo "[setup] updraft failed to build or import"; exit 1; }

# PyPI's torchvision 0.28.0 is a CUDA build; beside the CPU torch it loads with generated stub
# CUDA libraries, outside .venv so nothing else imports it (docs/decisions.md, "torchvision").
echo "[setup] torchvision 0.28.0 for the tests into build/torchvision (CPU ops, stub CUDA libraries)"
tv_log=$(mktemp)
if ! python tools/torchvision_cpu.py install build/torchvision >"$tv_log" 2>&1; then
  grep -v "^WARNING: Location" "$tv_log"; rm -f "$tv_log"
  echo "[setup] torchvision for the tests failed (see above)"; exit 1
fi
rm -f "$tv_log"
echo "[setup] ready"
