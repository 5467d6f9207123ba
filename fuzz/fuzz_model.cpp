// libFuzzer target: fuzz/targets.h, updraft::fuzz::model. Built by scripts/fuzz.sh
// (CMake option UPDRAFT_BUILD_FUZZERS); seeds in fuzz/corpus/model.
#include "targets.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  updraft::fuzz::model(data, size);
  return 0;
}
