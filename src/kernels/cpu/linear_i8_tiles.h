// int8 x int8 products for linear_wq's quantize_x (CompilerConfig.activation_dtype="int8",
// docs/quantization.md "int8 activations"): each row of x is quantised at the call to int8
// (quantize_act_row_int8's format, bit for bit), the int8 weight is read as stored ([N, K]
// row-major, in place), and the products accumulate exactly in int32. The driver
// (linear_wq.cpp) then takes each sum to f32: (f32(sum - x_offset * wsum[n]) * sx[m]) * scale[n].
//
//   const I8Tiles& t = i8_tiles(vnni);
//   float sx = t.quantize(x_row, K, Kp, xq_row);         // Kp = padded_k(K) bytes written
//   t.dot(xq, M, Kp, w, N, K, K, sums, ldo);             // sums[m*ldo + n] = sum_k xq[m, k] w[n, k]
//
// Two instruction sets, each in its own unit:
// - AVX-512 VNNI (linear_i8_vnni.cpp): vpdpbusd multiplies unsigned by signed bytes, so xq holds
//   qx + 128 (x_offset 128) and the driver subtracts 128 * sum_k w[n, k] (wsum, once per weight).
// - AVX2 (linear_i8_avx2.cpp, also AVX-512 CPUs without VNNI): xq holds qx itself; vpmaddubsw
//   takes |qx| and w with qx's sign (vpsignb), whose pair sums (at most 2 * 127 * 127) cannot
//   saturate its int16, and vpmaddwd widens them to int32 (x_offset 0, no wsum).
// Rows of xq are padded with zero bytes to padded_k(K), so the tiles load whole vectors of x;
// the weight is not padded (its tails are masked, or summed by scalar code).
//
// int4 weights (kernels/quantize.h: nibbles u = q + 8 in groups of 32, a scale per group, two
// groups per 32 bytes) take the same quantised rows of x, signed (no offset, on either set): a
// group's 32 nibbles, unsigned bytes 0..15 (the block's bytes masked, or shifted by 4 and
// masked), multiply qx's signed bytes (one vpdpbusd, or vpmaddubsw + vpmaddwd, per group: pair
// sums at most 2 * 15 * 127, no saturation), each group's int32 sums are taken to f32 times the
// group's scale, and 8 * sum_g scale[g] * sum(qx over g) takes the nibbles' offset back out:
//
//   t.dot_u4(xq, M, Kp, xsum, G, w, N, K / 2, scale, G, K, out, ldo);  // out: before sx[m]
//
// with xsum[m * G + g] = sum of qx over group g of row m (u4_row_sums).
#pragma once
#include <immintrin.h>

#include <cstdint>

#include "ir/ops/params.h"
#include "kernels/cpu/int4_scales_avx2.h"
#include "kernels/cpu/row_tiles.h"
#include "kernels/quantize.h"

