// TensorView: a non-owning view of memory the engine reads or writes (strides in elements).
// Tensor: an owning, contiguous buffer (constants, reference-kernel results, tests).
//
// Kernels see only TensorViews; who owns the memory (torch, the arena, a constant) is the
// runtime's business. Intermediates planned by the engine are always contiguous; graph inputs
// may arrive strided, and the execution plan packs them (the rule: src/runtime/plan.h).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/dtype.h"

namespace updraft {

constexpr int kMaxDims = 8;

struct TensorView {
  void* data = nullptr;
  DType dtype = DType::f32;
  int ndim = 0;
  int64_t sizes[kMaxDims] = {};
  int64_t strides[kMaxDims] = {};  // in elements

  int64_t numel() const;
  bool is_contiguous() const;
  size_t nbytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype); }
  std::vector<int64_t> shape() const { return {sizes, sizes + ndim}; }
  template <typename T> T* ptr() const { return static_cast<T*>(data); }

  // A contiguous view of `shape` over `data`.
  static TensorView contiguous(void* data, DType dtype, const std::vector<int64_t>& shape);
};

std::vector<int64_t> contiguous_strides(const std::vector<int64_t>& shape);
int64_t numel_of(const std::vector<int64_t>& shape);

// Owning contiguous tensor. `storage` may be shared (a constant kept alive by its owner,
// e.g. a torch parameter held through the bindings) or allocated here (64-byte aligned).
class Tensor {
 public:
  Tensor() = default;
  Tensor(DType dtype, std::vector<int64_t> shape);  // allocates, zero-filled
  Tensor(DType dtype, std::vector<int64_t> shape, std::shared_ptr<void> storage);  // wraps

  DType dtype() const { return dtype_; }
  const std::vector<int64_t>& shape() const { return shape_; }
  int64_t numel() const { return numel_of(shape_); }
  size_t nbytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype_); }
  void* data() const { return storage_.get(); }
  template <typename T> T* ptr() const { return static_cast<T*>(storage_.get()); }
  TensorView view() const { return TensorView::contiguous(storage_.get(), dtype_, shape_); }
  bool defined() const { return storage_ != nullptr || numel() == 0; }

 private:
  DType dtype_ = DType::f32;
  std::vector<int64_t> shape_;
  std::shared_ptr<void> storage_;
};

// 64-byte aligned allocation owned by a shared_ptr; from kHugePage bytes up, 2 MB aligned and
// advised to use transparent huge pages (madvise MADV_HUGEPAGE).
constexpr size_t kHugePage = size_t{2} << 20;
std::shared_ptr<void> aligned_alloc_shared(size_t bytes);

// Advises transparent huge pages for the whole 2 MB pages inside [p, p + bytes) (madvise
// MADV_HUGEPAGE; a no-op where THP is off, and for a range holding no whole huge page).
void advise_huge_pages(void* p, size_t bytes);

}  // namespace updraft
