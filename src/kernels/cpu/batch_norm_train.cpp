// Train-mode batch norm on the CPU: batch_norm_train (statistics of the batch, then the
// normalisation) and batch_norm_backward, f32 and f64 (one template). Registered by
// register_cpu_norm_kernels (norm.cpp).
//
// Layout: x is [N, C, inner] (plain, channel dim 1), so a channel is N contiguous planes of
// `inner` elements. Threads split the channels; each channel is reduced by one thread, so the
// result does not depend on the thread count.
//
// Numerics: sums run over blocks of 256 elements in T (the compiler vectorises them into
// independent lanes), blocks accumulate in double. The mean sums offsets from the channel's
// first element and the variance is a second pass over (x - mean)^2, never E[x^2] - mean^2
// (which cancels when |mean| >> std). The backward uses
// PyTorch's formula: with xmu = x - mean, M elements per channel,
//   dx = (dy - mean(dy) - xmu * invstd^2 * mean(dy * xmu)) * invstd * w,
//   dw = sum(dy * xmu) * invstd,  db = sum(dy).
// Three passes over x in the forward (sum, centred squares, write y); two over x and dy in the
// backward (both sums in one, then dx).
#include <algorithm>
#include <cmath>
#include <optional>

#include "kernels/cpu/reduce_common.h"
#include "kernels/cpu/strided_copy.h"
#include "kernels/cpu/threads.h"
#include "kernels/kernel.h"