namespace updraft::cpu::wq {

// One row of x quantised into xq[0, Kp): xq[k] = qx[k] + x_offset for k < K, 0 after. Returns
// sx (quantize_act_row_int8's: NaN for a row with a value that is not finite).
using QuantizeRowFn = float (*)(const float* x, int64_t K, int64_t Kp, uint8_t* xq);
// sums[m * ldo + n] = sum_{k < K} xq[m * ldx + k] * w[n * ldw + k] for m < M, n < N (int32).
using I8DotFn = void (*)(const uint8_t* xq, int64_t M, int64_t ldx, const int8_t* w, int64_t N, int64_t ldw,
                         int64_t K, int32_t* sums, int64_t ldo);

// out[m * ldo + n] = sum_g scale[n * lds + g] * sum_{k in g} qx[m, k] * q[n, k] for an int4 w (rows
// of ldw bytes, bf16 scales) and signed rows of x (xq, ldx apart; xsum: each row's group sums, ldsum apart).
using U4DotFn = void (*)(const uint8_t* xq, int64_t M, int64_t ldx, const float* xsum, int64_t ldsum,
                         const uint8_t* w, int64_t N, int64_t ldw, const uint16_t* scale, int64_t lds, int64_t K,
                         float* out, int64_t ldo);

struct I8Tiles {
  QuantizeRowFn quantize = nullptr;
  I8DotFn dot = nullptr;
  int x_offset = 0;  // what xq adds to qx (128 on VNNI); the driver subtracts x_offset * wsum[n]
  const char* isa = "";
  U4DotFn dot_u4 = nullptr;  // int4 weights; xq from i8_tiles_avx2().quantize (no offset)
};

const I8Tiles& i8_tiles_avx2();
const I8Tiles& i8_tiles_vnni();  // only on a CPU with AVX-512F, BW and VNNI
// Whether this process may use the VNNI tiles: the CPU has AVX-512F/BW/VNNI and `avx512` (the
// kernel options' use_avx512) allows AVX-512 at all.
bool has_vnni(bool avx512);
inline const I8Tiles& i8_tiles(bool avx512) { return has_vnni(avx512) ? i8_tiles_vnni() : i8_tiles_avx2(); }

// Bytes of one quantised row: K rounded up to the widest tile's vector (64 bytes).
constexpr int64_t padded_k(int64_t K) { return (K + 63) / 64 * 64; }

// The I8DotFn of an instruction set, from its tiles: `Isa` provides
//   template <int MT, int NT> static void tile(xq, ldx, w, ldw, K, sums, ldo, os, next)
// (MT rows of xq by NT rows of w at ldw apart; sum n of row m to sums[m * ldo + n * os]; `next`,
// where the following tile's rows start, may be prefetched, never read),
// `template <int MT> static constexpr int cols()`, the NT it runs with MT rows, and
// `template <int MT> static constexpr int chunks()`, the chunks of row_tiles.h (0: none). Rows
// of x go in groups of up to 4, each over every row of w.
template <class Isa, int MT>
inline void dot_rows(const uint8_t* x, int64_t ldx, const int8_t* w, int64_t N, int64_t ldw, int64_t K,
                     int32_t* out, int64_t ldo) {
  constexpr int NT = Isa::template cols<MT>(), C = Isa::template chunks<MT>();
  for_row_tiles<C, NT>(
      N,
      [&](int64_t n, int64_t S) {
        Isa::template tile<MT, C>(x, ldx, w + n * ldw, S * ldw, K, out + n, ldo, S, nullptr);
      },
      [&](int64_t n) { Isa::template tile<MT, NT>(x, ldx, w + n * ldw, ldw, K, out + n, ldo, 1, w + (n + NT) * ldw); },
      [&](int64_t n) { Isa::template tile<MT, 1>(x, ldx, w + n * ldw, ldw, K, out + n, ldo, 1, nullptr); });
}

template <class Isa>
void dot_i8(const uint8_t* x, int64_t M, int64_t ldx, const int8_t* w, int64_t N, int64_t ldw, int64_t K,
            int32_t* out, int64_t ldo) {
  for (int64_t m = 0; m < M; m += 4) {
    const uint8_t* xm = x + m * ldx;
    int32_t* om = out + m * ldo;
    switch (M - m >= 4 ? 4 : M - m) {
      case 1: dot_rows<Isa, 1>(xm, ldx, w, N, ldw, K, om, ldo); break;
      case 2: dot_rows<Isa, 2>(xm, ldx, w, N, ldw, K, om, ldo); break;
      case 3: dot_rows<Isa, 3>(xm, ldx, w, N, ldw, K, om, ldo); break;
      default: dot_rows<Isa, 4>(xm, ldx, w, N, ldw, K, om, ldo); break;
    }
  }
}

// xsum[g] = sum of the signed qx over group g of one quantised row (G groups).
static inline void u4_row_sums(const uint8_t* xq, int64_t G, float* xsum) {
  const int8_t* q = reinterpret_cast<const int8_t*>(xq);
  for (int64_t g = 0; g < G; ++g) {
    int32_t s = 0;
    for (int64_t k = 0; k < kInt4Group; ++k) s += q[g * kInt4Group + k];
    xsum[g] = static_cast<float>(s);
  }
}

// The int4 tiles, shared by both units: `Isa` provides
//   static __m256i group_dot(__m256i u, __m256i x)   // 8 int32 lanes summing u[k] * x[k], k < 32
// (u unsigned bytes, x signed).
// static: each unit keeps its own copy of these, compiled with its flags (the VNNI unit's may use
// AVX-512 encodings), never the other unit's.
// A block's 32 bytes as its two groups' 32 nibbles each, in k order.
static inline void u4_block(const uint8_t* p, __m256i* u) {
  const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)), nib = _mm256_set1_epi8(0xF);
  u[0] = _mm256_and_si256(b, nib);
  u[1] = _mm256_and_si256(_mm256_srli_epi16(b, 4), nib);
}

