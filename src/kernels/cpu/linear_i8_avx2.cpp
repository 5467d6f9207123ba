// The int8 x int8 tiles (linear_i8_tiles.h) on AVX2, the engine's baseline (and AVX-512 CPUs
// without VNNI). vpmaddubsw multiplies unsigned by signed bytes into saturating int16 pair sums:
// it gets |qx| (at most 127) and w with qx's sign (vpsignb), so a pair sum is at most
// 2 * 127 * 127 = 32258 and never saturates; vpmaddwd by ones widens the pairs to int32.
#include <immintrin.h>

#include <algorithm>
#include <cmath>

#include "kernels/cpu/int4_scales_avx2.h"
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

// int4: aux holds each group's sum of qx (a float per group); the row is left in order.
void u4_prepare(uint8_t* xq, int64_t K, void* aux) {
  const int8_t* q = reinterpret_cast<const int8_t*>(xq);
  float* xsum = static_cast<float*>(aux);
  for (int64_t g = 0; g < K / kInt4Group; ++g) {
    int32_t s = 0;
    for (int64_t k = 0; k < kInt4Group; ++k) s += q[g * kInt4Group + k];
    xsum[g] = static_cast<float>(s);
  }
}

// A block's 32 bytes as its two groups' 32 nibbles each, in k order.
inline void u4_block(const uint8_t* p, __m256i* u) {
  const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)), nib = _mm256_set1_epi8(0xF);
  u[0] = _mm256_and_si256(b, nib);
  u[1] = _mm256_and_si256(_mm256_srli_epi16(b, 4), nib);
}

// Nibbles (at most 15) by qx: pair sums at most 2 * 15 * 127 = 3810, 8 int32 lanes per group.
inline __m256i group_dot(__m256i u, __m256i x) {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(u, x), _mm256_set1_epi16(1));
}

// MT rows of x by NT int4 rows of w: per group, the int32 sums to f32 times the group's scale;
// then the nibbles' +8, 8 * sum_g scale[g] * xsum[g], 8 groups per FMA (G is even).
template <int MT, int NT>
inline void avx2_u4_tile(const uint8_t* xq, int64_t ldx, const void* aux, int64_t ldaux, const uint8_t* w, int64_t ldw,
                         const uint16_t* sc, int64_t lds, int64_t K, float* out, int64_t ldo, int64_t os) {
  const int8_t* x = reinterpret_cast<const int8_t*>(xq);
  const float* xsum = static_cast<const float*>(aux);
  __m256 acc[MT][NT];
#pragma GCC unroll 4
  for (int m = 0; m < MT; ++m)
#pragma GCC unroll 8
    for (int n = 0; n < NT; ++n) acc[m][n] = _mm256_setzero_ps();
  const int64_t G = K / kInt4Group;
  for (int64_t b = 0; b < K / kInt4Block; ++b) {
#pragma GCC unroll 8
    for (int n = 0; n < NT; ++n) {
      __m256i u[2];
      __m256 s2[2];
      u4_block(w + n * ldw + b * kInt4Group, u);
      u4_scales(sc + n * lds + 2 * b, &s2[0], &s2[1]);
#pragma GCC unroll 2
      for (int h = 0; h < 2; ++h) {
        const int64_t g = 2 * b + h;
#pragma GCC unroll 4
        for (int m = 0; m < MT; ++m) {
          const __m256i xv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + m * ldx + g * kInt4Group));
          acc[m][n] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(group_dot(u[h], xv)), s2[h], acc[m][n]);
        }
      }
    }
  }
#pragma GCC unroll 4
  for (int m = 0; m < MT; ++m)
#pragma GCC unroll 8
    for (int n = 0; n < NT; ++n) {
      const uint16_t* sn = sc + n * lds;
      const float* xs = xsum + m * ldaux;
      __m256 o = _mm256_setzero_ps();
      int64_t g = 0;
      for (; g + 8 <= G; g += 8) {
        __m256 s8;
        bf16x8(sn + g, &s8);
        o = _mm256_fmadd_ps(s8, _mm256_loadu_ps(xs + g), o);
      }
      float off = hsum_ps(o);
      for (; g < G; ++g) off += bf16_to_f32(sn[g]) * xs[g];
      out[m * ldo + n * os] = hsum_ps(acc[m][n]) - 8.0f * off;
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
  // int4: 1 x 4 tiles for one row, 2 rows of w from 2 rows of x; chunks up to 2 rows.
  template <int MT, int NT>
  static void u4_tile(const uint8_t* xq, int64_t ldx, const void* aux, int64_t ldaux, const uint8_t* w, int64_t ldw,
                      const uint16_t* sc, int64_t lds, int64_t K, float* out, int64_t ldo, int64_t os) {
    avx2_u4_tile<MT, NT>(xq, ldx, aux, ldaux, w, ldw, sc, lds, K, out, ldo, os);
  }
  template <int MT>
  static constexpr int u4_cols() { return MT == 1 ? 4 : 2; }
  template <int MT>
  static constexpr int u4_chunks() { return MT <= 2 ? 4 : 0; }
};

}  // namespace

const I8Tiles& i8_tiles_avx2() {
  static const I8Tiles t{quantize_row, dot_i8<Avx2>, 0, "avx2", dot_u4<Avx2>, u4_prepare, 2};
  return t;
}

bool has_vnni(bool avx512) {
  return avx512 && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
         __builtin_cpu_supports("avx512vnni");
}

}  // namespace updraft::cpu::wq
