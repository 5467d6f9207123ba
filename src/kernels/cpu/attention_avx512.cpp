// The sdpa kernel's register tiles for AVX-512 (src/kernels/cpu/sdpa_tiles.h), in a unit of
// their own compiled with -mavx512f (CMakeLists.txt); the kernel (attention.cpp) calls them only
// where the CPU reports AVX-512F. 16 lanes: a score tile is 8 rows x 16 keys (8 accumulators in
// flight, as the two FMA ports need), a p v tile 4 rows x 64 columns (16 accumulators). The
// softmax numerators use exp512, exp256's algorithm (simd_f32.h) on 16 lanes.
#include <immintrin.h>

#include <cmath>
#include <cstdint>

#include "kernels/cpu/sdpa_tiles.h"

namespace updraft::cpu::sdpa {

namespace {

struct Avx512 {
  using reg = __m512;
  static constexpr int lanes = 16;
  static reg zero() { return _mm512_setzero_ps(); }
  static reg load(const float* p) { return _mm512_loadu_ps(p); }
  static void store(float* p, reg v) { _mm512_storeu_ps(p, v); }
  static reg set1(float x) { return _mm512_set1_ps(x); }
  static reg fma(reg a, reg b, reg c) { return _mm512_fmadd_ps(a, b, c); }
  static reg mul(reg a, reg b) { return _mm512_mul_ps(a, b); }
  static float hsum(reg v) { return _mm512_reduce_add_ps(v); }
};

// e^x by exp256's range reduction (Cody-Waite, n = floor(x log2 e + 1/2)) and degree-6
// polynomial, step for step, so each lane gets exp256's bits: < 2 ulp, inf above 88.72, 0 below
// -87.34, NaN stays NaN.
__m512 exp512(__m512 x) {
  const __m512 hi = _mm512_set1_ps(88.72283935546875f), lo_lim = _mm512_set1_ps(-87.33654022216797f);
  const __m512 one = _mm512_set1_ps(1.0f);
  const __m512 xc = _mm512_min_ps(_mm512_max_ps(x, lo_lim), hi);
  const __m512 n = _mm512_roundscale_ps(_mm512_fmadd_ps(xc, _mm512_set1_ps(1.44269504088896341f), _mm512_set1_ps(0.5f)),
                                        _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), xc);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  r = _mm512_add_ps(r, _mm512_setzero_ps());  // exp256 adds its zero correction here
  __m512 y = _mm512_set1_ps(1.9875691500e-4f);
  y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(1.3981999507e-3f));
  y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(8.3334519073e-3f));
  y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(4.1665795894e-2f));
  y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(1.6666665459e-1f));
  y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(5.0000001201e-1f));
  y = _mm512_fmadd_ps(y, _mm512_mul_ps(r, r), _mm512_add_ps(r, one));
  // y * 2^n in one instruction (vscalefps), where exp256 multiplies by 2^min(n, 127) built in
  // the exponent bits and doubles when n = 128: scaling by a power of two is exact, and the one
  // rounding (of an overflow or a subnormal) is the same, so the bits are exp256's.
  y = _mm512_scalef_ps(y, n);
  y = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, hi, _CMP_GT_OQ), y, _mm512_set1_ps(INFINITY));
  y = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, lo_lim, _CMP_LT_OQ), y, _mm512_setzero_ps());
  return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q), y, x);
}

__mmask16 tail_mask(int64_t left) { return static_cast<__mmask16>((1u << left) - 1u); }

// The shift of a row of n scores: its max, NaN-propagating as torch.amax (a NaN score makes the
// row NaN), and 0 for a row whose max is -inf (every key masked: weights exp(-inf) = 0, sum 0).
// Tails run masked, so every position takes the same path.
inline float row_shift(const float* sc, int64_t n) {
  const __m512 ninf = _mm512_set1_ps(-INFINITY);
  __m512 m = ninf;
  __mmask16 nan = 0;
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 x = _mm512_loadu_ps(sc + i);
    nan |= _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
    m = _mm512_max_ps(x, m);
  }
  if (i < n) {
    const __m512 x = _mm512_mask_loadu_ps(ninf, tail_mask(n - i), sc + i);
    nan |= _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
    m = _mm512_max_ps(x, m);
  }
  const float mx = _mm512_reduce_max_ps(m);
  return nan ? NAN : mx == -INFINITY ? 0.f : mx;
}

// sc[j] = exp(sc[j] - shift) for j < n in place, returning the sum.
inline float exp_row(float* sc, int64_t n, float shift) {
  const __m512 vm = _mm512_set1_ps(shift);
  __m512 acc = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 e = exp512(_mm512_sub_ps(_mm512_loadu_ps(sc + i), vm));
    _mm512_storeu_ps(sc + i, e);
    acc = _mm512_add_ps(acc, e);
  }
  if (i < n) {
    const __mmask16 k = tail_mask(n - i);
    const __m512 e = exp512(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, sc + i), vm));
    _mm512_mask_storeu_ps(sc + i, k, e);
    acc = _mm512_mask_add_ps(acc, k, acc, e);
  }
  return _mm512_reduce_add_ps(acc);
}

// Tiles::softmax_rows as two loops, every row's shift and then every row's exps, inlined, so
// that one row's exps need not finish before the next row's start.
void softmax_rows(float* p, int64_t ps, int64_t rows, const int64_t* n, float* shift, float* sum) {
  for (int64_t r = 0; r < rows; ++r) shift[r] = row_shift(p + r * ps, n[r]);
  for (int64_t r = 0; r < rows; ++r) sum[r] = exp_row(p + r * ps, n[r], shift[r]);
}

}  // namespace

const Tiles& tiles_avx512() {
  static const Tiles t{"avx512",
                       8,
                       scores_tile<Avx512, 8>,
                       scores_tile<Avx512, 1>,
                       scores_dots<Avx512>,
                       pv_tile<Avx512, 4>,
                       pv_tile<Avx512, 1>,
                       softmax_rows};
  return t;
}

}  // namespace updraft::cpu::sdpa
