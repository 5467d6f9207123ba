// AVX2/FMA f32 building blocks (x86-64-v3, no AVX-512), shared by the elementwise, reduction,
// norm and attention kernels: the one vector exp/expm1/tanh/erf of the engine, horizontal ops and
// blocked row reductions.
//
//   __m256 e = simd::exp256(x);                  // < 2 ulp; overflow -> inf, underflow -> 0
//   __m256 g = simd::gelu_erf256(x);             // x Phi(x); erf256 / erfc_pos256 likewise
//   float s = simd::row_sum(x, n);              // blocked: error grows ~(32 + n/32)*eps, not n*eps
//   float m = simd::row_max(x, n);              // NaN-propagating like torch.amax
//   float z = simd::exp_shift_sum(x, m, n, y);  // y = exp(x - m) (y may be x, or null), returns the sum
//
// NaN handling matches torch: amax/amin propagate NaN (vmax/vmin below), sums propagate it
// naturally, and the math functions return NaN for NaN.
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

// e^(hi + lo), where lo is a small correction to hi (|lo| well below 1 ulp of hi's integer
// part; erfc passes the rounding error of a square here). Range reduction hi = n ln2 + r with
// ln2 split in two parts (Cody-Waite) so r is exact to ~1 ulp, then r += lo; a degree-6
// polynomial on |r| <= ln2/2 (Cephes expf coefficients) gives < 2 ulp over the normal range.
// n = 128 (hi just below the overflow threshold 88.72) is scaled in two steps because 2^128 is
// not a finite float. Above the threshold (and +inf) the result is inf; below -87.34 (where
// e^x is subnormal, |error| < 1.2e-38) and for -inf it is 0; NaN (in hi) stays NaN.
inline __m256 exp256_split(__m256 x, __m256 lo) {
  const __m256 hi = _mm256_set1_ps(88.72283935546875f), lo_lim = _mm256_set1_ps(-87.33654022216797f);
  const __m256 one = _mm256_set1_ps(1.0f);
  __m256 xc = _mm256_min_ps(_mm256_max_ps(x, lo_lim), hi);
  __m256 n = _mm256_floor_ps(_mm256_fmadd_ps(xc, _mm256_set1_ps(1.44269504088896341f), _mm256_set1_ps(0.5f)));
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), xc);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  r = _mm256_add_ps(r, lo);
  __m256 y = _mm256_set1_ps(1.9875691500e-4f);
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(1.3981999507e-3f));
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(8.3334519073e-3f));
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(4.1665795894e-2f));
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(1.6666665459e-1f));
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(5.0000001201e-1f));
  y = _mm256_fmadd_ps(y, _mm256_mul_ps(r, r), _mm256_add_ps(r, one));
  __m256 n1 = _mm256_min_ps(n, _mm256_set1_ps(127.0f));
  y = _mm256_mul_ps(y, _mm256_blendv_ps(one, _mm256_set1_ps(2.0f), _mm256_cmp_ps(n, n1, _CMP_GT_OQ)));
  __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n1), _mm256_set1_epi32(127)), 23);
  y = _mm256_mul_ps(y, _mm256_castsi256_ps(e));
  y = _mm256_blendv_ps(y, _mm256_set1_ps(INFINITY), _mm256_cmp_ps(x, hi, _CMP_GT_OQ));
  y = _mm256_blendv_ps(y, _mm256_setzero_ps(), _mm256_cmp_ps(x, lo_lim, _CMP_LT_OQ));
  return _mm256_blendv_ps(y, x, _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
}

// e^x (< 2 ulp; see exp256_split). Adding a zero correction leaves r, so the bits are exp's own.
inline __m256 exp256(__m256 x) { return exp256_split(x, _mm256_setzero_ps()); }

// e^x - 1 without the cancellation of exp(x) - 1 near 0: Taylor series to x^8 for |x| < 0.35
// (truncation < 3e-8 relative), exp256 - 1 elsewhere.
inline __m256 expm1_256(__m256 x) {
  __m256 p = _mm256_set1_ps(1.0f / 40320);
  p = _mm256_fmadd_ps(p, x, _mm256_set1_ps(1.0f / 5040));
  p = _mm256_fmadd_ps(p, x, _mm256_set1_ps(1.0f / 720));
  p = _mm256_fmadd_ps(p, x, _mm256_set1_ps(1.0f / 120));
  p = _mm256_fmadd_ps(p, x, _mm256_set1_ps(1.0f / 24));
  p = _mm256_fmadd_ps(p, x, _mm256_set1_ps(1.0f / 6));
  p = _mm256_fmadd_ps(p, x, _mm256_set1_ps(0.5f));
  __m256 small = _mm256_fmadd_ps(_mm256_mul_ps(p, x), x, x);
  __m256 big = _mm256_sub_ps(exp256(x), _mm256_set1_ps(1.0f));
  __m256 ax = _mm256_andnot_ps(_mm256_set1_ps(-0.0f), x);
  return _mm256_blendv_ps(big, small, _mm256_cmp_ps(ax, _mm256_set1_ps(0.35f), _CMP_LT_OQ));
}

