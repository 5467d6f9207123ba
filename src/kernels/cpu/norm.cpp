// Fast f32 norms: softmax log_softmax layer_norm rms_norm batch_norm (inference). f64 inputs
// go to the f64 forms (norm_f64.cpp); other dtypes decline to the reference kernel. Strided inputs are packed contiguous first (only graph
// inputs can be strided).
//
// Numerics: softmax subtracts the row max before exp (no overflow); layer_norm computes the
// variance in a second pass over (x - mean) rather than E[x^2] - mean^2, which cancels badly
// when |mean| >> std. Both match the double-precision reference within 1e-5.
#include <algorithm>
#include <cmath>
#include <limits>

#include "ir/op_table.h"
#include "ir/ops/params.h"
#include "ir/ops/softmax.h"
#include "kernels/cpu/threads.h"
#include "kernels/cpu/reduce_common.h"
#include "kernels/cpu/simd_f32.h"
#include "kernels/cpu/strided_copy.h"
#include "kernels/kernel.h"

namespace updraft {
namespace {
using namespace cpu;

// ---- softmax / log_softmax ----

// zero_masked: a row of all -inf gives 0s (softmax only; else NaN, as torch's softmax).
void softmax_row(const float* x, float* y, int64_t n, bool log, bool zero_masked) {
  if (n == 0) return;
  float m = simd::row_max(x, n);
  if (zero_masked && m == -std::numeric_limits<float>::infinity()) {
    std::fill_n(y, n, 0.0f);
    return;
  }
  float s = simd::exp_shift_sum(x, m, n, log ? nullptr : y);
  int64_t i = 0;
  if (!log) {
    __m256 inv = _mm256_set1_ps(1.0f / s);
    for (i = 0; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_mul_ps(_mm256_loadu_ps(y + i), inv));
    for (; i < n; ++i) y[i] *= 1.0f / s;
  } else {
    __m256 vm = _mm256_set1_ps(m), ls = _mm256_set1_ps(std::log(s));
    for (i = 0; i + 8 <= n; i += 8)
      _mm256_storeu_ps(y + i, _mm256_sub_ps(_mm256_sub_ps(_mm256_loadu_ps(x + i), vm), ls));
    for (; i < n; ++i) y[i] = (x[i] - m) - std::log(s);
  }
}

constexpr int64_t kColChunk = 256;  // softmax over a non-last dim: columns per task, on the stack

// Softmax along the middle dim of [n, inner] for columns [0, w): the same three passes as a
// row, vectorised across columns.
void softmax_cols(const float* x, float* y, int64_t n, int64_t inner, int64_t w, bool log, bool zero_masked) {
  float mx[kColChunk], sum[kColChunk];
  std::fill(mx, mx + w, -std::numeric_limits<float>::infinity());
  std::fill(sum, sum + w, 0.0f);
  for (int64_t j = 0; j < n; ++j) {
    const float* xr = x + j * inner;
    int64_t i = 0;
    for (; i + 8 <= w; i += 8) _mm256_storeu_ps(mx + i, simd::vmax(_mm256_loadu_ps(mx + i), _mm256_loadu_ps(xr + i)));
    for (; i < w; ++i) mx[i] = simd::smax(mx[i], xr[i]);
  }
  for (int64_t j = 0; j < n; ++j) {
    const float* xr = x + j * inner;
    float* yr = y + j * inner;
    int64_t i = 0;
    for (; i + 8 <= w; i += 8) {
      __m256 e = simd::exp256(_mm256_sub_ps(_mm256_loadu_ps(xr + i), _mm256_loadu_ps(mx + i)));
      if (!log) _mm256_storeu_ps(yr + i, e);
      _mm256_storeu_ps(sum + i, _mm256_add_ps(_mm256_loadu_ps(sum + i), e));
    }
    for (; i < w; ++i) {
      float e = simd::exp1(xr[i] - mx[i]);
      if (!log) yr[i] = e;
      sum[i] += e;
    }
  }
  for (int64_t i = 0; i < w; ++i) {
    sum[i] = log ? std::log(sum[i]) : 1.0f / sum[i];
    if (zero_masked && mx[i] == -std::numeric_limits<float>::infinity()) sum[i] = 0.0f;  // NaN * 0 would stay NaN
  }
  for (int64_t j = 0; j < n; ++j) {
    const float* xr = x + j * inner;
    float* yr = y + j * inner;
    for (int64_t i = 0; i < w; ++i)
      yr[i] = log ? (xr[i] - mx[i]) - sum[i] : (sum[i] == 0.0f ? 0.0f : yr[i] * sum[i]);
  }
}

KernelFactory softmax_factory(bool log, const std::string& name) {
  return [log, name](const KernelContext& ctx) -> std::unique_ptr<Kernel> {
    if (!is_f32(ctx)) return make_f64_norm(ctx, name);
    int rank = static_cast<int>(ctx.in_shapes[0].size());
    int dim = wrap_dim(ctx.node.attr("dim").i(), rank, name);
    const bool zero_masked = zero_masked_rows(ctx.node);
    int threads = ctx.num_threads;
    return make_generic_kernel("cpu_f32_" + name + "_avx2", [=](const TensorView* in, TensorView* out) {
      Packed packed(in[0], threads);
      const float* x = packed.ptr<float>();
      float* y = out[0].ptr<float>();
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
  };
}

// ---- layer_norm / rms_norm ----

// y = (x - mean) * rstd * w + b over one row; w/b may be null.
void affine_row(const float* x, float* y, int64_t n, float mean, float rstd, const float* w, const float* b) {
  __m256 vm = _mm256_set1_ps(mean), vr = _mm256_set1_ps(rstd);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 v = _mm256_mul_ps(_mm256_sub_ps(_mm256_loadu_ps(x + i), vm), vr);
    if (w) v = _mm256_mul_ps(v, _mm256_loadu_ps(w + i));
    if (b) v = _mm256_add_ps(v, _mm256_loadu_ps(b + i));
    _mm256_storeu_ps(y + i, v);
  }
  for (; i < n; ++i) {
    float v = (x[i] - mean) * rstd;
    if (w) v *= w[i];
    if (b) v += b[i];
    y[i] = v;
  }
}

KernelFactory row_norm_factory(bool center, const std::string& name) {
  return [center, name](const KernelContext& ctx) -> std::unique_ptr<Kernel> {
    if (!is_f32(ctx)) return make_f64_norm(ctx, name);
    const Node& node = ctx.node;
    int nd = static_cast<int>(node.attr("normalized_ndim").i());
    double eps = node.attr("eps").f();
    bool hw = node.attr("has_weight").b(), hb = center && node.attr("has_bias").b();
    int threads = ctx.num_threads;
    return make_generic_kernel("cpu_f32_" + name + "_avx2", [=](const TensorView* in, TensorView* out) {
      Packed px(in[0], threads);
      Packed pw(hw ? in[1] : in[0], 1), pb(hb ? in[1 + hw] : in[0], 1);
      const float* w = hw ? pw.ptr<float>() : nullptr;
      const float* b = hb ? pb.ptr<float>() : nullptr;
      int64_t cols = 1;
      for (int d = in[0].ndim - nd; d < in[0].ndim; ++d) cols *= in[0].sizes[d];
      int64_t rows = cols ? in[0].numel() / cols : 0;
      const float* x = px.ptr<float>();
      float* y = out[0].ptr<float>();
      int nt = threads_for(in[0].numel(), threads);
      parallel_for(rows, nt, [&](int64_t r) {
        const float* xr = x + r * cols;
        float mean = center ? simd::row_mean_shifted(xr, cols) : 0.0f;
        double var = simd::row_sq_dev(xr, cols, mean) / static_cast<double>(cols);
        float rstd = static_cast<float>(1.0 / std::sqrt(var + eps));
        affine_row(xr, y + r * cols, cols, mean, rstd, w, b);
      });
    });
  };
}

// ---- batch_norm (inference) ----

// Per channel, y = x * scale + shift with scale = w / sqrt(var + eps), shift = b - mean * scale.
KernelFactory batch_norm_factory() {
  return [](const KernelContext& ctx) -> std::unique_ptr<Kernel> {
    if (!is_f32(ctx)) return make_f64_norm(ctx, "batch_norm");
    const Node& node = ctx.node;
    double eps = node.attr("eps").f();
    bool hw = node.attr("has_weight").b(), hb = node.attr("has_bias").b();
    int threads = ctx.num_threads;
    return make_generic_kernel("cpu_f32_batch_norm_avx2", [=](const TensorView* in, TensorView* out) {
      Packed px(in[0], threads), pm(in[1], 1), pv(in[2], 1);
      Packed pw(hw ? in[3] : in[1], 1), pb(hb ? in[3 + hw] : in[1], 1);
      const float *x = px.ptr<float>(), *mean = pm.ptr<float>(), *var = pv.ptr<float>();
      const float* w = hw ? pw.ptr<float>() : nullptr;
      const float* b = hb ? pb.ptr<float>() : nullptr;
      float* y = out[0].ptr<float>();
      Lines L(px.view(), 1);  // [N, C, spatial]
      int64_t planes = L.outer * L.n;
      int nt = threads_for(in[0].numel(), threads);
      parallel_for(planes, nt, [&](int64_t p) {
        int64_t c = p % L.n;
        double sc = 1.0 / std::sqrt(static_cast<double>(var[c]) + eps) * (w ? w[c] : 1.0f);
        double sh = (b ? b[c] : 0.0f) - static_cast<double>(mean[c]) * sc;
        __m256 vs = _mm256_set1_ps(static_cast<float>(sc)), vh = _mm256_set1_ps(static_cast<float>(sh));
        const float* xp = x + p * L.inner;
        float* yp = y + p * L.inner;
        int64_t i = 0;
        for (; i + 8 <= L.inner; i += 8) _mm256_storeu_ps(yp + i, _mm256_fmadd_ps(_mm256_loadu_ps(xp + i), vs, vh));
        for (; i < L.inner; ++i) yp[i] = xp[i] * static_cast<float>(sc) + static_cast<float>(sh);
      });
    });
  };
}

}  // namespace

namespace cpu {
void register_cpu_norm_kernels(KernelRegistry& r) {
  r.add("softmax", Device::cpu, softmax_factory(false, "softmax"));
  r.add("log_softmax", Device::cpu, softmax_factory(true, "log_softmax"));
  r.add("layer_norm", Device::cpu, row_norm_factory(true, "layer_norm"));
  r.add("rms_norm", Device::cpu, row_norm_factory(false, "rms_norm"));
  r.add("batch_norm", Device::cpu, batch_norm_factory());
  register_cpu_batch_norm_train_kernels(r);
}
}  // namespace cpu

}  // namespace updraft
