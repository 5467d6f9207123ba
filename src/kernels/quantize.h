// The number formats of low-precision weights (docs/quantization.md), written once: the
// reference kernels of quantize_rows / to_bf16 / linear_wq (kernels/ref/quantized.cpp) and the
// fast kernels read these, so a stored weight means the same everywhere.
//
//   float s = quantize_row_int8(row, K, q);   // q[k] = round(row[k] / s), s = max|row| / 127
//   uint16_t b = f32_to_bf16(x);              // round to nearest even
//   float sx = quantize_act_row_int8(x, K, q); // an activation row (linear_wq's quantize_x)
//   quantize_block_int4(b, q, s);              // 64 values -> 32 bytes of nibbles, 2 bf16 scales
//   quantize_row_int4(row, K, q, s);           // a row of K values, block by block
//   int v = int4_at(row, k);                   // element k of a packed int4 row, in [-7, 7]
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>

#include "ir/ops/params.h"

namespace updraft {

// Symmetric int8 of one row: s = max|row[k]| / 127 over the finite values, q[k] =
// round_half_even(row[k] / s) clamped to [-127, 127] (-128 is never used, so -q fits too). A
// row of zeros gets s = 0 and q = 0. Not-finite values: +-inf saturate to +-127, NaN gives 0
// (a weight that is not finite has no int8 form; eager would propagate it). Returns s.
inline float quantize_row_int8(const float* row, int64_t K, int8_t* q) {
  float amax = 0.0f;
  for (int64_t k = 0; k < K; ++k)
    if (std::isfinite(row[k])) amax = std::fmax(amax, std::fabs(row[k]));
  const float s = amax / 127.0f;
  for (int64_t k = 0; k < K; ++k) {
    float v = row[k];
    float r;
    if (std::isnan(v) || s == 0.0f) r = 0.0f;
    else if (std::isinf(v)) r = v > 0 ? 127.0f : -127.0f;
    else r = std::nearbyint(v / s);  // the default rounding mode: to nearest, ties to even
    q[k] = static_cast<int8_t>(std::fmin(127.0f, std::fmax(-127.0f, r)));
  }
  return s;
}

// One row of activations for quantize_x: quantize_row_int8's format, except that a row holding a
// value that is not finite gets scale NaN (its q are quantize_row_int8's), so that every output
// of the row is NaN, where eager's would not be finite either, instead of a value computed as
// if the inf or NaN were not there.
inline float quantize_act_row_int8(const float* row, int64_t K, int8_t* q) {
  const float s = quantize_row_int8(row, K, q);
  for (int64_t k = 0; k < K; ++k)
    if (!std::isfinite(row[k])) return std::nanf("");
  return s;
}

// f32 -> bf16 bits, round to nearest even; NaN stays a (quiet) NaN.
inline uint16_t f32_to_bf16(float x) {
  uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

inline float bf16_to_f32(uint16_t b) {
  uint32_t u = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

// int4 weights: K is cut into groups of kInt4Group (ir/ops/params.h) consecutive values, each
// with its own scale, stored as bf16 (8 significant bits: a 0.4% change of a step that rounding
// to 15 levels already moves by up to half; it cuts a weight's bytes from 0.625 to 0.5625 per
// value, llama.cpp q4_0's, and decode streams those bytes; f32's range, so no group's scale
// underflows as f16's would). With 15 levels, one scale per row would set every step by the row's
// largest value; per group, each step follows its own 32 values (llama.cpp's q4_0 groups the
// same way). Two groups make a block of kInt4Block values in 32 bytes: byte i holds element i of
// the block's first group in its low nibble and element i of its second group in its high
// nibble, each stored as q + 8 with q in [-7, 7] (symmetric; 0 is never stored). So one 32-byte
// load and a mask or a 4-bit shift give either group's 32 values in order
// (linear_wq_tiles.h, linear_i8_tiles.h).

// One value's nibble (q + 8) at scale s; not-finite values as quantize_row_int8 (+-inf
// saturate, NaN gives 0).
inline uint8_t int4_nibble(float v, float s) {
  float r;
  if (std::isnan(v) || s == 0.0f) r = 0.0f;
  else if (std::isinf(v)) r = v > 0 ? 7.0f : -7.0f;
  else r = std::nearbyint(v / s);  // to nearest, ties to even
  return static_cast<uint8_t>(static_cast<int>(std::fmin(7.0f, std::fmax(-7.0f, r))) + 8);
}

// Symmetric int4 of one block of kInt4Block values: per group h, s[h] = bf16(max|g[k]| / 7) over
// its finite values (0 for a group of zeros), q[k] = round_half_even(g[k] / s[h]) clamped to
// [-7, 7], with the rounded scale (the one the kernels multiply by). Writes 32 bytes and 2 scales
// (bf16 bits).
inline void quantize_block_int4(const float* b, uint8_t* q, uint16_t* s) {
  float sf[2];
  for (int h = 0; h < 2; ++h) {
    float amax = 0.0f;
    for (int64_t k = 0; k < kInt4Group; ++k) {
      const float v = b[h * kInt4Group + k];
      if (std::isfinite(v)) amax = std::fmax(amax, std::fabs(v));
    }
    s[h] = f32_to_bf16(amax / 7.0f);
    sf[h] = bf16_to_f32(s[h]);
  }
  for (int64_t i = 0; i < kInt4Group; ++i)
    q[i] = static_cast<uint8_t>(int4_nibble(b[i], sf[0]) | (int4_nibble(b[kInt4Group + i], sf[1]) << 4));
}

// A contiguous row of K values (a multiple of kInt4Block) block by block: K / 2 bytes to q,
// K / kInt4Group bf16 scales to s.
inline void quantize_row_int4(const float* row, int64_t K, uint8_t* q, uint16_t* s) {
  for (int64_t b = 0; b < K / kInt4Block; ++b) quantize_block_int4(row + b * kInt4Block, q + b * kInt4Group, s + 2 * b);
}

// A block's two bf16 scales (adjacent in its row of scales) as one 32-bit value. Broadcast to
// every lane, s[1] is already an f32 in the high half (masked) and s[0] one shift away: two
// vector ops for both scales, where widening each bf16 in scalar registers and broadcasting it
// cost 8% of the 156M's f32-x int4 decode pass at one thread.
inline uint32_t int4_scale_pair(const uint16_t* s) {
  uint32_t pair;
  std::memcpy(&pair, s, sizeof pair);
  return pair;
}

// Element k of an int4 row (K / 2 bytes, blocks as above), as the signed q in [-7, 7].
inline int int4_at(const uint8_t* row, int64_t k) {
  const int64_t j = k % kInt4Block;
  const uint8_t b = row[k / kInt4Block * kInt4Group + j % kInt4Group];
  return static_cast<int>(j < kInt4Group ? b & 0xF : b >> 4) - 8;
}

}  // namespace updraft
