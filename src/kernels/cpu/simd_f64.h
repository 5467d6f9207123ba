// f64 vector math for the fast kernels: glibc's libmvec AVX2 variants (4 doubles per call),
// the functions GCC itself calls when it vectorises a loop of exp() under -ffast-math, here
// called directly so the rest of the code keeps IEEE semantics.
//
//   simd64::apply(simd64::exp4, x, y, n);   // y[i] = exp(x[i]) for i < n; y may alias x
//
// Accuracy: libmvec's documented bound is 4 ulp, measured within 1-2 ulp of the correctly
// rounded result for the functions used here (the tests compare with the C library's scalar
// functions at rtol 1e-14). Special inputs (NaN, +-inf, overflow, subnormal results) take
// libmvec's scalar fallback, so their results are the C library's. glibc >= 2.35 has every
// function below (2.22 had exp/log/sin/cos/pow only); the engine links libmvec for them.
#pragma once
#include <immintrin.h>

#include <cmath>
#include <cstdint>

extern "C" {
__m256d _ZGVdN4v_exp(__m256d);
__m256d _ZGVdN4v_expm1(__m256d);
__m256d _ZGVdN4v_exp2(__m256d);
__m256d _ZGVdN4v_log(__m256d);
__m256d _ZGVdN4v_log1p(__m256d);
__m256d _ZGVdN4v_log2(__m256d);
__m256d _ZGVdN4v_log10(__m256d);
__m256d _ZGVdN4v_sin(__m256d);
__m256d _ZGVdN4v_cos(__m256d);
__m256d _ZGVdN4v_tan(__m256d);
__m256d _ZGVdN4v_tanh(__m256d);
__m256d _ZGVdN4v_sinh(__m256d);
__m256d _ZGVdN4v_cosh(__m256d);
__m256d _ZGVdN4v_asin(__m256d);
__m256d _ZGVdN4v_acos(__m256d);
__m256d _ZGVdN4v_atan(__m256d);
__m256d _ZGVdN4v_asinh(__m256d);
__m256d _ZGVdN4v_acosh(__m256d);
__m256d _ZGVdN4v_atanh(__m256d);
__m256d _ZGVdN4v_erf(__m256d);
__m256d _ZGVdN4v_erfc(__m256d);
__m256d _ZGVdN4vv_pow(__m256d, __m256d);
__m256d _ZGVdN4vv_atan2(__m256d, __m256d);
}

