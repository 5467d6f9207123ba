// The int8 x int8 tiles (linear_i8_tiles.h) on AVX-512 VNNI, in a unit of its own compiled with
// -mavx512f -mavx512bw -mavx512vl -mavx512vnni (CMakeLists.txt); linear_wq.cpp calls them only
// where the CPU reports all four. vpdpbusd adds, per 32-bit lane, four products of unsigned bytes of x by
// signed bytes of w: 64 multiply-adds per instruction, against 16 for an f32 FMA. x is stored
// offset by 128 (unsigned); the driver takes 128 * sum_k w[n, k] back out.
#include <immintrin.h>

#include <algorithm>
#include <cmath>

#include "kernels/cpu/linear_i8_tiles.h"

namespace updraft::cpu::wq {

namespace {

constexpr int64_t kLanes = 64;  // bytes per vector

// quantize_act_row_int8 vectorised, bit for bit: amax over the finite values, s = amax / 127,
// q = round_half_even(x / s) (a true division, as the scalar code) clamped to [-127, 127].
float quantize_row(const float* x, int64_t K, int64_t Kp, uint8_t* xq) {
  const __m512 inf = _mm512_set1_ps(INFINITY);
  const __m512i abs_mask = _mm512_set1_epi32(0x7fffffff);
  __m512 amax = _mm512_setzero_ps();
  __mmask16 not_finite = 0;
  for (int64_t k = 0; k < K; k += 16) {
    const __mmask16 in = K - k >= 16 ? __mmask16(0xffff) : __mmask16((1u << (K - k)) - 1);
    const __m512 a = _mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(_mm512_maskz_loadu_ps(in, x + k)), abs_mask));
    const __mmask16 finite = _mm512_mask_cmp_ps_mask(in, a, inf, _CMP_LT_OQ);  // false for NaN and inf
    not_finite |= in & ~finite;
    amax = _mm512_mask_max_ps(amax, finite, amax, a);
  }
  const float s = _mm512_reduce_max_ps(amax) / 127.0f;
  const __m512 vs = _mm512_set1_ps(s), lo = _mm512_set1_ps(-127.0f), hi = _mm512_set1_ps(127.0f);
  const __m512i offset = _mm512_set1_epi32(128);
  for (int64_t k = 0; k < K; k += 16) {
    const __mmask16 in = K - k >= 16 ? __mmask16(0xffff) : __mmask16((1u << (K - k)) - 1);
    __m512 r = _mm512_setzero_ps();
    if (s != 0.0f && !not_finite) {
      r = _mm512_roundscale_ps(_mm512_div_ps(_mm512_maskz_loadu_ps(in, x + k), vs), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
      r = _mm512_min_ps(hi, _mm512_max_ps(lo, r));
    }
    _mm512_mask_cvtepi32_storeu_epi8(xq + k, in, _mm512_add_epi32(_mm512_cvtps_epi32(r), offset));
  }
  std::fill(xq + K, xq + Kp, uint8_t{0});
  return not_finite ? std::nanf("") : s;
}

// The lane sums of a, b, c and d as [sum a, sum b, sum c, sum d]: pairs interleaved and added
// within each 128-bit lane (twice), then the four 128-bit lanes added; a third of the
// instructions of four separate reductions.
inline __m128i hsum4(__m512i a, __m512i b, __m512i c, __m512i d) {
  const __m512i ab = _mm512_add_epi32(_mm512_unpacklo_epi32(a, b), _mm512_unpackhi_epi32(a, b));
  const __m512i cd = _mm512_add_epi32(_mm512_unpacklo_epi32(c, d), _mm512_unpackhi_epi32(c, d));
  const __m512i abcd = _mm512_add_epi32(_mm512_unpacklo_epi64(ab, cd), _mm512_unpackhi_epi64(ab, cd));
  const __m256i h = _mm256_add_epi32(_mm512_castsi512_si256(abcd), _mm512_extracti64x4_epi64(abcd, 1));
  return _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
}

// sums[m][n] over MT rows of xq and NT rows of w: acc[m][n] (16 int32 lanes) += xq[m, k:k+64] .
// w[n, k:k+64] per 4-byte group, reduced across lanes at the end. The last vector of a row of w
// is a masked load (xq is padded, w is not). `next`: the following tile's rows, prefetched as in
// linear_wq_tiles.h (short int8 rows interleave too many streams for the hardware prefetcher).
template <int MT, int NT>
inline void vnni_tile(const uint8_t* x, int64_t ldx, const int8_t* w, int64_t ldw, int64_t K, int32_t* out, int64_t ldo,
                      int64_t os, const int8_t* next) {
  __m512i acc[MT][NT];
#pragma GCC unroll 4
  for (int m = 0; m < MT; ++m)
#pragma GCC unroll 8
    for (int n = 0; n < NT; ++n) acc[m][n] = _mm512_setzero_si512();
  constexpr int64_t kPfStep = NT * kLanes;  // bytes of the next tile per iteration
  const char* pf = reinterpret_cast<const char*>(next);
  for (int64_t k = 0; k < K; k += kLanes) {
    const __mmask64 in = K - k >= kLanes ? ~__mmask64(0) : (__mmask64(1) << (K - k)) - 1;
    if (pf) {
#pragma GCC unroll 8
      for (int64_t b = 0; b < kPfStep; b += 64) __builtin_prefetch(pf + b, 0, 3);
      pf += kPfStep;
    }
    __m512i xv[MT];
#pragma GCC unroll 4
    for (int m = 0; m < MT; ++m) xv[m] = _mm512_loadu_si512(x + m * ldx + k);
#pragma GCC unroll 8
    for (int n = 0; n < NT; ++n) {
      const __m512i wv = _mm512_maskz_loadu_epi8(in, w + n * ldw + k);
#pragma GCC unroll 4
      for (int m = 0; m < MT; ++m) acc[m][n] = _mm512_dpbusd_epi32(acc[m][n], xv[m], wv);
    }
  }
  // Unrolled like the loops above: an accumulator indexed at run time anywhere makes GCC keep
  // the array in memory and store every accumulator at every k (perf annotate: 2 moves per
  // vpdpbusd, a quarter of its rate).
#pragma GCC unroll 4
  for (int m = 0; m < MT; ++m) {
    if constexpr (NT % 4 == 0) {
#pragma GCC unroll 2
      for (int n = 0; n < NT; n += 4) {
        const __m128i s = hsum4(acc[m][n], acc[m][n + 1], acc[m][n + 2], acc[m][n + 3]);
        int32_t* o = out + m * ldo + n * os;
        if (os == 1) {
          _mm_storeu_si128(reinterpret_cast<__m128i*>(o), s);
        } else {  // rows from chunks (row_tiles.h): outputs os apart
          o[0] = _mm_cvtsi128_si32(s);
          o[os] = _mm_extract_epi32(s, 1);
          o[2 * os] = _mm_extract_epi32(s, 2);
          o[3 * os] = _mm_extract_epi32(s, 3);
        }
      }
    } else {
#pragma GCC unroll 8
      for (int n = 0; n < NT; ++n) out[m * ldo + n * os] = _mm512_reduce_add_epi32(acc[m][n]);
    }
  }
}

// int4 (linear_i8_tiles.h). A 256-bit vpdpbusd sums 4 byte products per int32 lane; giving each
// group 8 lanes (the AVX2 form) converts the lanes to f32 and FMAs them after every instruction.
// Here a lane sums 8 products (two vpdpbusd) first: a block's 16 bytes are loaded into both
// 128-bit halves and masked by 0x0F in the low half (the block's first group) and 0xF0 in the
// high half (its second group, left as 16 u: no shift; a lane's products at most 8 * 240 * 127),
// so one vector holds 16 values of each group and the block's 32 bytes make two. x's 16-byte
// chunks are stored in the matching order (u4_prepare: chunks 0, 2, 1, 3 of each 64 bytes).
// Each lane's int32 sum starts at its aux word, minus the nibbles' +8 over its 8 values of x
// (8 * their sum, 16 * 8 * in the high half), so it ends exact: sum q * qx (times 16 in the high
// half, taken out at the end), and no per-output pass over the group sums is left. Per block and
// row of x: 2 vpdpbusd, a conversion and an FMA for 64 products, against 2 of each before.
constexpr int kU4Lanes = 8;

void u4_prepare(uint8_t* xq, int64_t K, void* aux) {
  const __m256i ones = _mm256_set1_epi8(1), offset = _mm256_setr_epi32(-8, -8, -8, -8, -128, -128, -128, -128);
  int32_t* neg = static_cast<int32_t*>(aux);
  for (int64_t b = 0; b < K / kInt4Block; ++b) {
    __m256i* x = reinterpret_cast<__m256i*>(xq + b * kInt4Block);
    const __m256i lo = _mm256_loadu_si256(x), hi = _mm256_loadu_si256(x + 1);
    // Chunks 0, 2 and 1, 3.
    const __m256i xa = _mm256_permute2x128_si256(lo, hi, 0x20), xb = _mm256_permute2x128_si256(lo, hi, 0x31);
    _mm256_storeu_si256(x, xa);
    _mm256_storeu_si256(x + 1, xb);
    // Each lane's 4 bytes of xa and of xb summed (x signed, ones unsigned), times its offset.
    const __m256i sums = _mm256_dpbusd_epi32(_mm256_dpbusd_epi32(_mm256_setzero_si256(), ones, xa), ones, xb);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(neg + b * kU4Lanes), _mm256_mullo_epi32(sums, offset));
  }
}

