// AVX2/FMA building blocks for the f32 reduction and norm kernels (no AVX-512).
//
//   float s = simd::row_sum(x, n);              // blocked: error grows ~(32 + n/32)*eps, not n*eps
//   simd::exp_sub_store(x, m, y, n) -> sum      // y = exp(x - m), returns the sum (softmax)
//
// NaN handling matches torch: amax/amin propagate NaN (vmax/vmin below), sums propagate it
// naturally.
#pragma once
#include <immintrin.h>

#include <cmath>
#include <cstdint>
#include <limits>

namespace updraft::cpu::simd {

inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// NaN-propagating max/min: MAXPS returns its second operand when either is NaN, so put the
// accumulator second (keeps an accumulated NaN) and blend in a NaN arriving from x.
inline __m256 vmax(__m256 acc, __m256 x) {
  return _mm256_blendv_ps(_mm256_max_ps(x, acc), x, _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
}
inline __m256 vmin(__m256 acc, __m256 x) {
  return _mm256_blendv_ps(_mm256_min_ps(x, acc), x, _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
}
inline float smax(float acc, float x) { return (x > acc || std::isnan(x)) ? x : acc; }
inline float smin(float acc, float x) { return (x < acc || std::isnan(x)) ? x : acc; }

inline float hmax(__m256 v) {
  alignas(32) float t[8];
  _mm256_store_ps(t, v);
  float r = t[0];
  for (int i = 1; i < 8; ++i) r = smax(r, t[i]);
  return r;
}
inline float hmin(__m256 v) {
  alignas(32) float t[8];
  _mm256_store_ps(t, v);
  float r = t[0];
  for (int i = 1; i < 8; ++i) r = smin(r, t[i]);
  return r;
}

// exp(x) for 8 floats, Cephes-style: x = n*ln2 + r, exp(r) by a degree-5 polynomial, 2^n via the
// exponent bits. Relative error ~2 ulp; below the normal range (and -inf) gives 0, NaN stays NaN
// (MINPS/MAXPS return the NaN operand because it is passed second).
inline __m256 exp256(__m256 x) {
  const __m256 hi = _mm256_set1_ps(88.3762626647949f), lo = _mm256_set1_ps(-87.3365447504f);
  __m256 underflow = _mm256_cmp_ps(x, lo, _CMP_LT_OQ);  // exp(-inf) and tiny results are exactly 0
  x = _mm256_max_ps(lo, _mm256_min_ps(hi, x));
  __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                             _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.9875691500E-4f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507E-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073E-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894E-2f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459E-1f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201E-1f));
  p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
  __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  __m256 y = _mm256_andnot_ps(underflow, _mm256_mul_ps(p, _mm256_castsi256_ps(e)));
  // Keep NaN inputs NaN (the integer path above can turn them into finite garbage).
  return _mm256_blendv_ps(y, x, _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
}

// Sum of (x[i] - shift) over [0, n): four 8-lane accumulators inside blocks of 4096, blocks
// summed in f32. A shift near the data (e.g. x[0]) keeps the summands small, so a row with a
// large common offset does not lose its low digits (used for means that feed a variance).
inline float row_sum(const float* x, int64_t n, float shift = 0.0f) {
  float total = 0;
  __m256 vs = _mm256_set1_ps(shift);
  for (int64_t b = 0; b < n; b += 4096) {
    int64_t e = b + 4096 < n ? b + 4096 : n, i = b;
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    for (; i + 32 <= e; i += 32) {
      a0 = _mm256_add_ps(a0, _mm256_sub_ps(_mm256_loadu_ps(x + i), vs));
      a1 = _mm256_add_ps(a1, _mm256_sub_ps(_mm256_loadu_ps(x + i + 8), vs));
      a2 = _mm256_add_ps(a2, _mm256_sub_ps(_mm256_loadu_ps(x + i + 16), vs));
      a3 = _mm256_add_ps(a3, _mm256_sub_ps(_mm256_loadu_ps(x + i + 24), vs));
    }
    for (; i + 8 <= e; i += 8) a0 = _mm256_add_ps(a0, _mm256_sub_ps(_mm256_loadu_ps(x + i), vs));
    float s = hsum(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
    for (; i < e; ++i) s += x[i] - shift;
    total += s;
  }
  return total;
}

// Mean of a row, computed around x[0] (see row_sum) in double at the end.
inline float row_mean_shifted(const float* x, int64_t n) {
  if (n == 0) return NAN;
  return static_cast<float>(x[0] + static_cast<double>(row_sum(x, n, x[0])) / static_cast<double>(n));
}

// Sum of (x[i] - c)^2 (two-pass variance), same blocking as row_sum.
inline float row_sq_dev(const float* x, int64_t n, float c) {
  float total = 0;
  __m256 vc = _mm256_set1_ps(c);
  for (int64_t b = 0; b < n; b += 4096) {
    int64_t e = b + 4096 < n ? b + 4096 : n, i = b;
    __m256 a0 = _mm256_setzero_ps(), a1 = a0;
    for (; i + 16 <= e; i += 16) {
      __m256 d0 = _mm256_sub_ps(_mm256_loadu_ps(x + i), vc), d1 = _mm256_sub_ps(_mm256_loadu_ps(x + i + 8), vc);
      a0 = _mm256_fmadd_ps(d0, d0, a0);
      a1 = _mm256_fmadd_ps(d1, d1, a1);
    }
    for (; i + 8 <= e; i += 8) {
      __m256 d0 = _mm256_sub_ps(_mm256_loadu_ps(x + i), vc);
      a0 = _mm256_fmadd_ps(d0, d0, a0);
    }
    float s = hsum(_mm256_add_ps(a0, a1));
    for (; i < e; ++i) s += (x[i] - c) * (x[i] - c);
    total += s;
  }
  return total;
}

inline float row_max(const float* x, int64_t n) {
  int64_t i = 0;
  float m = -std::numeric_limits<float>::infinity();
  if (n >= 8) {
    __m256 a = _mm256_loadu_ps(x);
    for (i = 8; i + 8 <= n; i += 8) a = vmax(a, _mm256_loadu_ps(x + i));
    m = hmax(a);
  }
  for (; i < n; ++i) m = smax(m, x[i]);
  return m;
}

inline float row_min(const float* x, int64_t n) {
  int64_t i = 0;
  float m = std::numeric_limits<float>::infinity();
  if (n >= 8) {
    __m256 a = _mm256_loadu_ps(x);
    for (i = 8; i + 8 <= n; i += 8) a = vmin(a, _mm256_loadu_ps(x + i));
    m = hmin(a);
  }
  for (; i < n; ++i) m = smin(m, x[i]);
  return m;
}

// Scalar exp with the same rounding behaviour as exp256 for the tail elements.
inline float exp1(float x) {
  alignas(32) float t[8];
  _mm256_store_ps(t, exp256(_mm256_set1_ps(x)));
  return t[0];
}

}  // namespace updraft::cpu::simd
