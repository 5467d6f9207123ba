// all_finite: whether an f32 buffer holds no NaN and no infinity. Plan::execute runs it over
// the graph inputs that runtime/finite_inputs.h names, once per call, before any step.
#pragma once
#include <cstdint>

namespace updraft::cpu {

// n floats at p; `threads` as a kernel's budget (1: on the calling thread; 0: OpenMP's count).
bool all_finite(const float* p, int64_t n, int threads);

}  // namespace updraft::cpu
