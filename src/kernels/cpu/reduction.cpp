// Fast f32 reductions: sum mean amax amin prod var argmax argmin cumsum. f64 inputs go to the
// f64 forms (reduction_f64.cpp), i64 ones to the integer forms (reduction_int.cpp); other
// dtypes decline (the reference kernel runs them).
//
// Every reduction becomes one of two contiguous shapes:
//   [O, R]     reduce contiguous rows (the reduced dims are the trailing block);
//   [O, R, I]  reduce a middle block, vectorised across the I kept columns.
// A contiguous input whose reduced dims form one block is used in place. Anything else
// (several reduced blocks, strided inputs) is first packed through a permuted view that puts
// the kept dims first and the reduced dims last, which turns it into [O, R].
#include <algorithm>
#include <cmath>
#include <limits>

#include "ir/op_table.h"
#include "ir/ops/params.h"
#include "kernels/cpu/threads.h"
#include "kernels/cpu/reduce_common.h"
#include "kernels/cpu/simd_f32.h"
#include "kernels/cpu/strided_copy.h"
#include "kernels/kernel.h"

namespace updraft {
namespace {
using namespace cpu;

enum class RedOp { sum, mean, prod, amax, amin, var };

// Inputs that are not f32: the f64 forms, then the integer ones; nullptr leaves the reference.
std::unique_ptr<Kernel> other_dtype(const KernelContext& ctx, const std::string& name) {
  if (auto k = make_f64_reduction(ctx, name)) return k;
  return make_int_reduction(ctx, name);
}

float identity(RedOp op) {
  if (op == RedOp::amax) return -std::numeric_limits<float>::infinity();
  if (op == RedOp::amin) return std::numeric_limits<float>::infinity();
  return op == RedOp::prod ? 1.0f : 0.0f;
}

// One contiguous row of length n.
float reduce_row(RedOp op, const float* x, int64_t n, double correction) {
  switch (op) {
    case RedOp::sum: return simd::row_sum(x, n);
    case RedOp::mean: return simd::row_sum(x, n) / static_cast<float>(n);
    case RedOp::amax: return simd::row_max(x, n);
    case RedOp::amin: return simd::row_min(x, n);
    case RedOp::prod: {
      double p = 1;  // products over- and underflow fast in f32; a double keeps the ref's order of magnitude
      for (int64_t i = 0; i < n; ++i) p *= x[i];
      return static_cast<float>(p);
    }
    case RedOp::var: {
      float mean = simd::row_mean_shifted(x, n);
      double denom = std::max(static_cast<double>(n) - correction, 0.0);
      return static_cast<float>(simd::row_sq_dev(x, n, mean) / denom);
    }
  }
  return 0;
}

// acc[i] = combine(acc[i], x[i]) for i < w.
void combine_span(RedOp op, float* acc, const float* x, int64_t w) {
  int64_t i = 0;
  for (; i + 8 <= w; i += 8) {
    __m256 a = _mm256_loadu_ps(acc + i), v = _mm256_loadu_ps(x + i);
    a = op == RedOp::amax ? simd::vmax(a, v) : op == RedOp::amin ? simd::vmin(a, v) : _mm256_add_ps(a, v);
    _mm256_storeu_ps(acc + i, a);
  }
  for (; i < w; ++i)
    acc[i] = op == RedOp::amax ? simd::smax(acc[i], x[i]) : op == RedOp::amin ? simd::smin(acc[i], x[i]) : acc[i] + x[i];
}

constexpr int64_t kColChunk = 256;  // columns per task: two stack buffers of 1 KiB
constexpr int64_t kRowBlock = 64;   // rows summed per block before joining the total (error ~ (64 + R/64) eps)

// [O, R, I] with I > 1, for sum/mean/amax/amin.
void reduce_cols(RedOp op, const float* x, int64_t O, int64_t R, int64_t I, float* y, int threads) {
  int64_t chunks = (I + kColChunk - 1) / kColChunk, tasks = O * chunks;
  int nt = threads_for(O * R * I, threads);
  parallel_for(tasks, nt, [&](int64_t t) {
    int64_t o = t / chunks, i0 = (t % chunks) * kColChunk, w = std::min(kColChunk, I - i0);
    float total[kColChunk], block[kColChunk];
    std::fill(total, total + w, identity(op));
    const float* xo = x + o * R * I + i0;
    for (int64_t r0 = 0; r0 < R; r0 += kRowBlock) {
      std::fill(block, block + w, identity(op));
      for (int64_t r = r0; r < std::min(R, r0 + kRowBlock); ++r) combine_span(op, block, xo + r * I, w);
      combine_span(op, total, block, w);
    }
    float scale = op == RedOp::mean ? 1.0f / static_cast<float>(R) : 1.0f;
    for (int64_t i = 0; i < w; ++i) y[o * I + i0 + i] = op == RedOp::mean ? (R ? total[i] * scale : NAN) : total[i];
  });
}

// [O, R]: rows in parallel; a few huge rows are split into chunks whose partials are joined.
void reduce_rows(RedOp op, const float* x, int64_t O, int64_t R, float* y, double correction, int threads) {
  int nt = threads_for(O * R, threads);
  bool split = nt > 1 && O < nt && (op == RedOp::sum || op == RedOp::mean || op == RedOp::amax || op == RedOp::amin);
  if (!split) {
    parallel_for(O, nt, [&](int64_t o) { y[o] = reduce_row(op, x + o * R, R, correction); });
    return;
  }
  RedOp part = op == RedOp::mean ? RedOp::sum : op;
  constexpr int kMaxParts = 256;  // partials live on the stack: no allocation per call
  nt = std::min(nt, kMaxParts);
  for (int64_t o = 0; o < O; ++o) {
    float partial[kMaxParts];
    std::fill(partial, partial + nt, identity(part));
    int64_t step = (R + nt - 1) / nt;
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int c = 0; c < nt; ++c) {
      int64_t b = c * step, e = std::min(R, b + step);
      if (b < e) partial[c] = reduce_row(part, x + o * R + b, e - b, 0);
    }
    float acc = identity(part);
    for (int c = 0; c < nt; ++c) combine_span(part, &acc, &partial[c], 1);
    y[o] = op == RedOp::mean ? acc / static_cast<float>(R) : acc;
  }
}

void run_reduce(RedOp op, const std::vector<bool>& mask, double correction, const TensorView& x, float* y,
                int threads) {
  int64_t O, R, I;
  bool columns_ok = op == RedOp::sum || op == RedOp::mean || op == RedOp::amax || op == RedOp::amin;
  if (x.is_contiguous() && as_block(x, mask, O, R, I) && (I == 1 || columns_ok)) {
    const float* p = x.ptr<const float>();
    if (I == 1) reduce_rows(op, p, O, R, y, correction, threads);
    else reduce_cols(op, p, O, R, I, y, threads);
    return;
  }
  // Permuted iteration: kept dims first, reduced dims last, packed contiguous.
  std::vector<int> order;
  O = R = 1;
  for (int d = 0; d < x.ndim; ++d)
    if (!mask[d]) order.push_back(d), O *= x.sizes[d];
  for (int d = 0; d < x.ndim; ++d)
    if (mask[d]) order.push_back(d), R *= x.sizes[d];
  Packed packed(permute_view(x, order), threads);
  reduce_rows(op, packed.ptr<float>(), O, R, y, correction, threads);
}

KernelFactory reduce_factory(RedOp op, const std::string& name) {
  return [op, name](const KernelContext& ctx) -> std::unique_ptr<Kernel> {
    if (!is_f32(ctx)) return other_dtype(ctx, name);
    auto mask = reduce_mask(ctx.node.attr("dims").ints(), static_cast<int>(ctx.in_shapes[0].size()), name);
    double correction = op == RedOp::var ? ctx.node.attr("correction").f() : 0.0;
    int threads = ctx.num_threads;
    return make_generic_kernel("cpu_f32_" + name + "_avx2", [=](const TensorView* in, TensorView* out) {
      if ((op == RedOp::amax || op == RedOp::amin) && in[0].numel() == 0 && out[0].numel() > 0)
        throw Error(name, "cannot reduce over an empty dim (no identity)");
      if (out[0].numel() == 0) return;
      run_reduce(op, mask, correction, in[0], out[0].ptr<float>(), threads);
    });
  };
}

// First index of the max (min) of a row; a NaN wins, as in torch.
int64_t arg_row(bool is_max, const float* x, int64_t n) {
  float m = is_max ? simd::row_max(x, n) : simd::row_min(x, n);
  bool nan = std::isnan(m);
  int64_t i = 0;
  __m256 vm = _mm256_set1_ps(m);
  for (; i + 8 <= n; i += 8) {
    __m256 v = _mm256_loadu_ps(x + i);
    int bits = _mm256_movemask_ps(nan ? _mm256_cmp_ps(v, v, _CMP_UNORD_Q) : _mm256_cmp_ps(v, vm, _CMP_EQ_OQ));
    if (bits) return i + __builtin_ctz(bits);
  }
  for (; i < n; ++i)
    if (nan ? std::isnan(x[i]) : x[i] == m) return i;
  return 0;
}

KernelFactory arg_factory(bool is_max, const std::string& name) {
  return [is_max, name](const KernelContext& ctx) -> std::unique_ptr<Kernel> {
    if (!is_f32(ctx)) return other_dtype(ctx, name);
    int rank = static_cast<int>(ctx.in_shapes[0].size());
    int dim = wrap_dim(ctx.node.attr("dim").i(), rank, name);
    int threads = ctx.num_threads;
    return make_generic_kernel("cpu_f32_" + name + "_avx2", [=](const TensorView* in, TensorView* out) {
      if (out[0].numel() == 0) return;
      if (in[0].numel() == 0) throw Error(name, "cannot reduce over an empty dim (no identity)");
      // Move `dim` last so each output reads one contiguous row.
      std::vector<int> order;
      for (int d = 0; d < rank; ++d)
        if (d != dim) order.push_back(d);
      if (rank) order.push_back(dim);
      Packed packed(permute_view(in[0], order), threads);
      int64_t n = rank ? in[0].sizes[dim] : 1, rows = out[0].numel();
      const float* x = packed.ptr<float>();
      int64_t* y = out[0].ptr<int64_t>();
      int nt = threads_for(rows * n, threads);
      parallel_for(rows, nt, [&](int64_t r) { y[r] = arg_row(is_max, x + r * n, n); });
    });
  };
}

// Prefix sums accumulate in double: a running f32 sum loses digits linearly in the length.
KernelFactory cumsum_factory() {
  return [](const KernelContext& ctx) -> std::unique_ptr<Kernel> {
    if (!is_f32(ctx)) return other_dtype(ctx, "cumsum");
    int dim = wrap_dim(ctx.node.attr("dim").i(), static_cast<int>(ctx.in_shapes[0].size()), "cumsum");
    int threads = ctx.num_threads;
    return make_generic_kernel("cpu_f32_cumsum", [=](const TensorView* in, TensorView* out) {
      Packed packed(in[0], threads);
      const float* x = packed.ptr<float>();
      float* y = out[0].ptr<float>();
      Lines L(packed.view(), in[0].ndim ? dim : 0);
      int64_t chunks = (L.inner + kColChunk - 1) / kColChunk, tasks = L.outer * chunks;
      int nt = threads_for(in[0].numel(), threads);
      parallel_for(tasks, nt, [&](int64_t t) {
        int64_t o = t / chunks, i0 = (t % chunks) * kColChunk, w = std::min(kColChunk, L.inner - i0);
        double acc[kColChunk] = {};
        for (int64_t j = 0; j < L.n; ++j) {
          int64_t base = (o * L.n + j) * L.inner + i0;
          for (int64_t i = 0; i < w; ++i) y[base + i] = static_cast<float>(acc[i] += x[base + i]);
        }
      });
    });
  };
}

}  // namespace

void register_cpu_reduction_kernels(KernelRegistry& r) {
  r.add("sum", Device::cpu, reduce_factory(RedOp::sum, "sum"));
  r.add("mean", Device::cpu, reduce_factory(RedOp::mean, "mean"));
  r.add("prod", Device::cpu, reduce_factory(RedOp::prod, "prod"));
  r.add("amax", Device::cpu, reduce_factory(RedOp::amax, "amax"));
  r.add("amin", Device::cpu, reduce_factory(RedOp::amin, "amin"));
  r.add("var", Device::cpu, reduce_factory(RedOp::var, "var"));
  r.add("argmax", Device::cpu, arg_factory(true, "argmax"));
  r.add("argmin", Device::cpu, arg_factory(false, "argmin"));
  r.add("cumsum", Device::cpu, cumsum_factory());
  register_cpu_norm_kernels(r);
}

}  // namespace updraft
