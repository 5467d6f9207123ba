// Fast f64 reductions: sum mean prod amax amin var argmax argmin cumsum, called from the f32
// factories in cpu/reduction.cpp when input 0 is f64 (integers: cpu/reduction_int.cpp).
//
// Same two shapes as the f32 kernels: [O, R] rows (a contiguous trailing block, or anything
// else packed through a permuted view) and [O, R, I] (a middle block, vectorised across the I
// kept columns). The loops are plain double code written so -O3 -mavx2 vectorises them:
// independent partial sums per lane, compares and selects instead of branches.
//
// Accuracy: a row sum keeps 16 partial sums per leaf of 256 elements and joins leaves
// pairwise, so its error grows with log2(R) rather than R (PyTorch's cascade sum behaves the
// same way); column sums join blocks of 64 rows. cumsum is a running sum, as PyTorch's is.
// NaN rules are the f32 kernels': amax/amin give NaN when any element is NaN; argmax/argmin
// return the first NaN's index.
#include <algorithm>
#include <cmath>
#include <limits>

#include "ir/op_table.h"
#include "ir/ops/params.h"
#include "kernels/cpu/reduce_common.h"
#include "kernels/cpu/simd_f64.h"
#include "kernels/cpu/strided_copy.h"
#include "kernels/cpu/threads.h"
#include "kernels/kernel.h"

