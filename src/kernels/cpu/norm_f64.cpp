// Fast f64 norms: softmax log_softmax layer_norm rms_norm batch_norm (inference), called from
// the factories in cpu/norm.cpp when input 0 is f64. Strided inputs are packed contiguous
// first. The loops are plain double code that -O3 -mavx2 vectorises; exp is simd64::exp4
// (simd_f64.h).
//
// Numerics follow the reference kernel's formulas in double: softmax subtracts the row max
// (NaN-propagating) before exp and multiplies by 1 / sum, as PyTorch does; layer_norm takes the
// variance as a second pass over (x - mean); batch_norm computes (x - mean) * rstd * w + b.
// Row sums are pairwise (reduce_common.h), so results are within a few ulp of PyTorch's.
#include <algorithm>
#include <cmath>
#include <limits>

#include "ir/op_table.h"
#include "ir/ops/params.h"
#include "ir/ops/softmax.h"
#include "kernels/cpu/reduce_common.h"
#include "kernels/cpu/simd_f64.h"
#include "kernels/cpu/strided_copy.h"
#include "kernels/cpu/threads.h"
#include "kernels/kernel.h"

namespace updraft::cpu {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

inline double nan_max(double acc, double v) { return (v > acc || v != v) ? v : acc; }

double row_max(const double* x, int64_t n) { return simd64::row_ext_nan(true, x, n); }

// A row of all -inf gives NaN (-inf - -inf), as torch does; 0s with zero_masked (softmax only).
void softmax_row(const double* x, double* y, int64_t n, bool log, bool zero_masked) {
  if (n == 0) return;
  const double m = row_max(x, n);
  if (zero_masked && m == -kInf) {
    std::fill_n(y, n, 0.0);
    return;
  }
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] - m;
  simd64::apply(simd64::exp4, y, y, n);
  const double s = row_sum_f64(y, n);
  if (!log) {
    const double inv = 1.0 / s;
    for (int64_t i = 0; i < n; ++i) y[i] *= inv;
  } else {
    const double ls = std::log(s);
    for (int64_t i = 0; i < n; ++i) y[i] = (x[i] - m) - ls;
  }
}

constexpr int64_t kColChunk = 256;  // softmax over a non-last dim: columns per task, on the stack

// Softmax along the middle dim of [n, inner] for columns [0, w): the same passes as a row,
// vectorised across columns.
void softmax_cols(const double* x, double* y, int64_t n, int64_t inner, int64_t w, bool log, bool zero_masked) {
  double mx[kColChunk], sum[kColChunk];
  std::fill(mx, mx + w, -kInf);
  std::fill(sum, sum + w, 0.0);
  for (int64_t j = 0; j < n; ++j)
    for (int64_t i = 0; i < w; ++i) mx[i] = nan_max(mx[i], x[j * inner + i]);
  for (int64_t j = 0; j < n; ++j) {
    double* yr = y + j * inner;
    for (int64_t i = 0; i < w; ++i) yr[i] = x[j * inner + i] - mx[i];
    simd64::apply(simd64::exp4, yr, yr, w);
    for (int64_t i = 0; i < w; ++i) sum[i] += yr[i];
  }
  for (int64_t i = 0; i < w; ++i) {
    sum[i] = log ? std::log(sum[i]) : 1.0 / sum[i];
    if (zero_masked && mx[i] == -kInf) sum[i] = 0.0;  // NaN * 0 would stay NaN
  }
  for (int64_t j = 0; j < n; ++j)
    for (int64_t i = 0; i < w; ++i) {
      double* yy = y + j * inner + i;
      *yy = log ? (x[j * inner + i] - mx[i]) - sum[i] : (sum[i] == 0.0 ? 0.0 : *yy * sum[i]);
    }
}

std::unique_ptr<Kernel> softmax_kernel(bool log, const KernelContext& ctx, const std::string& name) {
  int rank = static_cast<int>(ctx.in_shapes[0].size());
  int dim = wrap_dim(ctx.node.attr("dim").i(), rank, name);
  const bool zero_masked = zero_masked_rows(ctx.node);
  int threads = ctx.num_threads;
  return make_generic_kernel("cpu_f64_" + name, [=](const TensorView* in, TensorView* out) {
    Packed packed(in[0], threads);
    const double* x = packed.ptr<double>();
    double* y = out[0].ptr<double>();
    Lines L(packed.view(), dim);
    int nt = threads_for(in[0].numel(), threads);
    if (L.inner == 1) {
      parallel_for(L.outer, nt, [&](int64_t o) { softmax_row(x + o * L.n, y + o * L.n, L.n, log, zero_masked); });
      return;
    }
    int64_t chunks = (L.inner + kColChunk - 1) / kColChunk, tasks = L.outer * chunks;
    parallel_for(tasks, nt, [&](int64_t t) {
      int64_t o = t / chunks, i0 = (t % chunks) * kColChunk;
      int64_t off = o * L.n * L.inner + i0;
      softmax_cols(x + off, y + off, L.n, L.inner, std::min(kColChunk, L.inner - i0), log, zero_masked);
    });
  });
}

