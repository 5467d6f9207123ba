// libFuzzer target: fuzz/targets.h, updraft::fuzz::text_ir. Built by scripts/fuzz.sh
// (CMake option UPDRAFT_BUILD_FUZZERS); seeds in fuzz/corpus/text_ir.
#include "targets.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  updraft::fuzz::text_ir(data, size);
  return 0;
}
