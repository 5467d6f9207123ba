#!/usr/bin/env bash
# The C/C++ runtime as a user gets it (docs/runtime.md): configure and build libupdraft_runtime,
# install it into a temporary prefix, build examples/ as a separate CMake project against the
# INSTALLED package (find_package(updraft) -> updraft::runtime), write a small model file with
# Python (text IR -> _C.compile -> _C.save_model), run the C++ and C examples on it, and check
# the C++ example's output statistics against the same Executable run from Python.
#
# Usage: bash scripts/example.sh   (after scripts/setup.sh has made .venv)
# The library comes from scripts/setup.sh's build (build/py, which builds it beside the tests
# at the cost of one link) when that has it, else from a build of its own in build/runtime
# (the engine compiled once more; kept between runs). Environment: PYTHON (default
# .venv/bin/python, which must import updraft._C), UPDRAFT_RUNTIME_BUILD (a build directory to
# use instead), UPDRAFT_JOBS (default 2). Prints each phase's time.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
PY=${PYTHON:-$ROOT/.venv/bin/python}
BUILD=${UPDRAFT_RUNTIME_BUILD:-}
if [ -z "$BUILD" ]; then
  BUILD=build/runtime
  grep -q "^UPDRAFT_BUILD_RUNTIME:BOOL=ON" build/py/CMakeCache.txt 2>/dev/null && BUILD=build/py
fi
JOBS=${UPDRAFT_JOBS:-2}
[ -x "$PY" ] || { echo "[example] no Python at $PY; run bash scripts/setup.sh first, or set PYTHON"; exit 2; }
# cmake and ninja come with the environment (scripts/setup.sh installs them there).
PYBIN=$(dirname "$PY")
CMAKE=$(command -v "$PYBIN/cmake" || command -v cmake)
GEN=()
NINJA=$(command -v "$PYBIN/ninja" || command -v ninja || true)
[ -n "$NINJA" ] && GEN=(-G Ninja -DCMAKE_MAKE_PROGRAM="$NINJA")
LAUNCHER=()
command -v ccache >/dev/null && LAUNCHER=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)

WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
PREFIX=$WORK/prefix
t0=$(date +%s)
phase() { echo "[example] $1 ($(( $(date +%s) - t0 )) s so far)"; }

phase "build the runtime in $BUILD"
if [ ! -f "$BUILD/CMakeCache.txt" ]; then
  "$CMAKE" -S . -B "$BUILD" "${GEN[@]}" "${LAUNCHER[@]}" -DCMAKE_BUILD_TYPE=Release -DUPDRAFT_BUILD_RUNTIME=ON \
    -DUPDRAFT_BUILD_TESTS=OFF -DUPDRAFT_BUILD_PYTHON=OFF -DPython_EXECUTABLE="$PY" >"$WORK/configure.log" 2>&1 ||
    { cat "$WORK/configure.log"; echo "[example] configuring the runtime failed"; exit 1; }
fi
"$CMAKE" --build "$BUILD" --target updraft_runtime -j "$JOBS" >"$WORK/build.log" 2>&1 ||
  { tail -50 "$WORK/build.log"; echo "[example] building the runtime failed"; exit 1; }

phase "install into a temporary prefix"
"$CMAKE" --install "$BUILD" --component runtime --prefix "$PREFIX" >/dev/null
# What a user's app may include is the public headers only.
[ "$(ls "$PREFIX/include/updraft")" = "$(printf 'runtime.h\nupdraft_c.h')" ] ||
  { echo "[example] the install has other headers than runtime.h and updraft_c.h:"; ls "$PREFIX/include/updraft"; exit 1; }

phase "build examples/ against the installed package"
"$CMAKE" -S examples -B "$WORK/examples" "${GEN[@]}" -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$PREFIX" \
  >"$WORK/ex-configure.log" 2>&1 || { cat "$WORK/ex-configure.log"; echo "[example] configuring examples/ failed"; exit 1; }
"$CMAKE" --build "$WORK/examples" -j "$JOBS" >"$WORK/ex-build.log" 2>&1 ||
  { cat "$WORK/ex-build.log"; echo "[example] building examples/ failed"; exit 1; }

phase "write a model file with Python"
"$PY" - "$WORK/mlp.updraft" "$WORK/expect.txt" <<'EOF'
import sys
import numpy as np
from updraft import _C

# A two-layer MLP over a symbolic batch, weights from the engine's seeded generator.
TEXT = """graph(%x: f32[s0, 64]) {
  %w1 = constant f32[64, 32] random(seed=1, lo=-0.2, hi=0.2)
  %b1 = constant f32[32] random(seed=2)
  %w2 = constant f32[32, 10] random(seed=3, lo=-0.5, hi=0.5)
  %b2 = constant f32[10] random(seed=4)
  %0 = matmul(%x, %w1) : f32[s0, 32]
  %1 = add(%0, %b1) : f32[s0, 32]
  %2 = relu(%1) : f32[s0, 32]
  %3 = matmul(%2, %w2) : f32[s0, 10]
  %4 = add(%3, %b2) : f32[s0, 10]
  return (%4)
}"""
exe = _C.compile(_C.parse_graph(TEXT), {})
with open(sys.argv[1], "wb") as f:
    f.write(_C.save_model(exe, ["logits"], [("s0", 2, 256)], "scripts/example.sh MLP"))
# What the example must print for ones in (the batch is the range's minimum, 2).
x = np.ones((2, 64), np.float32)
y = np.empty((2, 10), np.float32)
exe.prepare([[2, 64]])
exe.run([x], [y])
with open(sys.argv[2], "w") as f:
    f.write("output %-12s %s %s  mean %.6g  min %.6g  max %.6g\n"
            % ("logits", "f32", "[2, 10]", y.astype(np.float64).mean(), y.min(), y.max()))
EOF

phase "run the C++ example"
"$WORK/examples/run_model" "$WORK/mlp.updraft" --threads 1 | tee "$WORK/cpp.txt"
grep -qxF "$(cat "$WORK/expect.txt")" "$WORK/cpp.txt" ||
  { echo "[example] the C++ example's output differs from the engine run from Python; expected:"; cat "$WORK/expect.txt"; exit 1; }

phase "run the C example"
"$WORK/examples/run_model_c" "$WORK/mlp.updraft" | tee "$WORK/c.txt"
grep -q "^output logits f32 rank 2" "$WORK/c.txt" || { echo "[example] the C example printed no output line"; exit 1; }

# A bad file is an error message and a non-zero exit, not a crash.
head -c 100 "$WORK/mlp.updraft" >"$WORK/truncated.updraft"
if "$WORK/examples/run_model" "$WORK/truncated.updraft" 2>"$WORK/err.txt"; then
  echo "[example] a truncated model file was not refused"; exit 1
fi
grep -q "^error: \[model\]" "$WORK/err.txt" || { echo "[example] unexpected error text:"; cat "$WORK/err.txt"; exit 1; }
phase "ok"