namespace updraft::cpu {
namespace {

enum class RedOp { sum, mean, prod, amax, amin, var };

constexpr double kInf = std::numeric_limits<double>::infinity();

double identity(RedOp op) {
  if (op == RedOp::amax) return -kInf;
  if (op == RedOp::amin) return kInf;
  return op == RedOp::prod ? 1.0 : 0.0;
}

// NaN-propagating max/min: once acc is NaN it stays NaN (v > NaN is false), and a NaN v
// replaces acc. Selects, so loops over them vectorise.
inline double nan_max(double acc, double v) { return (v > acc || v != v) ? v : acc; }
inline double nan_min(double acc, double v) { return (v < acc || v != v) ? v : acc; }

double row_ext(bool is_max, const double* x, int64_t n) { return simd64::row_ext_nan(is_max, x, n); }

double reduce_row(RedOp op, const double* x, int64_t n, double correction) {
  switch (op) {
    case RedOp::sum: return row_sum_f64(x, n);
    case RedOp::mean: return row_sum_f64(x, n) / static_cast<double>(n);  // 0/0 = NaN, as torch
    case RedOp::amax: return row_ext(true, x, n);
    case RedOp::amin: return row_ext(false, x, n);
    case RedOp::prod: {
      double p = 1;
      for (int64_t i = 0; i < n; ++i) p *= x[i];
      return p;
    }
    case RedOp::var: {
      double mean = row_sum_f64(x, n) / static_cast<double>(n);
      double ss = pairwise_sum_f64(x, n, [mean](double v) { return (v - mean) * (v - mean); });
      return ss / std::max(static_cast<double>(n) - correction, 0.0);
    }
  }
  return 0;
}

// acc[i] = combine(acc[i], x[i]) for i < w.
void combine_span(RedOp op, double* acc, const double* x, int64_t w) {
  if (op == RedOp::amax) for (int64_t i = 0; i < w; ++i) acc[i] = nan_max(acc[i], x[i]);
  else if (op == RedOp::amin) for (int64_t i = 0; i < w; ++i) acc[i] = nan_min(acc[i], x[i]);
  else for (int64_t i = 0; i < w; ++i) acc[i] += x[i];
}

constexpr int64_t kColChunk = 256;  // columns per task: two stack buffers of 2 KiB
constexpr int64_t kRowBlock = 64;   // rows summed per block before joining the total

// [O, R, I] with I > 1, for sum/mean/amax/amin.
void reduce_cols(RedOp op, const double* x, int64_t O, int64_t R, int64_t I, double* y, int threads) {
  int64_t chunks = (I + kColChunk - 1) / kColChunk, tasks = O * chunks;
  int nt = threads_for(O * R * I, threads);
  parallel_for(tasks, nt, [&](int64_t t) {
    int64_t o = t / chunks, i0 = (t % chunks) * kColChunk, w = std::min(kColChunk, I - i0);
    double total[kColChunk], block[kColChunk];
    std::fill(total, total + w, identity(op));
    const double* xo = x + o * R * I + i0;
    for (int64_t r0 = 0; r0 < R; r0 += kRowBlock) {
      std::fill(block, block + w, identity(op));
      for (int64_t r = r0; r < std::min(R, r0 + kRowBlock); ++r) combine_span(op, block, xo + r * I, w);
      combine_span(op, total, block, w);
    }
    for (int64_t i = 0; i < w; ++i)
      y[o * I + i0 + i] = op == RedOp::mean ? total[i] / static_cast<double>(R) : total[i];
  });
}

// [O, R]: rows in parallel; a few huge rows are split into chunks whose partials are joined.
void reduce_rows(RedOp op, const double* x, int64_t O, int64_t R, double* y, double correction, int threads) {
  int nt = threads_for(O * R, threads);
  bool split = nt > 1 && O < nt && (op == RedOp::sum || op == RedOp::mean || op == RedOp::amax || op == RedOp::amin);
  if (!split) {
    parallel_for(O, nt, [&](int64_t o) { y[o] = reduce_row(op, x + o * R, R, correction); });
    return;
  }
  RedOp part = op == RedOp::mean ? RedOp::sum : op;
  constexpr int kMaxParts = 256;
  nt = std::min(nt, kMaxParts);
  for (int64_t o = 0; o < O; ++o) {
    double partial[kMaxParts];
    std::fill(partial, partial + nt, identity(part));
    int64_t step = (R + nt - 1) / nt;
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int c = 0; c < nt; ++c) {
      int64_t b = c * step, e = std::min(R, b + step);
      if (b < e) partial[c] = reduce_row(part, x + o * R + b, e - b, 0);
    }
    double acc = identity(part);
    for (int c = 0; c < nt; ++c) combine_span(part, &acc, &partial[c], 1);
    y[o] = op == RedOp::mean ? acc / static_cast<double>(R) : acc;
  }
}

void run_reduce(RedOp op, const std::vector<bool>& mask, double correction, const TensorView& x, double* y,
                int threads) {
  int64_t O, R, I;
  bool columns_ok = op == RedOp::sum || op == RedOp::mean || op == RedOp::amax || op == RedOp::amin;
  if (x.is_contiguous() && as_block(x, mask, O, R, I) && (I == 1 || columns_ok)) {
    const double* p = x.ptr<const double>();
    if (I == 1) reduce_rows(op, p, O, R, y, correction, threads);
    else reduce_cols(op, p, O, R, I, y, threads);
    return;
  }
  std::vector<int> order;
  O = R = 1;
  for (int d = 0; d < x.ndim; ++d)
    if (!mask[d]) order.push_back(d), O *= x.sizes[d];
  for (int d = 0; d < x.ndim; ++d)
    if (mask[d]) order.push_back(d), R *= x.sizes[d];
  Packed packed(permute_view(x, order), threads);
  reduce_rows(op, packed.ptr<double>(), O, R, y, correction, threads);
}

std::unique_ptr<Kernel> reduce_kernel(RedOp op, const KernelContext& ctx, const std::string& name) {
  auto mask = reduce_mask(ctx.node.attr("dims").ints(), static_cast<int>(ctx.in_shapes[0].size()), name);
  double correction = op == RedOp::var ? ctx.node.attr("correction").f() : 0.0;
  int threads = ctx.num_threads;
  return make_generic_kernel("cpu_f64_" + name, [=](const TensorView* in, TensorView* out) {
    if ((op == RedOp::amax || op == RedOp::amin) && in[0].numel() == 0 && out[0].numel() > 0)
      throw Error(name, "cannot reduce over an empty dim (no identity)");
    if (out[0].numel() == 0) return;
    run_reduce(op, mask, correction, in[0], out[0].ptr<double>(), threads);
  });
}

// First index of the max (min) of a row; a NaN wins, as in torch.
int64_t arg_row(bool is_max, const double* x, int64_t n) {
  double m = row_ext(is_max, x, n);
  bool nan = m != m;
  for (int64_t i = 0; i < n; ++i)
    if (nan ? x[i] != x[i] : x[i] == m) return i;
  return 0;
}

std::unique_ptr<Kernel> arg_kernel(bool is_max, const KernelContext& ctx, const std::string& name) {
  int rank = static_cast<int>(ctx.in_shapes[0].size());
  int dim = wrap_dim(ctx.node.attr("dim").i(), rank, name);
  int threads = ctx.num_threads;
  return make_generic_kernel("cpu_f64_" + name, [=](const TensorView* in, TensorView* out) {
    if (out[0].numel() == 0) return;
    if (in[0].numel() == 0) throw Error(name, "cannot reduce over an empty dim (no identity)");
    std::vector<int> order;  // `dim` last: each output reads one contiguous row
    for (int d = 0; d < rank; ++d)
      if (d != dim) order.push_back(d);
    if (rank) order.push_back(dim);
    Packed packed(permute_view(in[0], order), threads);
    int64_t n = rank ? in[0].sizes[dim] : 1, rows = out[0].numel();
    const double* x = packed.ptr<double>();
    int64_t* y = out[0].ptr<int64_t>();
    int nt = threads_for(rows * n, threads);
    parallel_for(rows, nt, [&](int64_t r) { y[r] = arg_row(is_max, x + r * n, n); });
  });
}

std::unique_ptr<Kernel> cumsum_kernel(const KernelContext& ctx) {
  int dim = wrap_dim(ctx.node.attr("dim").i(), static_cast<int>(ctx.in_shapes[0].size()), "cumsum");
  int threads = ctx.num_threads;
  return make_generic_kernel("cpu_f64_cumsum", [=](const TensorView* in, TensorView* out) {
    Packed packed(in[0], threads);
    const double* x = packed.ptr<double>();
    double* y = out[0].ptr<double>();
    Lines L(packed.view(), in[0].ndim ? dim : 0);
    int64_t chunks = (L.inner + kColChunk - 1) / kColChunk, tasks = L.outer * chunks;
    int nt = threads_for(in[0].numel(), threads);
    parallel_for(tasks, nt, [&](int64_t t) {
      int64_t o = t / chunks, i0 = (t % chunks) * kColChunk, w = std::min(kColChunk, L.inner - i0);
      double acc[kColChunk] = {};
      for (int64_t j = 0; j < L.n; ++j) {
        int64_t base = (o * L.n + j) * L.inner + i0;
        for (int64_t i = 0; i < w; ++i) y[base + i] = acc[i] += x[base + i];
      }
    });
  });
}

}  // namespace

std::unique_ptr<Kernel> make_f64_reduction(const KernelContext& ctx, const std::string& name) {
  if (ctx.in_dtype(0) != DType::f64) return nullptr;
  if (name == "sum") return reduce_kernel(RedOp::sum, ctx, name);
  if (name == "mean") return reduce_kernel(RedOp::mean, ctx, name);
  if (name == "prod") return reduce_kernel(RedOp::prod, ctx, name);
  if (name == "amax") return reduce_kernel(RedOp::amax, ctx, name);
  if (name == "amin") return reduce_kernel(RedOp::amin, ctx, name);
  if (name == "var") return reduce_kernel(RedOp::var, ctx, name);
  if (name == "argmax") return arg_kernel(true, ctx, name);
  if (name == "argmin") return arg_kernel(false, ctx, name);
  if (name == "cumsum") return cumsum_kernel(ctx);
  return nullptr;
}

}  // namespace updraft::cpu
