// libFuzzer target: fuzz/targets.h, updraft::fuzz::entry. Built by scripts/fuzz.sh
// (CMake option UPDRAFT_BUILD_FUZZERS); seeds in fuzz/corpus/entry.
#include "targets.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  updraft::fuzz::entry(data, size);
  return 0;
}
