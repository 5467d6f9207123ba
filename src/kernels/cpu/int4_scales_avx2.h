// The bf16 scales of int4 weights (kernels/quantize.h) widened to f32 vectors, 8 lanes: shared
// by the f32-x tiles' AVX2 unit (linear_wq_avx2.cpp) and the int8-x tiles (linear_i8_tiles.h).
// Results go through pointers: linear_i8_tiles.h is also read by units compiled without AVX,
// where a function returning a vector would change the ABI.
#pragma once
#include <immintrin.h>

#include <cstdint>

#include "kernels/quantize.h"

namespace updraft::cpu::wq {

// A block's two scales as two broadcasts: one 32-bit broadcast of the pair (int4_scale_pair)
// holds s[1] in each lane's high half, already an f32 once masked, and s[0] one shift away.
static inline void u4_scales(const uint16_t* s, __m256* s0, __m256* s1) {
  const __m256i v = _mm256_set1_epi32(static_cast<int>(int4_scale_pair(s)));
  *s0 = _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
  *s1 = _mm256_castsi256_ps(_mm256_and_si256(v, _mm256_set1_epi32(static_cast<int>(0xFFFF0000u))));
}

// 8 consecutive scales as 8 f32 lanes.
static inline void bf16x8(const uint16_t* s, __m256* f) {
  const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s));
  *f = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

}  // namespace updraft::cpu::wq
