// Reference sort: every row along `dim` gathered into a vector of input positions, ordered
// with std::stable_sort by kernels/sort_order.h, then written out; any input strides.
// Reference topk: every row gathered into (value, position) pairs and selected by
// kernels/topk_select.h.
#include <algorithm>
#include <numeric>

#include "ir/op_table.h"
#include "ir/ops/params.h"
#include "kernels/kernel.h"
#include "kernels/ref/ref_util.h"
#include "kernels/sort_order.h"
#include "kernels/topk_select.h"

namespace updraft {
namespace {

template <typename T>
void sort_rows(const TensorView& in, int dim, bool descending, TensorView& values, TensorView& indices) {
  std::vector<T> x = ref::to_vector<T>(in);  // logical row-major order
  std::vector<int64_t> shape = in.shape();
  int64_t n = shape.empty() ? 1 : shape[dim];
  int64_t inner = 1;
  for (size_t d = dim + 1; d < shape.size(); ++d) inner *= shape[d];
  int64_t outer = n == 0 ? 0 : static_cast<int64_t>(x.size()) / (n * inner);
  T* vo = values.ptr<T>();
  int64_t* io = indices.ptr<int64_t>();
  std::vector<int64_t> order(n);
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t i = 0; i < inner; ++i) {
      int64_t base = o * n * inner + i;
      std::iota(order.begin(), order.end(), 0);
      std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
        return sort_before(x[base + a * inner], x[base + b * inner], descending);
      });
      for (int64_t k = 0; k < n; ++k) {
        vo[base + k * inner] = x[base + order[k] * inner];
        io[base + k * inner] = order[k];
      }
    }
  }
}

KernelFactory sort_factory() {
  return [](const KernelContext& ctx) {
    int rank = static_cast<int>(ctx.in_shapes[0].size());
    int dim = rank ? normalize_dim(ctx.node.attr("dim").i(), rank, "sort") : 0;
    bool descending = ctx.node.attr("descending").b();
    return make_kernel("ref_sort", [dim, descending](const TensorView* in, TensorView* out) {
      ref::dispatch_numeric(in[0].dtype, "sort", [&](auto tag) {
        sort_rows<decltype(tag)>(in[0], dim, descending, out[0], out[1]);
      });
    });
  };
}

template <typename T>
void topk_rows(const TensorView& in, int dim, int64_t k, bool largest, bool sorted, TensorView& values,
               TensorView& indices) {
  std::vector<T> x = ref::to_vector<T>(in);
  std::vector<int64_t> shape = in.shape();
  int64_t n = shape.empty() ? 1 : shape[dim];
  int64_t inner = 1;
  for (size_t d = dim + 1; d < shape.size(); ++d) inner *= shape[d];
  int64_t outer = n == 0 ? 0 : static_cast<int64_t>(x.size()) / (n * inner);
  T* vo = values.ptr<T>();
  int64_t* io = indices.ptr<int64_t>();
  std::vector<std::pair<T, int64_t>> row(n);
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t i = 0; i < inner; ++i) {
      for (int64_t j = 0; j < n; ++j) row[j] = {x[(o * n + j) * inner + i], j};
      topk_select(row, k, largest, sorted);
      for (int64_t j = 0; j < k; ++j) {
        vo[(o * k + j) * inner + i] = row[j].first;
        io[(o * k + j) * inner + i] = row[j].second;
      }
    }
  }
}

KernelFactory topk_factory() {
  return [](const KernelContext& ctx) {
    int rank = static_cast<int>(ctx.in_shapes[0].size());
    int dim = rank ? normalize_dim(ctx.node.attr("dim").i(), rank, "topk") : 0;
    int64_t k = ctx.node.attr("k").i();
    bool largest = ctx.node.attr("largest").b(), sorted = ctx.node.attr("sorted").b();
    return make_kernel("ref_topk", [=](const TensorView* in, TensorView* out) {
      ref::dispatch_numeric(in[0].dtype, "topk", [&](auto tag) {
        topk_rows<decltype(tag)>(in[0], dim, k, largest, sorted, out[0], out[1]);
      });
    });
  };
}

}  // namespace

void register_ref_sort_kernels(KernelRegistry& r) {
  r.add("sort", Device::ref, sort_factory());
  r.add("topk", Device::ref, topk_factory());
}

}  // namespace updraft
