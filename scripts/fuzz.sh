#!/usr/bin/env bash
# Builds the libFuzzer targets (fuzz/) with ASan + UBSan and runs each for a bounded time.
#
#   scripts/fuzz.sh              # 30 s per target, 4 targets: 2 minutes of fuzzing (CI)
#   FUZZ_SECONDS=600 scripts/fuzz.sh text_ir   # a longer campaign, one target
#
# Installs clang 14, its libFuzzer runtime and OpenMP when missing (Debian 12: clang-14,
# libclang-rt-14-dev, libomp-14-dev). Builds in build/fuzz with -DUPDRAFT_BUILD_FUZZERS=ON (off by default). Each run
# starts from the committed corpus (fuzz/corpus/<target>) plus freshly generated seeds, and
# works in build/fuzz/corpus/<target>, so new inputs never dirty the tree. A crash leaves its
# input as build/fuzz/crash-* and fails the script: add it to fuzz/regressions/<target>/ once
# fixed (tests/cpp/test_hardening_parse.cpp replays that folder).
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
# Per target: the CI lane runs every target, so a new target takes its time from the others.
SECONDS_PER_TARGET="${FUZZ_SECONDS:-30}"
JOBS="${FUZZ_BUILD_JOBS:-2}"
PY="${PYTHON:-$ROOT/.venv/bin/python}"
[ -x "$PY" ] || PY="$(command -v python3)"
CMAKE="$(dirname "$PY")/cmake"; [ -x "$CMAKE" ] || CMAKE="$(command -v cmake)"
NINJA="$(dirname "$PY")/ninja"; [ -x "$NINJA" ] || NINJA="$(command -v ninja || true)"
TARGETS=("$@")
[ ${#TARGETS[@]} -gt 0 ] || TARGETS=(text_ir entry dim model)

CLANG="$(command -v clang++-14 || command -v clang++ || true)"
if [ -z "$CLANG" ] || ! ls /usr/lib/llvm-14/lib/clang/*/lib/linux/libclang_rt.fuzzer-x86_64.a >/dev/null 2>&1 \
   || ! ls /usr/lib/llvm-14/lib/libomp.so >/dev/null 2>&1; then
  echo "[fuzz] installing clang-14 and libclang-rt-14-dev (libFuzzer's runtime)"
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends clang-14 libclang-rt-14-dev libomp-14-dev
  CLANG="$(command -v clang++-14)"
fi

GEN=(-G Ninja); [ -n "$NINJA" ] && GEN+=(-DCMAKE_MAKE_PROGRAM="$NINJA")
# -O1 with line tables: readable sanitizer stacks, and a build the 2-core machines can afford.
"$CMAKE" -S . -B build/fuzz "${GEN[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -gline-tables-only" \
  -DCMAKE_CXX_COMPILER="$CLANG" -DUPDRAFT_BUILD_FUZZERS=ON -DPython_EXECUTABLE="$PY" >/dev/null
"$CMAKE" --build build/fuzz -j"$JOBS" --target make_seeds "${TARGETS[@]/#/fuzz_}"

# oneDNN is a shared library of the Python environment.
export LD_LIBRARY_PATH="$("$PY" -c 'import sys; print(sys.prefix)')/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
# Leaks are not what these targets look for (the op table and kernel registry are process-wide).
export ASAN_OPTIONS="detect_leaks=0:allocator_may_return_null=1${ASAN_OPTIONS:+:$ASAN_OPTIONS}"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1${UBSAN_OPTIONS:+:$UBSAN_OPTIONS}"

status=0
for t in "${TARGETS[@]}"; do
  work="build/fuzz/corpus/$t"
  mkdir -p "$work/entry" "$work/text_ir" "$work/model"
  build/fuzz/make_seeds "$work"  # writes $work/entry, $work/model and $work/text_ir; keep the one for $t
  seeds=("$work/$t")
  [ "$t" = text_ir ] || [ "$t" = entry ] || [ "$t" = model ] || seeds=()
  mkdir -p "$work/found"
  echo "[fuzz] $t: ${SECONDS_PER_TARGET}s"
  if ! (cd build/fuzz && ./fuzz_"$t" -max_total_time="$SECONDS_PER_TARGET" -max_len=65536 -rss_limit_mb=2048 \
        -malloc_limit_mb=1024 -timeout=10 -print_final_stats=1 "$ROOT/$work/found" "${seeds[@]/#/$ROOT/}" \
        "$ROOT/fuzz/corpus/$t" 2>&1 | tee "$ROOT/build/fuzz/$t.log" | grep -E "^#[0-9]+.*(DONE|pulse)|ERROR|SUMMARY|stat::" ); then
    status=1
  fi
  grep -q "ERROR: libFuzzer\|ERROR: AddressSanitizer\|runtime error" "build/fuzz/$t.log" && status=1
done
exit $status