// tanh: odd polynomial for |x| < 0.625 (Cephes tanhf), 1 - 2/(e^{2|x|} + 1) with x's sign
// elsewhere (saturates to +-1 as e^{2|x|} overflows). Within ~1.4 ulp over [-10, 10].
inline __m256 tanh256(__m256 x) {
  const __m256 signbit = _mm256_set1_ps(-0.0f), one = _mm256_set1_ps(1.0f);
  __m256 sign = _mm256_and_ps(x, signbit);
  __m256 ax = _mm256_andnot_ps(signbit, x);
  __m256 s = _mm256_mul_ps(x, x);
  __m256 p = _mm256_set1_ps(-5.70498872745e-3f);
  p = _mm256_fmadd_ps(p, s, _mm256_set1_ps(2.06390887954e-2f));
  p = _mm256_fmadd_ps(p, s, _mm256_set1_ps(-5.37397155531e-2f));
  p = _mm256_fmadd_ps(p, s, _mm256_set1_ps(1.33314422036e-1f));
  p = _mm256_fmadd_ps(p, s, _mm256_set1_ps(-3.33332819422e-1f));
  __m256 small = _mm256_fmadd_ps(_mm256_mul_ps(p, s), x, x);
  __m256 e = exp256(_mm256_add_ps(ax, ax));
  __m256 big = _mm256_sub_ps(one, _mm256_div_ps(_mm256_set1_ps(2.0f), _mm256_add_ps(e, one)));
  big = _mm256_or_ps(big, sign);
  return _mm256_blendv_ps(big, small, _mm256_cmp_ps(ax, _mm256_set1_ps(0.625f), _CMP_LT_OQ));
}

// erfc(a) for a >= 0 given a^2 as hi + lo (hi = fl(a*a), lo its rounding error, so callers
// with a scaled argument, e.g. gelu's x / sqrt 2, can pass the square exactly). Form:
// erfc(a) = t e^{-a^2 + P(t)}, t = 2 / (2 + a), P a degree-9 polynomial fitted (weighted least
// squares towards minimax, our own fit) to log(erfc(a) / t) + a^2 over a in [0, 10]: relative
// error of the formula 4.5e-8, a few ulp in f32 (the exponent is evaluated with hi and lo apart,
// so its rounding does not grow with a^2). erfc is 0 past a ~ 9.3 (subnormal results flush);
// +inf -> 0, NaN -> NaN.
inline __m256 erfc_pos256(__m256 a, __m256 a2hi, __m256 a2lo) {
  __m256 t = _mm256_div_ps(_mm256_set1_ps(2.0f), _mm256_add_ps(_mm256_set1_ps(2.0f), a));
  __m256 p = _mm256_set1_ps(0.142198269199506f);
  p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(-0.666084924383831f));
  p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(1.1224521235275848f));
  p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(-0.6513160333359308f));
  p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(-0.11673226799658201f));
  p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(0.02016710060403518f));
  p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(0.028366717493640458f));
  p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(0.38789777227736283f));
  p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(0.9984927362205461f));
  p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(-1.26544144838222f));
  // -a^2 + P as s + err exactly (TwoSum of -hi and P), then - lo: exp256_split reduces s and
  // adds the small rest. lo is NaN when a^2 overflows, but then s = -inf gives 0.
  __m256 nh = _mm256_sub_ps(_mm256_setzero_ps(), a2hi);
  __m256 sum = _mm256_add_ps(nh, p);
  __m256 bb = _mm256_sub_ps(sum, nh);
  __m256 err = _mm256_add_ps(_mm256_sub_ps(nh, _mm256_sub_ps(sum, bb)), _mm256_sub_ps(p, bb));
  __m256 e = exp256_split(sum, _mm256_sub_ps(err, a2lo));
  return _mm256_mul_ps(t, e);
}

