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
// groups per 32 bytes) take the same quantised rows of x, signed (no offset, on either set),
// which each set then prepares in place for its tiles (u4_prepare: a row's order, and aux words
// per block that take the nibbles' +8 back out). The unsigned nibbles multiply qx's signed bytes,
// each group's int32 sums are taken to f32 times the group's scale:
//
//   t.u4_prepare(xq_row, K, aux_row);                                  // aux: u4_aux_words(K)
//   t.dot_u4(xq, M, Kp, aux, A, w, N, K / 2, scale, G, K, out, ldo);   // out: before sx[m]
//
// - AVX2 (linear_i8_avx2.cpp): a group's 32 nibbles (the block's bytes masked, or shifted by 4
//   and masked) by 32 bytes of x, vpmaddubsw + vpmaddwd (pair sums at most 2 * 15 * 127, no
//   saturation); aux: each group's sum of qx, and 8 * sum_g scale[g] * aux[g] is subtracted at the
//   end of each output.
// - AVX-512 VNNI (linear_i8_vnni.cpp): two groups per vpdpbusd pair, 8 bytes per int32 lane
//   before each conversion to f32 (the order of x's 16-byte chunks changed to match); aux: each
//   lane's share of the +8 (negated), the int32 sum's starting value, so nothing is left to
//   subtract.
#pragma once
#include <immintrin.h>

#include <cstdint>

#include "ir/ops/params.h"
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
// of ldw bytes, bf16 scales) and signed rows of x (xq, ldx apart) prepared by the same set's
// u4_prepare (aux: its words, ldaux apart).
using U4DotFn = void (*)(const uint8_t* xq, int64_t M, int64_t ldx, const void* aux, int64_t ldaux, const uint8_t* w,
                         int64_t N, int64_t ldw, const uint16_t* scale, int64_t lds, int64_t K, float* out,
                         int64_t ldo);
// One quantised row (K bytes, signed) rearranged in place for dot_u4, and its aux words.
using U4PrepareFn = void (*)(uint8_t* xq, int64_t K, void* aux);

struct I8Tiles {
  QuantizeRowFn quantize = nullptr;
  I8DotFn dot = nullptr;
  int x_offset = 0;  // what xq adds to qx (128 on VNNI); the driver subtracts x_offset * wsum[n]
  const char* isa = "";
  U4DotFn dot_u4 = nullptr;  // int4 weights; xq from i8_tiles_avx2().quantize (no offset), then u4_prepare
  U4PrepareFn u4_prepare = nullptr;
  int u4_aux_per_block = 0;  // 4-byte aux words per block of kInt4Block values of a row
  int64_t u4_aux_words(int64_t K) const { return K / kInt4Block * u4_aux_per_block; }
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

static inline float hsum_ps(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
}

// The int4 driver, shared by both units: `Isa` provides
//   template <int MT, int NT> static void u4_tile(xq, ldx, aux, ldaux, w, ldw, sc, lds, K, out, ldo, os)
// (MT rows of x by NT rows of w, outputs os apart as in dot_rows) and
// `template <int MT> static constexpr int u4_cols()`, the NT it runs with MT rows, and
// `u4_chunks<MT>()`, the chunks of row_tiles.h (0: none).
template <class Isa, int MT>
inline void u4_rows(const uint8_t* xq, int64_t ldx, const void* aux, int64_t ldaux, const uint8_t* w, int64_t N,
                    int64_t ldw, const uint16_t* sc, int64_t lds, int64_t K, float* out, int64_t ldo) {
  constexpr int C = Isa::template u4_chunks<MT>(), NT = Isa::template u4_cols<MT>();
  for_row_tiles<C, NT>(
      N,
      [&](int64_t n, int64_t S) {
        Isa::template u4_tile<MT, C>(xq, ldx, aux, ldaux, w + n * ldw, S * ldw, sc + n * lds, S * lds, K, out + n, ldo,
                                     S);
      },
      [&](int64_t n) {
        Isa::template u4_tile<MT, NT>(xq, ldx, aux, ldaux, w + n * ldw, ldw, sc + n * lds, lds, K, out + n, ldo, 1);
      },
      [&](int64_t n) {
        Isa::template u4_tile<MT, 1>(xq, ldx, aux, ldaux, w + n * ldw, ldw, sc + n * lds, lds, K, out + n, ldo, 1);
      });
}

template <class Isa>
void dot_u4(const uint8_t* xq, int64_t M, int64_t ldx, const void* aux, int64_t ldaux, const uint8_t* w, int64_t N,
            int64_t ldw, const uint16_t* sc, int64_t lds, int64_t K, float* out, int64_t ldo) {
  for (int64_t m = 0; m < M; m += 4) {
    const uint8_t* xm = xq + m * ldx;
    const void* am = static_cast<const char*>(aux) + m * ldaux * 4;  // 4-byte words
    float* om = out + m * ldo;
    switch (M - m >= 4 ? 4 : M - m) {
      case 1: u4_rows<Isa, 1>(xm, ldx, am, ldaux, w, N, ldw, sc, lds, K, om, ldo); break;
      case 2: u4_rows<Isa, 2>(xm, ldx, am, ldaux, w, N, ldw, sc, lds, K, om, ldo); break;
      case 3: u4_rows<Isa, 3>(xm, ldx, am, ldaux, w, N, ldw, sc, lds, K, om, ldo); break;
      default: u4_rows<Isa, 4>(xm, ldx, am, ldaux, w, N, ldw, sc, lds, K, om, ldo); break;
    }
  }
}

}  // namespace updraft::cpu::wq
