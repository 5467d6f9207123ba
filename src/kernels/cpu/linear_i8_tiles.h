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
#pragma once
#include <cstdint>

#include "kernels/cpu/row_tiles.h"

namespace updraft::cpu::wq {

// One row of x quantised into xq[0, Kp): xq[k] = qx[k] + x_offset for k < K, 0 after. Returns
// sx (quantize_act_row_int8's: NaN for a row with a value that is not finite).
using QuantizeRowFn = float (*)(const float* x, int64_t K, int64_t Kp, uint8_t* xq);
// sums[m * ldo + n] = sum_{k < K} xq[m * ldx + k] * w[n * ldw + k] for m < M, n < N (int32).
using I8DotFn = void (*)(const uint8_t* xq, int64_t M, int64_t ldx, const int8_t* w, int64_t N, int64_t ldw,
                         int64_t K, int32_t* sums, int64_t ldo);

struct I8Tiles {
  QuantizeRowFn quantize = nullptr;
  I8DotFn dot = nullptr;
  int x_offset = 0;  // what xq adds to qx (128 on VNNI); the driver subtracts x_offset * wsum[n]
  const char* isa = "";
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

}  // namespace updraft::cpu::wq