namespace updraft {
namespace {
using namespace cpu;

constexpr int64_t kBlock = 256;

// Sum over the channel's N planes of f(plane pointer offset), blocks of kBlock in T.
template <typename T, typename F>
double channel_sum(int64_t planes, int64_t stride, int64_t inner, F f) {
  double s = 0;
  for (int64_t p = 0; p < planes; ++p)
    for (int64_t i0 = 0; i0 < inner; i0 += kBlock) {
      const int64_t base = p * stride, end = std::min(inner, i0 + kBlock);
      T b = 0;
#pragma omp simd reduction(+ : b)
      for (int64_t i = i0; i < end; ++i) b += f(base + i);
      s += b;
    }
  return s;
}

// Input k ([C] parameters, statistics) as dense memory, or nullptr when the node has none;
// `keep` holds a packed copy of a strided graph input.
template <typename T>
const T* optional_input(const TensorView* in, int k, bool present, std::optional<Packed>& keep) {
  if (!present) return nullptr;
  keep.emplace(in[k], 1);
  return keep->ptr<T>();
}

template <typename T>
void batch_norm_train(const TensorView* in, TensorView* out, double eps, bool hw, bool hb, int threads) {
  Packed px(in[0], threads);
  std::optional<Packed> pw, pb;
  const T* x = px.ptr<T>();
  const T* w = optional_input<T>(in, 1, hw, pw);
  const T* b = optional_input<T>(in, 1 + hw, hb, pb);
  T *y = out[0].ptr<T>(), *mean_out = out[1].ptr<T>(), *var_out = out[2].ptr<T>();
  Lines L(px.view(), 1);
  const int64_t C = L.n, M = L.outer * L.inner, stride = C * L.inner;
  parallel_for(C, threads_for(in[0].numel(), threads), [&](int64_t c) {
    const T* xc = x + c * L.inner;
    T* yc = y + c * L.inner;
    // Summed as offsets from the channel's first element: block sums in T stay at the data's
    // spread, not its mean (values near 100 summed 256 at a time in f32 lost ~2e-5 of the mean
    // where the sum was not vectorised into lanes).
    const T x0 = M > 0 ? xc[0] : T(0);  // an empty batch: mean and var are NaN, as 0 / 0
    const double mean = x0 + channel_sum<T>(L.outer, stride, L.inner, [&](int64_t i) { return xc[i] - x0; }) / M;
    const T m = static_cast<T>(mean);
    const double var =
        channel_sum<T>(L.outer, stride, L.inner, [&](int64_t i) { return (xc[i] - m) * (xc[i] - m); }) / M;
    mean_out[c] = m;
    var_out[c] = static_cast<T>(var);
    // y = (x - m) * scale + shift, with the rounding of the mean (mean - m) folded into the
    // shift: x - m is exact for x near m, where x * scale + (b - mean * scale) would cancel two
    // large terms when |mean| >> std.
    const double invstd = 1.0 / std::sqrt(var + eps), sc = invstd * (w ? static_cast<double>(w[c]) : 1.0);
    const T scale = static_cast<T>(sc);
    const T shift = static_cast<T>((b ? static_cast<double>(b[c]) : 0.0) - (mean - static_cast<double>(m)) * sc);
    for (int64_t p = 0; p < L.outer; ++p) {
      const T* xp = xc + p * stride;
      T* yp = yc + p * stride;
#pragma omp simd
      for (int64_t i = 0; i < L.inner; ++i) yp[i] = (xp[i] - m) * scale + shift;
    }
  });
}

template <typename T>
void batch_norm_backward(const TensorView* in, TensorView* out, bool hw, int threads) {
  Packed pdy(in[0], threads), px(in[1], threads), pm(in[2], 1), pi(in[3], 1);
  std::optional<Packed> pw;
  const T *dy = pdy.ptr<T>(), *x = px.ptr<T>(), *mean = pm.ptr<T>(), *invstd = pi.ptr<T>();
  const T* w = optional_input<T>(in, 4, hw, pw);
  T *dx = out[0].ptr<T>(), *dw = out[1].ptr<T>(), *db = out[2].ptr<T>();
  Lines L(px.view(), 1);
  const int64_t C = L.n, M = L.outer * L.inner, stride = C * L.inner;
  parallel_for(C, threads_for(in[1].numel(), threads), [&](int64_t c) {
    const int64_t off = c * L.inner;
    const T* xc = x + off;
    const T* dyc = dy + off;
    const T m = mean[c];
    const double sum_dy = channel_sum<T>(L.outer, stride, L.inner, [&](int64_t i) { return dyc[i]; });
    const double dot = channel_sum<T>(L.outer, stride, L.inner, [&](int64_t i) { return dyc[i] * (xc[i] - m); });
    const double is = invstd[c];
    db[c] = static_cast<T>(sum_dy);
    dw[c] = static_cast<T>(dot * is);
    const T grad_mean = static_cast<T>(sum_dy / M), proj = static_cast<T>(dot * is * is / M);
    const T gscale = static_cast<T>(is * (w ? static_cast<double>(w[c]) : 1.0));
    for (int64_t p = 0; p < L.outer; ++p) {
      const T* xp = xc + p * stride;
      const T* dyp = dyc + p * stride;
      T* dxp = dx + off + p * stride;
#pragma omp simd
      for (int64_t i = 0; i < L.inner; ++i) dxp[i] = (dyp[i] - (xp[i] - m) * proj - grad_mean) * gscale;
    }
  });
}

template <typename Fn>
std::unique_ptr<Kernel> typed(const KernelContext& ctx, const std::string& op, Fn fn) {
  const DType dt = ctx.in_dtype(0);
  if (dt != DType::f32 && dt != DType::f64) return nullptr;
  return make_generic_kernel(std::string("cpu_") + dtype_name(dt) + "_" + op,
                             [fn, dt](const TensorView* in, TensorView* out) {
                               if (dt == DType::f32) fn(in, out, float{});
                               else fn(in, out, double{});
                             });
}

}  // namespace

namespace cpu {
void register_cpu_batch_norm_train_kernels(KernelRegistry& r) {
  r.add("batch_norm_train", Device::cpu, [](const KernelContext& ctx) {
    const double eps = ctx.node.attr("eps").f();
    const bool hw = ctx.node.attr("has_weight").b(), hb = ctx.node.attr("has_bias").b();
    const int threads = ctx.num_threads;
    return typed(ctx, "batch_norm_train", [=](const TensorView* in, TensorView* out, auto tag) {
      batch_norm_train<decltype(tag)>(in, out, eps, hw, hb, threads);
    });
  });
  r.add("batch_norm_backward", Device::cpu, [](const KernelContext& ctx) {
    const bool hw = ctx.node.attr("has_weight").b();
    const int threads = ctx.num_threads;
    return typed(ctx, "batch_norm_backward", [=](const TensorView* in, TensorView* out, auto tag) {
      batch_norm_backward<decltype(tag)>(in, out, hw, threads);
    });
  });
}
}  // namespace cpu

}  // namespace updraft
