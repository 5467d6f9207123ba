// The row groups of grouped_mm (docs/ops.md), shared by its ref and cpu kernels. They follow
// transformers' grouped_mm_fallback, which the op replaces: start = 0; for each group e,
// end = offs[e]; a group with start == end is skipped; otherwise rows x[start:end] (Python
// slicing: negative bounds count from S, bounds clamp to [0, S]) get w[e], a later group
// overwriting an earlier one; then start = end. Rows no group writes are 0.
#pragma once
#include <algorithm>
#include <cstdint>

#include "core/tensor.h"

namespace updraft {

inline int64_t grouped_slice_bound(int64_t v, int64_t S) {
  return v < 0 ? std::max<int64_t>(v + S, 0) : std::min(v, S);
}

// f(e, lo, hi) for each group that writes rows [lo, hi) (hi > lo), in order.
template <typename F>
void for_each_group(const TensorView& offs, int64_t S, F&& f) {
  int64_t E = offs.numel();
  int64_t start = 0;
  for (int64_t e = 0; e < E; ++e) {
    int64_t end = offs.dtype == DType::i32 ? offs.ptr<const int32_t>()[e * offs.strides[0]]
                                           : offs.ptr<const int64_t>()[e * offs.strides[0]];
    if (start == end) continue;
    int64_t lo = grouped_slice_bound(start, S), hi = grouped_slice_bound(end, S);
    if (hi > lo) f(e, lo, hi);
    start = end;
  }
}

}  // namespace updraft
