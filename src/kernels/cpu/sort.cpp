// CPU sort: rows along `dim` sorted in parallel (one OpenMP task per row), each row copied
// into a contiguous (value, position) buffer, ordered with std::stable_sort by
// kernels/sort_order.h and written back. Strided inputs are packed first.
// CPU topk: the same row split, each row selected by kernels/topk_select.h (ATen's choice
// among ties), only the first k written.
#include <omp.h>

#include <algorithm>
#include <utility>
#include <vector>

#include "ir/op_table.h"
#include "kernels/cpu/strided_copy.h"
#include "kernels/kernel.h"
#include "kernels/sort_order.h"
#include "kernels/topk_select.h"

namespace updraft {
namespace {

constexpr int64_t kParallelElems = 1 << 14;  // fewer elements than this sort on the calling thread

template <typename T>
void sort_rows(const T* x, int64_t outer, int64_t n, int64_t inner, bool descending, T* vo, int64_t* io,
               int threads) {
  int64_t rows = outer * inner;
  int nt = rows * n < kParallelElems ? 1 : (threads > 0 ? threads : omp_get_max_threads());
#pragma omp parallel num_threads(nt) if (nt > 1)
  {
    std::vector<std::pair<T, int64_t>> row(n);
#pragma omp for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      int64_t base = (r / inner) * n * inner + r % inner;
      for (int64_t k = 0; k < n; ++k) row[k] = {x[base + k * inner], k};
      std::stable_sort(row.begin(), row.end(), [descending](const auto& a, const auto& b) {
        return sort_before(a.first, b.first, descending);
      });
      for (int64_t k = 0; k < n; ++k) {
        vo[base + k * inner] = row[k].first;
        io[base + k * inner] = row[k].second;
      }
    }
  }
}

std::unique_ptr<Kernel> make_sort(const KernelContext& ctx) {
  DType dt = ctx.in_dtype(0);
  if (dt != DType::f32 && dt != DType::f64 && dt != DType::i64 && dt != DType::i32) return nullptr;
  const std::vector<int64_t>& shape = ctx.in_shapes[0];
  int rank = static_cast<int>(shape.size());
  int dim = rank ? normalize_dim(ctx.node.attr("dim").i(), rank, "sort") : 0;
  bool descending = ctx.node.attr("descending").b();
  int threads = ctx.num_threads;
  return make_kernel(std::string("cpu_sort_") + dtype_name(dt), [=](const TensorView* in, TensorView* out) {
    UPDRAFT_CHECK(out[0].is_contiguous() && out[1].is_contiguous(), "sort",
                  "the CPU kernel writes contiguous outputs only");
    cpu::Packed packed(in[0], threads);
    std::vector<int64_t> s = in[0].shape();
    int64_t n = s.empty() ? 1 : s[dim], inner = 1, total = in[0].numel();
    for (size_t d = dim + 1; d < s.size(); ++d) inner *= s[d];
    int64_t outer = n == 0 ? 0 : total / (n * inner);
    auto run = [&](auto tag) {
      using T = decltype(tag);
      sort_rows<T>(packed.ptr<T>(), outer, n, inner, descending, out[0].ptr<T>(), out[1].ptr<int64_t>(), threads);
    };
    switch (dt) {
      case DType::f32: run(float{}); break;
      case DType::f64: run(double{}); break;
      case DType::i64: run(int64_t{}); break;
      default: run(int32_t{}); break;
    }
  });
}

template <typename T>
void topk_rows(const T* x, int64_t outer, int64_t n, int64_t inner, int64_t k, bool largest, bool sorted, T* vo,
               int64_t* io, int threads) {
  int64_t rows = outer * inner;
  int nt = rows * n < kParallelElems || rows < 2 ? 1 : (threads > 0 ? threads : omp_get_max_threads());
#pragma omp parallel num_threads(nt) if (nt > 1)
  {
    std::vector<std::pair<T, int64_t>> row(n);
#pragma omp for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      int64_t o = r / inner, i = r % inner;
      const T* src = x + o * n * inner + i;
      for (int64_t j = 0; j < n; ++j) row[j] = {src[j * inner], j};
      topk_select(row, k, largest, sorted);
      for (int64_t j = 0; j < k; ++j) {
        vo[(o * k + j) * inner + i] = row[j].first;
        io[(o * k + j) * inner + i] = row[j].second;
      }
    }
  }
}

std::unique_ptr<Kernel> make_topk(const KernelContext& ctx) {
  DType dt = ctx.in_dtype(0);
  if (dt != DType::f32 && dt != DType::f64 && dt != DType::i64 && dt != DType::i32) return nullptr;
  const std::vector<int64_t>& shape = ctx.in_shapes[0];
  int rank = static_cast<int>(shape.size());
  int dim = rank ? normalize_dim(ctx.node.attr("dim").i(), rank, "topk") : 0;
  int64_t k = ctx.node.attr("k").i();
  bool largest = ctx.node.attr("largest").b(), sorted = ctx.node.attr("sorted").b();
  int threads = ctx.num_threads;
  return make_kernel(std::string("cpu_topk_") + dtype_name(dt), [=](const TensorView* in, TensorView* out) {
    UPDRAFT_CHECK(out[0].is_contiguous() && out[1].is_contiguous(), "topk",
                  "the CPU kernel writes contiguous outputs only");
    cpu::Packed packed(in[0], threads);
    std::vector<int64_t> s = in[0].shape();
    int64_t n = s.empty() ? 1 : s[dim], inner = 1, total = in[0].numel();
    for (size_t d = dim + 1; d < s.size(); ++d) inner *= s[d];
    int64_t outer = n == 0 ? 0 : total / (n * inner);
    auto run = [&](auto tag) {
      using T = decltype(tag);
      topk_rows<T>(packed.ptr<T>(), outer, n, inner, k, largest, sorted, out[0].ptr<T>(), out[1].ptr<int64_t>(),
                   threads);
    };
    switch (dt) {
      case DType::f32: run(float{}); break;
      case DType::f64: run(double{}); break;
      case DType::i64: run(int64_t{}); break;
      default: run(int32_t{}); break;
    }
  });
}

}  // namespace

void register_cpu_sort_kernels(KernelRegistry& r) {
  r.add("sort", Device::cpu, make_sort);
  r.add("topk", Device::cpu, make_topk);
}

}  // namespace updraft
