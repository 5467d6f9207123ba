// The number formats of low-precision weights (docs/quantization.md), written once: the
// reference kernels of quantize_rows / to_bf16 / linear_wq (kernels/ref/quantized.cpp) and the
// fast kernels read these, so a stored weight means the same everywhere.
//
//   float s = quantize_row_int8(row, K, q);   // q[k] = round(row[k] / s), s = max|row| / 127
//   uint16_t b = f32_to_bf16(x);              // round to nearest even
//   float sx = quantize_act_row_int8(x, K, q); // an activation row (linear_wq's quantize_x)
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>

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

}  // namespace updraft
