// The int8 x int8 tiles (linear_i8_tiles.h) on AVX2, the engine's baseline (and AVX-512 CPUs
// without VNNI). vpmaddubsw multiplies unsigned by signed bytes into saturating int16 pair sums:
// it gets |qx| (at most 127) and w with qx's sign (vpsignb), so a pair sum is at most
// 2 * 127 * 127 = 32258 and never saturates; vpmaddwd by ones widens the pairs to int32.
#include <immintrin.h>

#include <algorithm>
#include <cmath>

#include "kernels/cpu/linear_i8_tiles.h"

namespace updraft::cpu::wq {

namespace {

constexpr int64_t kLanes = 32;  // bytes per vector

// quantize_act_row_int8 vectorised, bit for bit (see linear_i8_vnni.cpp); xq holds qx itself.
float quantize_row(const float* x, int64_t K, int64_t Kp, uint8_t* xq) {
  const __m256 inf = _mm256_set1_ps(INFINITY);
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  __m256 amax = _mm256_setzero_ps();
  bool not_finite = false;
  int64_t k = 0;
  for (; k + 8 <= K; k += 8) {
    const __m256 a = _mm256_and_ps(_mm256_loadu_ps(x + k), abs_mask);
    const __m256 finite = _mm256_cmp_ps(a, inf, _CMP_LT_OQ);  // false for NaN and inf
    not_finite |= _mm256_movemask_ps(finite) != 0xff;
    amax = _mm256_max_ps(amax, _mm256_and_ps(a, finite));
  }
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, amax);
  float m = 0.0f;
  for (float v : lanes) m = std::fmax(m, v);
  for (; k < K; ++k) {
    if (std::isfinite(x[k])) m = std::fmax(m, std::fabs(x[k]));
    else not_finite = true;
  }
  const float s = m / 127.0f;
  int8_t* q = reinterpret_cast<int8_t*>(xq);
  if (s == 0.0f || not_finite) {
    std::fill(xq, xq + Kp, uint8_t{0});
    return not_finite ? std::nanf("") : s;
  }
  const __m256 vs = _mm256_set1_ps(s), lo = _mm256_set1_ps(-127.0f), hi = _mm256_set1_ps(127.0f);
  for (k = 0; k + 8 <= K; k += 8) {
    __m256 r = _mm256_round_ps(_mm256_div_ps(_mm256_loadu_ps(x + k), vs), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __m256i i = _mm256_cvtps_epi32(_mm256_min_ps(hi, _mm256_max_ps(lo, r)));
    const __m128i w16 = _mm_packs_epi32(_mm256_castsi256_si128(i), _mm256_extracti128_si256(i, 1));
    _mm_storel_epi64(reinterpret_cast<__m128i*>(q + k), _mm_packs_epi16(w16, w16));
  }
  for (; k < K; ++k) q[k] = static_cast<int8_t>(std::fmin(127.0f, std::fmax(-127.0f, std::nearbyint(x[k] / s))));
  std::fill(xq + K, xq + Kp, uint8_t{0});
  return s;
}

template <int MT, int NT>
inline void avx2_tile(const uint8_t* xu, int64_t ldx, const int8_t* w, int64_t ldw, int64_t K, int32_t* out, int64_t ldo,
                      int64_t os) {
  const int8_t* x = reinterpret_cast<const int8_t*>(xu);
  const __m256i ones = _mm256_set1_epi16(1);
  // Every loop over the accumulators unrolled: one indexed at run time would keep them in
  // memory (linear_i8_vnni.cpp).
  __m256i acc[MT][NT];
#pragma GCC unroll 4
  for (int m = 0; m < MT; ++m)
#pragma GCC unroll 4
    for (int n = 0; n < NT; ++n) acc[m][n] = _mm256_setzero_si256();
  int64_t k = 0;
  for (; k + kLanes <= K; k += kLanes) {
    __m256i xv[MT], ax[MT];
#pragma GCC unroll 4
    for (int m = 0; m < MT; ++m) {
      xv[m] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + m * ldx + k));
      ax[m] = _mm256_sign_epi8(xv[m], xv[m]);
    }
#pragma GCC unroll 4
    for (int n = 0; n < NT; ++n) {
      const __m256i wv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + n * ldw + k));
#pragma GCC unroll 4
      for (int m = 0; m < MT; ++m) {
        const __m256i p = _mm256_maddubs_epi16(ax[m], _mm256_sign_epi8(wv, xv[m]));
        acc[m][n] = _mm256_add_epi32(acc[m][n], _mm256_madd_epi16(p, ones));
      }
    }
  }
#pragma GCC unroll 4
  for (int m = 0; m < MT; ++m)
#pragma GCC unroll 4
    for (int n = 0; n < NT; ++n) {
      const __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(acc[m][n]), _mm256_extracti128_si256(acc[m][n], 1));
      const __m128i s2 = _mm_add_epi32(s4, _mm_unpackhi_epi64(s4, s4));
      int32_t s = _mm_cvtsi128_si32(_mm_add_epi32(s2, _mm_shuffle_epi32(s2, 1)));
      for (int64_t kk = k; kk < K; ++kk) s += x[m * ldx + kk] * w[n * ldw + kk];
      out[m * ldo + n * os] = s;
    }
}

// 16 ymm registers: 1 x 4 and 2 x 4 tiles, 3 x 2 and 4 x 2 (accumulators, x and |x| per row,
// one weight vector). Chunks of rows (row_tiles.h) as many as the tile's rows.
struct Avx2 {
  template <int MT, int NT>
  static void tile(const uint8_t* x, int64_t ldx, const int8_t* w, int64_t ldw, int64_t K, int32_t* out, int64_t ldo,
                   int64_t os, const int8_t* /*next*/) {
    avx2_tile<MT, NT>(x, ldx, w, ldw, K, out, ldo, os);
  }
  template <int MT>
  static constexpr int cols() { return MT <= 2 ? 4 : 2; }
  template <int MT>
  static constexpr int chunks() { return cols<MT>(); }
  // int4 (linear_i8_tiles.h, u4_tile): nibbles (at most 15) by qx, pair sums at most 3810.
  static __m256i group_dot(__m256i u, __m256i x) {
    return _mm256_madd_epi16(_mm256_maddubs_epi16(u, x), _mm256_set1_epi16(1));
  }
};

}  // namespace

const I8Tiles& i8_tiles_avx2() {
  static const I8Tiles t{quantize_row, dot_i8<Avx2>, 0, "avx2", dot_u4<Avx2>};
  return t;
}

bool has_vnni(bool avx512) {
  return avx512 && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
         __builtin_cpu_supports("avx512vnni");
}

}  // namespace updraft::cpu::wq
