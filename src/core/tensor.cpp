#include "core/tensor.h"

#include <sys/mman.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "core/checked.h"
#include "core/error.h"

namespace updraft {

int64_t numel_of(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t s : shape) {
    if (s == 0) return 0;  // empty whatever the other sizes are (torch: [0, 2^62, 4] is empty)
  }
  for (int64_t s : shape) n = checked_mul<int64_t>(n, s, "tensor", "element count");
  return n;
}

std::vector<int64_t> contiguous_strides(const std::vector<int64_t>& shape) {
  std::vector<int64_t> st(shape.size());
  int64_t acc = 1;
  for (int i = static_cast<int>(shape.size()) - 1; i >= 0; --i) {
    st[i] = acc;
    acc *= shape[i] > 0 ? shape[i] : 1;
  }
  return st;
}

int64_t TensorView::numel() const {
  int64_t n = 1;
  for (int i = 0; i < ndim; ++i) {
    if (sizes[i] == 0) return 0;
  }
  for (int i = 0; i < ndim; ++i) n = checked_mul<int64_t>(n, sizes[i], "tensor", "element count");
  return n;
}

bool TensorView::is_contiguous() const {
  // No elements, no layout: torch calls every empty tensor contiguous, whatever its strides
  // ([5, 0, 10] comes as strides [10, 10, 1]).
  if (numel() == 0) return true;
  int64_t expect = 1;
  for (int i = ndim - 1; i >= 0; --i) {
    if (sizes[i] != 1 && strides[i] != expect) return false;
    expect *= sizes[i];
  }
  return true;
}

TensorView TensorView::contiguous(void* data, DType dtype, const std::vector<int64_t>& shape) {
  UPDRAFT_CHECK(shape.size() <= static_cast<size_t>(kMaxDims), "tensor",
                "rank " + std::to_string(shape.size()) + " exceeds the engine limit of 8");
  TensorView v;
  v.data = data;
  v.dtype = dtype;
  v.ndim = static_cast<int>(shape.size());
  auto st = contiguous_strides(shape);
  for (int i = 0; i < v.ndim; ++i) {
    v.sizes[i] = shape[i];
    v.strides[i] = st[i];
  }
  return v;
}

std::shared_ptr<void> aligned_alloc_shared(size_t bytes) {
  // Large buffers (weights, prepacked weights, plan arenas) are 2 MB aligned and asked to be
  // backed by transparent huge pages: a gemm streaming a prepacked weight of several MB then
  // takes far fewer TLB misses (2-7% on BERT-base's gemms, docs/BENCHMARKS.md). Where THP is
  // off ("never") the advice is ignored.
  // Only whole 2 MB pages are advised: a partly used last huge page would be resident in full
  // (a 2.4 MB weight would cost 4 MB), so the tail stays on 4 KB pages.
  const size_t align = bytes >= kHugePage ? kHugePage : 64;
  const size_t rounded = bytes == 0 ? 64 : (bytes + 63) / 64 * 64;
  void* p = nullptr;
  if (posix_memalign(&p, align, rounded) != 0 || p == nullptr)
    throw Error("tensor", "out of memory allocating " + std::to_string(bytes) + " bytes");
  if (align == kHugePage) advise_huge_pages(p, bytes);
  return std::shared_ptr<void>(p, [](void* q) { std::free(q); });
}

void advise_huge_pages(void* p, size_t bytes) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  const uintptr_t first = (a + kHugePage - 1) / kHugePage * kHugePage, end = (a + bytes) / kHugePage * kHugePage;
  if (end > first) madvise(reinterpret_cast<void*>(first), end - first, MADV_HUGEPAGE);
}

Tensor::Tensor(DType dtype, std::vector<int64_t> shape) : dtype_(dtype), shape_(std::move(shape)) {
  // The one place an owning tensor's size is decided: a negative size or a count that wraps
  // would allocate less than its readers walk.
  size_t n = shape_nbytes(shape_, dtype_, "tensor");
  storage_ = aligned_alloc_shared(n);
  std::memset(storage_.get(), 0, n);
}

Tensor::Tensor(DType dtype, std::vector<int64_t> shape, std::shared_ptr<void> storage)
    : dtype_(dtype), shape_(std::move(shape)), storage_(std::move(storage)) {
  shape_nbytes(shape_, dtype_, "tensor");
}

}  // namespace updraft