// layer_norm (center) and rms_norm over rows of the trailing normalized_ndim dims.
std::unique_ptr<Kernel> row_norm_kernel(bool center, const KernelContext& ctx, const std::string& name) {
  const Node& node = ctx.node;
  int nd = static_cast<int>(node.attr("normalized_ndim").i());
  double eps = node.attr("eps").f();
  bool hw = node.attr("has_weight").b(), hb = center && node.attr("has_bias").b();
  int threads = ctx.num_threads;
  return make_generic_kernel("cpu_f64_" + name, [=](const TensorView* in, TensorView* out) {
    Packed px(in[0], threads);
    Packed pw(hw ? in[1] : in[0], 1), pb(hb ? in[1 + hw] : in[0], 1);
    const double* w = hw ? pw.ptr<double>() : nullptr;
    const double* b = hb ? pb.ptr<double>() : nullptr;
    int64_t cols = 1;
    for (int d = in[0].ndim - nd; d < in[0].ndim; ++d) cols *= in[0].sizes[d];
    int64_t rows = cols ? in[0].numel() / cols : 0;
    const double* x = px.ptr<double>();
    double* y = out[0].ptr<double>();
    int nt = threads_for(in[0].numel(), threads);
    parallel_for(rows, nt, [&](int64_t r) {
      const double* xr = x + r * cols;
      double* yr = y + r * cols;
      const double mean = center ? row_sum_f64(xr, cols) / static_cast<double>(cols) : 0.0;
      const double ss = pairwise_sum_f64(xr, cols, [mean](double v) { return (v - mean) * (v - mean); });
      const double rstd = 1.0 / std::sqrt(ss / static_cast<double>(cols) + eps);
      // Separate loops per weight/bias case keep each one branch-free for the vectoriser.
      if (w && b) for (int64_t j = 0; j < cols; ++j) yr[j] = (xr[j] - mean) * rstd * w[j] + b[j];
      else if (w) for (int64_t j = 0; j < cols; ++j) yr[j] = (xr[j] - mean) * rstd * w[j];
      else if (b) for (int64_t j = 0; j < cols; ++j) yr[j] = (xr[j] - mean) * rstd + b[j];
      else for (int64_t j = 0; j < cols; ++j) yr[j] = (xr[j] - mean) * rstd;
    });
  });
}

std::unique_ptr<Kernel> batch_norm_kernel(const KernelContext& ctx) {
  const Node& node = ctx.node;
  double eps = node.attr("eps").f();
  bool hw = node.attr("has_weight").b(), hb = node.attr("has_bias").b();
  int threads = ctx.num_threads;
  return make_generic_kernel("cpu_f64_batch_norm", [=](const TensorView* in, TensorView* out) {
    Packed px(in[0], threads), pm(in[1], 1), pv(in[2], 1);
    Packed pw(hw ? in[3] : in[1], 1), pb(hb ? in[3 + hw] : in[1], 1);
    const double *x = px.ptr<double>(), *mean = pm.ptr<double>(), *var = pv.ptr<double>();
    const double* w = hw ? pw.ptr<double>() : nullptr;
    const double* b = hb ? pb.ptr<double>() : nullptr;
    double* y = out[0].ptr<double>();
    Lines L(px.view(), 1);  // [N, C, spatial]
    int64_t planes = L.outer * L.n;
    int nt = threads_for(in[0].numel(), threads);
    parallel_for(planes, nt, [&](int64_t p) {
      int64_t c = p % L.n;
      const double inv = 1.0 / std::sqrt(var[c] + eps), m = mean[c];
      const double wc = w ? w[c] : 1.0, bc = b ? b[c] : 0.0;
      const double* xp = x + p * L.inner;
      double* yp = y + p * L.inner;
      for (int64_t i = 0; i < L.inner; ++i) yp[i] = (xp[i] - m) * inv * wc + bc;
    });
  });
}

}  // namespace

std::unique_ptr<Kernel> make_f64_norm(const KernelContext& ctx, const std::string& name) {
  if (ctx.in_dtype(0) != DType::f64) return nullptr;
  if (name == "softmax") return softmax_kernel(false, ctx, name);
  if (name == "log_softmax") return softmax_kernel(true, ctx, name);
  if (name == "layer_norm") return row_norm_kernel(true, ctx, name);
  if (name == "rms_norm") return row_norm_kernel(false, ctx, name);
  if (name == "batch_norm") return batch_norm_kernel(ctx);
  return nullptr;
}

}  // namespace updraft::cpu
