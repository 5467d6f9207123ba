// libFuzzer target: fuzz/targets.h, updraft::fuzz::dim. Built by scripts/fuzz.sh
// (CMake option UPDRAFT_BUILD_FUZZERS); seeds in fuzz/corpus/dim.
#include "targets.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  updraft::fuzz::dim(data, size);
  return 0;
}