namespace updraft::cpu::simd64 {

// exp of 4 doubles, ~1 ulp: x = k ln2 + r with |r| <= ln2 / 2 (Cody-Waite, ln2 in two parts
// so k * ln2_hi is exact), e^r by its Taylor polynomial to degree 13 (truncation < 1e-17
// relative), times 2^k built in the exponent bits. Lanes outside [-708, 709] (overflow, the
// subnormal range, +-inf) or NaN take the C library's exp. libmvec's exp is 4x slower than
// this on the common range.
inline __m256d exp4(__m256d x) {
  const __m256d k = _mm256_round_pd(_mm256_mul_pd(x, _mm256_set1_pd(1.4426950408889634)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256d r = _mm256_fnmadd_pd(k, _mm256_set1_pd(6.93147180369123816490e-01), x);
  r = _mm256_fnmadd_pd(k, _mm256_set1_pd(1.90821492927058770002e-10), r);
  __m256d p = _mm256_set1_pd(1.0 / 6227020800.0);  // 1/13!
  const double c[] = {1.0 / 479001600.0, 1.0 / 39916800.0, 1.0 / 3628800.0, 1.0 / 362880.0, 1.0 / 40320.0,
                      1.0 / 5040.0, 1.0 / 720.0, 1.0 / 120.0, 1.0 / 24.0, 1.0 / 6.0, 0.5, 1.0, 1.0};
  for (double ci : c) p = _mm256_fmadd_pd(p, r, _mm256_set1_pd(ci));
  __m256i e = _mm256_cvtepi32_epi64(_mm256_cvtpd_epi32(k));
  e = _mm256_slli_epi64(_mm256_add_epi64(e, _mm256_set1_epi64x(1023)), 52);
  __m256d y = _mm256_mul_pd(p, _mm256_castsi256_pd(e));
  // In range: -708 <= x <= 709 (false for NaN).
  __m256d ok = _mm256_and_pd(_mm256_cmp_pd(x, _mm256_set1_pd(-708.0), _CMP_GE_OQ),
                             _mm256_cmp_pd(x, _mm256_set1_pd(709.0), _CMP_LE_OQ));
  if (_mm256_movemask_pd(ok) != 0xF) {
    alignas(32) double xs[4], ys[4];
    _mm256_store_pd(xs, x);
    _mm256_store_pd(ys, y);
    const int m = _mm256_movemask_pd(ok);
    for (int j = 0; j < 4; ++j)
      if (!(m >> j & 1)) ys[j] = std::exp(xs[j]);
    y = _mm256_load_pd(ys);
  }
  return y;
}

// The max (is_max) or min of x[0, n), NaN if any element is NaN; -inf / +inf when n == 0.
// Written with intrinsics: GCC leaves the select-based scalar form unvectorised.
inline double row_ext_nan(bool is_max, const double* x, int64_t n) {
  const double id = is_max ? -INFINITY : INFINITY;
  __m256d a0 = _mm256_set1_pd(id), a1 = a0, nan = _mm256_setzero_pd();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256d v0 = _mm256_loadu_pd(x + i), v1 = _mm256_loadu_pd(x + i + 4);
    a0 = is_max ? _mm256_max_pd(a0, v0) : _mm256_min_pd(a0, v0);
    a1 = is_max ? _mm256_max_pd(a1, v1) : _mm256_min_pd(a1, v1);
    nan = _mm256_or_pd(nan, _mm256_cmp_pd(v0, v1, _CMP_UNORD_Q));
  }
  alignas(32) double t[8];
  _mm256_store_pd(t, a0);
  _mm256_store_pd(t + 4, a1);
  double r = id;
  bool any_nan = _mm256_movemask_pd(nan) != 0;
  for (int j = 0; j < 8; ++j) r = is_max ? (t[j] > r ? t[j] : r) : (t[j] < r ? t[j] : r);
  for (; i < n; ++i) {
    any_nan |= x[i] != x[i];
    r = is_max ? (x[i] > r ? x[i] : r) : (x[i] < r ? x[i] : r);
  }
  return any_nan ? NAN : r;
}

// y[i] = f(x[i]) for i < n, 4 lanes at a time; the ragged tail goes through the same vector
// function on a zero-padded copy, so a result never depends on the element's position.
template <typename F>
inline void apply(F f, const double* x, double* y, int64_t n) {
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) _mm256_storeu_pd(y + i, f(_mm256_loadu_pd(x + i)));
  if (i < n) {
    alignas(32) double t[4] = {0, 0, 0, 0};
    for (int64_t j = i; j < n; ++j) t[j - i] = x[j];
    _mm256_store_pd(t, f(_mm256_load_pd(t)));
    for (int64_t j = i; j < n; ++j) y[j] = t[j - i];
  }
}
template <typename F>
inline void apply2(F f, const double* a, const double* b, double* y, int64_t n) {
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) _mm256_storeu_pd(y + i, f(_mm256_loadu_pd(a + i), _mm256_loadu_pd(b + i)));
  if (i < n) {
    alignas(32) double ta[4] = {0, 0, 0, 0}, tb[4] = {0, 0, 0, 0};
    for (int64_t j = i; j < n; ++j) ta[j - i] = a[j], tb[j - i] = b[j];
    _mm256_store_pd(ta, f(_mm256_load_pd(ta), _mm256_load_pd(tb)));
    for (int64_t j = i; j < n; ++j) y[j] = ta[j - i];
  }
}

}  // namespace updraft::cpu::simd64
