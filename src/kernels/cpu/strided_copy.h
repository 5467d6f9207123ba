// copy_strided: the one fast copy every CPU data-movement kernel is built on. permute, slice,
// expand, concat, split, pad and copy are all "copy this view of the input into that view of
// the output"; they differ only in how they build the two views.
//
//   TensorView src = in;                       // e.g. a permuted or sliced view of the input
//   std::swap(src.sizes[0], src.sizes[1]);
//   std::swap(src.strides[0], src.strides[1]);
//   copy_strided(src, out, 0);                 // out: contiguous, same logical shape
//
// Works for any dtype by element size (1, 2, 4 or 8 bytes). Fast paths: contiguous rows
// (memcpy), broadcast rows (stride 0, fill), and a cache-blocked 2-D transpose when the source's
// unit-stride dim is not the innermost one. Never throws inside its parallel region.
#pragma once
#include <cstdint>
#include <vector>

#include "core/tensor.h"

namespace updraft::cpu {

// dst and src must have the same logical shape (sizes). Neither may overlap the other, except
// that src and dst may be the same view (same data and strides): then nothing is copied.
// num_threads: 0 lets OpenMP choose; small copies run on the calling thread.
void copy_strided(const TensorView& src, const TensorView& dst, int num_threads);

// Fill every element of dst (any strides) with the element at `value` (dtype_size bytes).
void fill_strided(const TensorView& dst, const void* value, int num_threads);

// A contiguous copy of v when it is strided; v's own memory when it is already contiguous.
// The copy is a per-call allocation: only graph inputs arrive strided, intermediates never do.
class Packed {
 public:
  Packed(const TensorView& v, int num_threads);
  const TensorView& view() const { return view_; }
  template <typename T> const T* ptr() const { return view_.ptr<const T>(); }

 private:
  TensorView view_;
  std::vector<uint64_t> storage_;  // 8-byte aligned backing for the packed copy
};

// Views sharing `v`'s memory.
TensorView narrow_view(const TensorView& v, int dim, int64_t start, int64_t len, int64_t step = 1);
TensorView permute_view(const TensorView& v, const std::vector<int>& dims);

// Element offset in t of batch element `idx` (the output's nb leading batch indices), for a
// batched matrix op: t's leading t.ndim - 2 dims align to the output's from the right and
// broadcast where their size is 1.
inline int64_t batch_offset(const TensorView& t, const int64_t* idx, int nb) {
  const int tb = t.ndim - 2;
  int64_t off = 0;
  for (int d = 0; d < tb; ++d)
    if (t.sizes[d] != 1) off += idx[nb - tb + d] * t.strides[d];
  return off;
}

}  // namespace updraft::cpu