// 16 bytes in both 128-bit halves.
inline __m256i bytes16_twice(const uint8_t* p) {
  return _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

template <int MT, int NT>
inline void vnni_u4_tile(const uint8_t* xq, int64_t ldx, const void* aux, int64_t ldaux, const uint8_t* w,
                         int64_t ldw, const uint16_t* sc, int64_t lds, int64_t K, float* out, int64_t ldo, int64_t os) {
  const int32_t* neg = static_cast<const int32_t*>(aux);
  const __m256i nibbles = _mm256_setr_epi32(0x0F0F0F0F, 0x0F0F0F0F, 0x0F0F0F0F, 0x0F0F0F0F, int(0xF0F0F0F0),
                                            int(0xF0F0F0F0), int(0xF0F0F0F0), int(0xF0F0F0F0));
  // The block's scale pair (int4_scale_pair) to [s0 x 4, s1 x 4]: s0 shifted up, s1 masked.
  const __m256i pair_shift = _mm256_setr_epi32(16, 16, 16, 16, 0, 0, 0, 0);
  const __m256i pair_mask = _mm256_setr_epi32(-1, -1, -1, -1, int(0xFFFF0000), int(0xFFFF0000), int(0xFFFF0000),
                                              int(0xFFFF0000));
  __m256 acc[MT][NT];
#pragma GCC unroll 4
  for (int m = 0; m < MT; ++m)
#pragma GCC unroll 8
    for (int n = 0; n < NT; ++n) acc[m][n] = _mm256_setzero_ps();
  for (int64_t b = 0; b < K / kInt4Block; ++b) {
    __m256i xa[MT], xb[MT];
#pragma GCC unroll 4
    for (int m = 0; m < MT; ++m) {
      xa[m] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq + m * ldx + b * kInt4Block));
      xb[m] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq + m * ldx + b * kInt4Block + kInt4Group));
    }