static inline float hsum_ps(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
}

template <class Isa, int MT, int NT>
inline void u4_tile(const uint8_t* xq, int64_t ldx, const float* xsum, int64_t ldsum, const uint8_t* w, int64_t ldw,
                    const uint16_t* sc, int64_t lds, int64_t K, float* out, int64_t ldo, int64_t os) {
  const int8_t* x = reinterpret_cast<const int8_t*>(xq);
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
        const __m256 s = s2[h];
#pragma GCC unroll 4
        for (int m = 0; m < MT; ++m) {
          const __m256i xv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + m * ldx + g * kInt4Group));
          acc[m][n] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(Isa::group_dot(u[h], xv)), s, acc[m][n]);
        }
      }
    }
  }
  // The nibbles' +8: 8 * sum_g scale[g] * xsum[g], 8 groups per FMA (G is even).
#pragma GCC unroll 4
  for (int m = 0; m < MT; ++m)
#pragma GCC unroll 8
    for (int n = 0; n < NT; ++n) {
      const uint16_t* sn = sc + n * lds;
      const float* xs = xsum + m * ldsum;
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

// Chunks of row_tiles.h for MT rows of x (both sets): 4 up to 2 rows, none from 3 (their tiles
// take 2 rows of w at a time).
template <int MT>
constexpr int kU4Chunks = MT <= 2 ? 4 : 0;

template <class Isa, int MT>
inline void u4_rows(const uint8_t* xq, int64_t ldx, const float* xsum, int64_t ldsum, const uint8_t* w, int64_t N,
                    int64_t ldw, const uint16_t* sc, int64_t lds, int64_t K, float* out, int64_t ldo) {
  constexpr int C = kU4Chunks<MT>, NT = MT == 1 ? 4 : 2;
  for_row_tiles<C, NT>(
      N,
      [&](int64_t n, int64_t S) {
        u4_tile<Isa, MT, C>(xq, ldx, xsum, ldsum, w + n * ldw, S * ldw, sc + n * lds, S * lds, K, out + n, ldo, S);
      },
      [&](int64_t n) {
        u4_tile<Isa, MT, NT>(xq, ldx, xsum, ldsum, w + n * ldw, ldw, sc + n * lds, lds, K, out + n, ldo, 1);
      },
      [&](int64_t n) {
        u4_tile<Isa, MT, 1>(xq, ldx, xsum, ldsum, w + n * ldw, ldw, sc + n * lds, lds, K, out + n, ldo, 1);
      });
}

template <class Isa>
void dot_u4(const uint8_t* xq, int64_t M, int64_t ldx, const float* xsum, int64_t ldsum, const uint8_t* w, int64_t N,
            int64_t ldw, const uint16_t* sc, int64_t lds, int64_t K, float* out, int64_t ldo) {
  for (int64_t m = 0; m < M; m += 4) {
    const uint8_t* xm = xq + m * ldx;
    const float* sm = xsum + m * ldsum;
    float* om = out + m * ldo;
    switch (M - m >= 4 ? 4 : M - m) {
      case 1: u4_rows<Isa, 1>(xm, ldx, sm, ldsum, w, N, ldw, sc, lds, K, om, ldo); break;
      case 2: u4_rows<Isa, 2>(xm, ldx, sm, ldsum, w, N, ldw, sc, lds, K, om, ldo); break;
      case 3: u4_rows<Isa, 3>(xm, ldx, sm, ldsum, w, N, ldw, sc, lds, K, om, ldo); break;
      default: u4_rows<Isa, 4>(xm, ldx, sm, ldsum, w, N, ldw, sc, lds, K, om, ldo); break;
    }
  }
}

}  // namespace updraft::cpu::wq