// erf(x): x Q(x^2) for |x| < 1 (Q degree 5, our own fit, relative error 4e-8), otherwise
// sign(x) (1 - erfc(|x|)), where erfc(|x|) <= 0.16 keeps the subtraction accurate. +-inf -> +-1.
inline __m256 erf256(__m256 x) {
  const __m256 signbit = _mm256_set1_ps(-0.0f), one = _mm256_set1_ps(1.0f);
  __m256 ax = _mm256_andnot_ps(signbit, x);
  __m256 s = _mm256_mul_ps(x, x);
  __m256 q = _mm256_set1_ps(-0.0005631470841746877f);
  q = _mm256_fmadd_ps(q, s, _mm256_set1_ps(0.004917563837994291f));
  q = _mm256_fmadd_ps(q, s, _mm256_set1_ps(-0.02671132246618345f));
  q = _mm256_fmadd_ps(q, s, _mm256_set1_ps(0.1128018052486323f));
  q = _mm256_fmadd_ps(q, s, _mm256_set1_ps(-0.3761232624095141f));
  q = _mm256_fmadd_ps(q, s, _mm256_set1_ps(1.1283791225056432f));
  __m256 small = _mm256_mul_ps(x, q);
  __m256 big = _mm256_sub_ps(one, erfc_pos256(ax, s, _mm256_fmsub_ps(x, x, s)));
  big = _mm256_or_ps(big, _mm256_and_ps(x, signbit));
  return _mm256_blendv_ps(big, small, _mm256_cmp_ps(ax, one, _CMP_LT_OQ));
}

// gelu, erf form: x Phi(x) = 0.5 x erfc(-x / sqrt 2). With a = |x| / sqrt 2, erfc(-x/sqrt 2) is
// erfc(a) for x < 0 (relative accuracy kept in the tail) and 2 - erfc(a) for x >= 0. a^2 =
// x^2 / 2 is passed exactly (x*x split by an fma, halving is exact).
inline __m256 gelu_erf256(__m256 x) {
  const __m256 half = _mm256_set1_ps(0.5f);
  __m256 ax = _mm256_andnot_ps(_mm256_set1_ps(-0.0f), x);
  __m256 x2 = _mm256_mul_ps(x, x);
  __m256 c = erfc_pos256(_mm256_mul_ps(ax, _mm256_set1_ps(0.70710678118654752f)), _mm256_mul_ps(x2, half),
                         _mm256_mul_ps(_mm256_fmsub_ps(x, x, x2), half));
  __m256 neg = _mm256_cmp_ps(x, _mm256_setzero_ps(), _CMP_LT_OQ);
  c = _mm256_blendv_ps(_mm256_sub_ps(_mm256_set1_ps(2.0f), c), c, neg);
  return _mm256_mul_ps(_mm256_mul_ps(half, x), c);
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

// NaN-propagating max (kMax) or min of a row; -inf (max) or +inf (min) for an empty row.
template <bool kMax> inline float row_extreme(const float* x, int64_t n) {
  constexpr auto vop = kMax ? vmax : vmin;
  constexpr auto sop = kMax ? smax : smin;
  int64_t i = 0;
  float m = kMax ? -std::numeric_limits<float>::infinity() : std::numeric_limits<float>::infinity();
  if (n >= 8) {
    __m256 a = _mm256_loadu_ps(x);
    for (i = 8; i + 8 <= n; i += 8) a = vop(a, _mm256_loadu_ps(x + i));
    alignas(32) float t[8];
    _mm256_store_ps(t, a);
    m = t[0];
    for (int j = 1; j < 8; ++j) m = sop(m, t[j]);
  }
  for (; i < n; ++i) m = sop(m, x[i]);
  return m;
}
inline float row_max(const float* x, int64_t n) { return row_extreme<true>(x, n); }
inline float row_min(const float* x, int64_t n) { return row_extreme<false>(x, n); }

// Scalar exp with exactly exp256's result, for tail elements (so a value's result never
// depends on its position in a row).
inline float exp1(float x) {
  alignas(32) float t[8];
  _mm256_store_ps(t, exp256(_mm256_set1_ps(x)));
  return t[0];
}

// Softmax numerator: y[i] = exp(x[i] - m) for i in [0, n) and returns the f32 sum. y may equal
// x (in place) or be null (only the sum is wanted, e.g. log_softmax).
inline float exp_shift_sum(const float* x, float m, int64_t n, float* y) {
  __m256 vm = _mm256_set1_ps(m), acc = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 e = exp256(_mm256_sub_ps(_mm256_loadu_ps(x + i), vm));
    if (y) _mm256_storeu_ps(y + i, e);
    acc = _mm256_add_ps(acc, e);
  }
  float s = hsum(acc);
  for (; i < n; ++i) {
    float e = exp1(x[i] - m);
    if (y) y[i] = e;
    s += e;
  }
  return s;
}

}  // namespace updraft::cpu::simd
