// An 8 x 8 block of floats transposed in AVX registers, for the packing loops that turn rows
// into columns: x^T for linear_wq's broadcast tiles (pack_xt, linear_wq_tiles.h) and sdpa's k^T
// (attention.cpp).
// Exact (moves only), 24 shuffles for 64 floats, where an element-by-element copy costs a
// load and a store each.
//
// In an unnamed namespace on purpose, as sdpa_tiles.h: each translation unit compiles its own
// copy with its own instruction set, and the linker must never merge an AVX-512 unit's copy
// into an AVX2 one.
#pragma once
#include <immintrin.h>

#include <cstdint>

namespace updraft::cpu {
namespace {

// Row i of the block is r[i]; column j of it is stored (8 floats) at out + j * ld.
inline void store_transposed8(const __m256 (&r)[8], float* out, int64_t ld) {
  // t: pairs of rows interleaved; s(j): rows 0-3 (or 4-7) of columns j and j + 4.
  const __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
  const __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
  const __m256 t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]);
  const __m256 t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
  const __m256 s0 = _mm256_shuffle_ps(t0, t2, 0x44), s1 = _mm256_shuffle_ps(t0, t2, 0xEE);
  const __m256 s2 = _mm256_shuffle_ps(t1, t3, 0x44), s3 = _mm256_shuffle_ps(t1, t3, 0xEE);
  const __m256 s4 = _mm256_shuffle_ps(t4, t6, 0x44), s5 = _mm256_shuffle_ps(t4, t6, 0xEE);
  const __m256 s6 = _mm256_shuffle_ps(t5, t7, 0x44), s7 = _mm256_shuffle_ps(t5, t7, 0xEE);
  _mm256_storeu_ps(out, _mm256_permute2f128_ps(s0, s4, 0x20));
  _mm256_storeu_ps(out + ld, _mm256_permute2f128_ps(s1, s5, 0x20));
  _mm256_storeu_ps(out + 2 * ld, _mm256_permute2f128_ps(s2, s6, 0x20));
  _mm256_storeu_ps(out + 3 * ld, _mm256_permute2f128_ps(s3, s7, 0x20));
  _mm256_storeu_ps(out + 4 * ld, _mm256_permute2f128_ps(s0, s4, 0x31));
  _mm256_storeu_ps(out + 5 * ld, _mm256_permute2f128_ps(s1, s5, 0x31));
  _mm256_storeu_ps(out + 6 * ld, _mm256_permute2f128_ps(s2, s6, 0x31));
  _mm256_storeu_ps(out + 7 * ld, _mm256_permute2f128_ps(s3, s7, 0x31));
}

}  // namespace
}  // namespace updraft::cpu