#pragma GCC unroll 8
    for (int n = 0; n < NT; ++n) {
      const uint8_t* p = w + n * ldw + b * kInt4Group;
      const __m256i wa = _mm256_and_si256(bytes16_twice(p), nibbles);
      const __m256i wb = _mm256_and_si256(bytes16_twice(p + 16), nibbles);
      const __m256i pair = _mm256_set1_epi32(static_cast<int>(int4_scale_pair(sc + n * lds + 2 * b)));
      const __m256 s = _mm256_castsi256_ps(_mm256_and_si256(_mm256_sllv_epi32(pair, pair_shift), pair_mask));
#pragma GCC unroll 4
      for (int m = 0; m < MT; ++m) {
        __m256i t = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(neg + m * ldaux + b * kU4Lanes));
        t = _mm256_dpbusd_epi32(t, wa, xa[m]);
        t = _mm256_dpbusd_epi32(t, wb, xb[m]);
        acc[m][n] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(t), s, acc[m][n]);
      }
    }
  }
  const __m256 sixteenth = _mm256_setr_ps(1.0f, 1.0f, 1.0f, 1.0f, 0.0625f, 0.0625f, 0.0625f, 0.0625f);
#pragma GCC unroll 4
  for (int m = 0; m < MT; ++m)
#pragma GCC unroll 8
    for (int n = 0; n < NT; ++n) out[m * ldo + n * os] = hsum_ps(_mm256_mul_ps(acc[m][n], sixteenth));
}

// 1 x 8 tiles for one row (8 independent accumulators); 4 rows of w for more (4 x 4: 16
// accumulators, 4 + 4 loads per 16 vpdpbusd). A decode step's rows go in 4 chunks at every row
// count (row_tiles.h), so its tiles are MT x 4.
struct Vnni {
  template <int MT, int NT>
  static void tile(const uint8_t* x, int64_t ldx, const int8_t* w, int64_t ldw, int64_t K, int32_t* out, int64_t ldo,
                   int64_t os, const int8_t* next) {
    vnni_tile<MT, NT>(x, ldx, w, ldw, K, out, ldo, os, next);
  }
  template <int MT>
  static constexpr int cols() { return MT == 1 ? 8 : 4; }
  template <int MT>
  static constexpr int chunks() { return 4; }
  // int4 (256-bit vpdpbusd, AVX512-VL): 4 rows of w at every row count (4 x 4: 16 accumulators,
  // 8 vectors of x, of 32 registers); chunks at every row count, as the int8 tiles.
  template <int MT, int NT>
  static void u4_tile(const uint8_t* xq, int64_t ldx, const void* aux, int64_t ldaux, const uint8_t* w, int64_t ldw,
                      const uint16_t* sc, int64_t lds, int64_t K, float* out, int64_t ldo, int64_t os) {
    vnni_u4_tile<MT, NT>(xq, ldx, aux, ldaux, w, ldw, sc, lds, K, out, ldo, os);
  }
  template <int MT>
  static constexpr int u4_cols() { return 4; }
  template <int MT>
  static constexpr int u4_chunks() { return 4; }
};

}  // namespace

const I8Tiles& i8_tiles_vnni() {
  static const I8Tiles t{quantize_row, dot_i8<Vnni>, 128, "avx512vnni", dot_u4<Vnni>, u4_prepare, kU4Lanes};
  return t;
}

}  // namespace updraft::cpu::wq
