// max_pool2d_indices and max_pool2d_backward, f32 and f64: the reference (one thread) and the
// CPU kernel (planes split between threads) run the same loops, kernels/max_pool_indices.h,
// which define the op as ATen's CPU kernel does; the CPU kernel's f32 planes take eight output
// columns at a time (max_pool_plane_f32). Strided graph inputs are packed first.
#include <immintrin.h>

#include <climits>

#include "kernels/cpu/reduce_common.h"
#include "kernels/cpu/strided_copy.h"
#include "kernels/kernel.h"
#include "kernels/max_pool_indices.h"

namespace updraft {
namespace {

// An f32 plane, eight output columns per AVX2 vector wherever their windows' columns lie inside
// the image (a gather per window tap, a load where the stride is 1). Each lane takes the taps
// in the scalar loop's order with its rule (the first strictly larger value, or a NaN), so the
// values and indices are the scalar loop's. Edge columns, and planes too large for 32-bit
// positions, take the scalar loop. The branchy scalar loop mispredicts on real activations:
// ResNet-50's stem pool at batch 8 took 18.8 ms (docs/BENCHMARKS.md, "Issue 17: plain 1x1
// convolutions in training graphs").
void max_pool_plane_f32(const float* x, float* y, int64_t* idx, int64_t H, int64_t W, int64_t OH, int64_t OW,
                        const PoolWindow& win) {
  const int64_t s = win.s[1], p = win.p[1], d = win.d[1], span = (win.k[1] - 1) * d;
  // Interior columns: ow * s - p >= 0 and ow * s - p + span <= W - 1.
  int64_t lo = (p + s - 1) / s, hi = W - 1 + p - span >= 0 ? (W - 1 + p - span) / s + 1 : 0;
  hi = std::min(hi, OW);
  lo = std::min(lo, hi);
  if (H * W > INT_MAX || hi - lo < 8) return max_pool_indices_plane(x, y, idx, H, W, OH, OW, win);
  const __m256i col_step = _mm256_mullo_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7), _mm256_set1_epi32(int(s)));
  for (int64_t oh = 0; oh < OH; ++oh) {
    int64_t h0, h1;
    pool_window_rows(win, oh, H, h0, h1);
    float* yr = y + oh * OW;
    int64_t* ir = idx + oh * OW;
    max_pool_indices_columns(x, yr, ir, W, h0, h1, 0, lo, win);
    int64_t ow = lo;
    for (; ow + 8 <= hi; ow += 8) {
      const __m256i col = _mm256_add_epi32(_mm256_set1_epi32(int(ow * s - p)), col_step);
      __m256 m = _mm256_set1_ps(-std::numeric_limits<float>::infinity());
      __m256i best = _mm256_add_epi32(_mm256_set1_epi32(int(h0 * W)), col);
      for (int64_t h = h0; h < h1; h += win.d[0])
        for (int64_t t = 0; t <= span; t += d) {
          const __m256i pos = _mm256_add_epi32(col, _mm256_set1_epi32(int(h * W + t)));
          const __m256 v = s == 1 ? _mm256_loadu_ps(x + h * W + t + ow - p) : _mm256_i32gather_ps(x, pos, 4);
          const __m256 take = _mm256_or_ps(_mm256_cmp_ps(v, m, _CMP_GT_OQ), _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
          m = _mm256_blendv_ps(m, v, take);
          best = _mm256_castps_si256(_mm256_blendv_ps(_mm256_castsi256_ps(best), _mm256_castsi256_ps(pos), take));
        }
      _mm256_storeu_ps(yr + ow, m);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(ir + ow), _mm256_cvtepi32_epi64(_mm256_castsi256_si128(best)));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(ir + ow + 4),
                          _mm256_cvtepi32_epi64(_mm256_extracti128_si256(best, 1)));
    }
    max_pool_indices_columns(x, yr, ir, W, h0, h1, ow, OW, win);
  }
}

KernelFactory pool_factory(Device d) {
  return [d](const KernelContext& ctx) -> std::unique_ptr<Kernel> {
    const DType dt = ctx.in_dtype(0);
    if (dt != DType::f32 && dt != DType::f64) return nullptr;
    const PoolWindow win = PoolWindow::of(ctx.node, true);
    const int threads = d == Device::ref ? 1 : cpu::threads_for(numel_of(ctx.in_shapes[0]), ctx.num_threads);
    const std::string name = std::string(d == Device::ref ? "ref_" : "cpu_") + dtype_name(dt) + "_max_pool2d_indices";
    return make_kernel(name, [=](const TensorView* in, TensorView* out) {
      cpu::Packed x(in[0], threads);
      if (dt == DType::f32)
        max_pool_indices<float>(x.view(), out[0], out[1], win, threads,
                                d == Device::ref ? &max_pool_indices_plane<float> : &max_pool_plane_f32);
      else max_pool_indices<double>(x.view(), out[0], out[1], win, threads);
    });
  };
}

KernelFactory backward_factory(Device d) {
  return [d](const KernelContext& ctx) -> std::unique_ptr<Kernel> {
    const DType dt = ctx.in_dtype(0);
    if (dt != DType::f32 && dt != DType::f64) return nullptr;
    const int threads = d == Device::ref ? 1 : cpu::threads_for(numel_of(ctx.out_shapes[0]), ctx.num_threads);
    const std::string name = std::string(d == Device::ref ? "ref_" : "cpu_") + dtype_name(dt) + "_max_pool2d_backward";
    return make_kernel(name, [=](const TensorView* in, TensorView* out) {
      cpu::Packed dy(in[0], threads), idx(in[1], threads);
      if (dt == DType::f32) max_pool_backward<float>(dy.view(), idx.view(), out[0], threads);
      else max_pool_backward<double>(dy.view(), idx.view(), out[0], threads);
    });
  };
}

}  // namespace

void register_max_pool_indices_kernels(KernelRegistry& r) {
  for (Device d : {Device::ref, Device::cpu}) {
    r.add("max_pool2d_indices", d, pool_factory(d));
    r.add("max_pool2d_backward", d, backward_factory(d));
  }
}

}  // namespace updraft
