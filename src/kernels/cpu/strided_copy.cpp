#include "kernels/cpu/strided_copy.h"

#include <omp.h>

#include <algorithm>
#include <cstring>

#include "core/error.h"
#include "kernels/cpu/threads.h"

namespace updraft::cpu {
namespace {

constexpr int64_t kParallelBytes = int64_t{1} << 18;  // below ~256 KiB threads cost more than they save
constexpr int64_t kTile = 32;                          // transpose tile: 32x32 elements stay in L1

// A copy after dropping size-1 dims and merging neighbours contiguous in both src and dst.
struct CopyPlan {
  int nd = 0;
  int64_t size[kMaxDims], ss[kMaxDims], ds[kMaxDims];
};

CopyPlan coalesce(const TensorView& src, const TensorView& dst) {
  CopyPlan p;
  for (int d = 0; d < src.ndim; ++d) {
    int64_t n = src.sizes[d];
    if (n == 1) continue;
    if (p.nd > 0 && p.ss[p.nd - 1] == n * src.strides[d] && p.ds[p.nd - 1] == n * dst.strides[d]) {
      p.size[p.nd - 1] *= n;
      p.ss[p.nd - 1] = src.strides[d];
      p.ds[p.nd - 1] = dst.strides[d];
    } else {
      p.size[p.nd] = n;
      p.ss[p.nd] = src.strides[d];
      p.ds[p.nd] = dst.strides[d];
      ++p.nd;
    }
  }
  return p;
}

// Source and destination offsets of the `linear`-th combination of the plan's dims listed in
// `dims` (row-major over that list).
void offsets(const CopyPlan& p, const int* dims, int count, int64_t linear, int64_t& so, int64_t& dof) {
  so = dof = 0;
  for (int k = count - 1; k >= 0; --k) {
    int d = dims[k];
    int64_t i = linear % p.size[d];
    linear /= p.size[d];
    so += i * p.ss[d];
    dof += i * p.ds[d];
  }
}

int threads_for(int64_t bytes, int num_threads) {
  if (bytes < kParallelBytes) return 1;
  return num_threads > 0 ? num_threads : omp_get_max_threads();
}

// Rows of the coalesced copy; a row long enough is cut into pieces so that a copy that coalesces
// to a few long rows (a contiguous tensor, a broadcast fill: one row) still spreads over the
// threads, where one task per row ran a 154 MB gradient fill on one core.
constexpr int64_t kPieceBytes = int64_t{1} << 16;

template <typename T>
void copy_rows(const CopyPlan& p, const T* src, T* dst, int num_threads) {
  int outer_dims[kMaxDims];
  for (int d = 0; d + 1 < p.nd; ++d) outer_dims[d] = d;
  int last = p.nd - 1;
  int64_t n = p.size[last], s1 = p.ss[last], d1 = p.ds[last];
  int64_t outer = 1;
  for (int d = 0; d < last; ++d) outer *= p.size[d];
  int threads = threads_for(outer * n * static_cast<int64_t>(sizeof(T)), num_threads);
  int64_t pieces = 1;  // per row
  if (threads > 1 && outer < 4 * threads)
    pieces = std::max<int64_t>(1, std::min<int64_t>((4 * threads + outer - 1) / outer,
                                                    n * static_cast<int64_t>(sizeof(T)) / kPieceBytes));
  int64_t piece = (n + pieces - 1) / pieces;
  parallel_for(outer * pieces, threads, [&](int64_t t) {
    int64_t o = t / pieces, j0 = (t % pieces) * piece, len = std::min(n, j0 + piece) - j0;
    if (len <= 0) return;
    int64_t so, dof;
    offsets(p, outer_dims, last, o, so, dof);
    const T* s = src + so + j0 * s1;
    T* d = dst + dof + j0 * d1;
    if (s1 == 1 && d1 == 1) {
      std::memcpy(d, s, len * sizeof(T));
    } else if (s1 == 0 && d1 == 1) {
      std::fill_n(d, len, *s);
    } else if (s1 == 0) {
      T v = *s;
      for (int64_t j = 0; j < len; ++j) d[j * d1] = v;
    } else {
      for (int64_t j = 0; j < len; ++j) d[j * d1] = s[j * s1];
    }
  });
}

// The source's unit-stride dim k is not the innermost: copy (k, last) planes tile by tile so
// both the reads (along k) and the writes (along last) stay within a few cache lines.
template <typename T>
void copy_transposed(const CopyPlan& p, int k, const T* src, T* dst, int num_threads) {
  int last = p.nd - 1;
  int outer_dims[kMaxDims], count = 0;
  for (int d = 0; d < last; ++d)
    if (d != k) outer_dims[count++] = d;
  int64_t outer = 1;
  for (int c = 0; c < count; ++c) outer *= p.size[outer_dims[c]];
  int64_t rows = p.size[k], cols = p.size[last];
  int64_t sr = p.ss[k], sc = p.ss[last], dr = p.ds[k], dc = p.ds[last];
  int64_t row_tiles = (rows + kTile - 1) / kTile, col_tiles = (cols + kTile - 1) / kTile;
  int64_t tasks = outer * row_tiles * col_tiles;
  int threads = threads_for(outer * rows * cols * static_cast<int64_t>(sizeof(T)), num_threads);
  parallel_for(tasks, threads, [&](int64_t t) {
    int64_t o = t / (row_tiles * col_tiles), tile = t % (row_tiles * col_tiles);
    int64_t i0 = (tile / col_tiles) * kTile, j0 = (tile % col_tiles) * kTile;
    int64_t so, dof;
    offsets(p, outer_dims, count, o, so, dof);
    const T* s = src + so;
    T* d = dst + dof;
    int64_t i1 = std::min(rows, i0 + kTile), j1 = std::min(cols, j0 + kTile);
    for (int64_t i = i0; i < i1; ++i)
      for (int64_t j = j0; j < j1; ++j) d[i * dr + j * dc] = s[i * sr + j * sc];
  });
}

template <typename T>
void copy_typed(const CopyPlan& p, const void* src, void* dst, int num_threads) {
  const T* s = static_cast<const T*>(src);
  T* d = static_cast<T*>(dst);
  int last = p.nd - 1;
  if (p.ss[last] != 1 && p.ss[last] != 0 && p.ds[last] == 1) {
    for (int k = 0; k < last; ++k)
      if (p.ss[k] == 1 && p.size[last] >= 4 && p.size[k] >= 4) return copy_transposed(p, k, s, d, num_threads);
  }
  copy_rows(p, s, d, num_threads);
}

}  // namespace

void copy_strided(const TensorView& src, const TensorView& dst, int num_threads) {
  UPDRAFT_CHECK(src.ndim == dst.ndim && src.dtype == dst.dtype, "kernels", "copy_strided: views do not match");
  for (int d = 0; d < src.ndim; ++d)
    UPDRAFT_CHECK(src.sizes[d] == dst.sizes[d], "kernels", "copy_strided: shapes differ");
  if (src.numel() == 0) return;
  if (src.data == dst.data && std::equal(src.strides, src.strides + src.ndim, dst.strides))
    return;  // the same view: a graph input written in place (EnginePartition's input writes)
  CopyPlan p = coalesce(src, dst);
  if (p.nd == 0) {  // one element
    std::memcpy(dst.data, src.data, dtype_size(src.dtype));
    return;
  }
  switch (dtype_size(src.dtype)) {
    case 1: return copy_typed<uint8_t>(p, src.data, dst.data, num_threads);
    case 2: return copy_typed<uint16_t>(p, src.data, dst.data, num_threads);
    case 4: return copy_typed<uint32_t>(p, src.data, dst.data, num_threads);
    case 8: return copy_typed<uint64_t>(p, src.data, dst.data, num_threads);
    default: throw Error("kernels", std::string("copy_strided: unsupported element size for ") + dtype_name(src.dtype));
  }
}

void fill_strided(const TensorView& dst, const void* value, int num_threads) {
  // A stride-0 source of the right shape is a broadcast of `value`.
  TensorView src = dst;
  src.data = const_cast<void*>(value);
  for (int d = 0; d < src.ndim; ++d) src.strides[d] = 0;
  copy_strided(src, dst, num_threads);
}

Packed::Packed(const TensorView& v, int num_threads) : view_(v) {
  if (v.is_contiguous()) return;
  storage_.resize((v.nbytes() + 7) / 8 + 1);
  view_ = TensorView::contiguous(storage_.data(), v.dtype, v.shape());
  copy_strided(v, view_, num_threads);
}

TensorView narrow_view(const TensorView& v, int dim, int64_t start, int64_t len, int64_t step) {
  TensorView r = v;
  r.data = static_cast<char*>(v.data) + start * v.strides[dim] * static_cast<int64_t>(dtype_size(v.dtype));
  r.sizes[dim] = len;
  r.strides[dim] = v.strides[dim] * step;
  return r;
}

TensorView permute_view(const TensorView& v, const std::vector<int>& dims) {
  TensorView r = v;
  for (size_t k = 0; k < dims.size(); ++k) {
    r.sizes[k] = v.sizes[dims[k]];
    r.strides[k] = v.strides[dims[k]];
  }
  return r;
}

}  // namespace updraft::cpu
