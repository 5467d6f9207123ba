// The low-precision-weight dot tiles (linear_wq_tiles.h) on AVX2 + FMA, the engine's baseline:
// 8 lanes; i8 weights widen with vpmovsxbd + vcvtdq2ps, bf16 with vpmovzxwd + a 16-bit shift,
// int4 with vpmovzxbd and a mask or a 4-bit shift per nibble.
#include <immintrin.h>

#include "kernels/cpu/int4_scales_avx2.h"
#include "kernels/cpu/linear_wq_tiles.h"

namespace updraft::cpu::wq {

namespace {

struct Avx2 {
  using half = Avx2;  // already 8 lanes
  using reg = __m256;
  static constexpr int lanes = 8;
  static reg zero() { return _mm256_setzero_ps(); }
  static reg bcast(float v) { return _mm256_set1_ps(v); }
  static reg loadx(const float* p) { return _mm256_loadu_ps(p); }
  static reg widen(const float* p) { return _mm256_loadu_ps(p); }
  static reg widen(const int8_t* p) { return widen8<Avx2>(p); }
  static reg widen(const uint16_t* p) { return widen8<Avx2>(p); }
  // An int4 block's 32 bytes (kernels/quantize.h: byte i holds element i of each of the two
  // groups) times the groups' scales: each nibble widened to f32, then u * s - 8 s (8 lanes
  // cannot hold the 16 levels AVX-512's dequant_u4 picks from).
  static void dequant_u4(const uint8_t* p, const uint16_t* s, reg* w) {
    const __m256i nib = _mm256_set1_epi32(0xF);
    reg sb[2];
    u4_scales(s, &sb[0], &sb[1]);
    const reg ob[2] = {_mm256_mul_ps(sb[0], _mm256_set1_ps(-8.0f)), _mm256_mul_ps(sb[1], _mm256_set1_ps(-8.0f))};
#pragma GCC unroll 4
    for (int i = 0; i < 4; ++i) {
      const __m256i u = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p + 8 * i)));
      w[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_and_si256(u, nib)), sb[0], ob[0]);
      w[4 + i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_srli_epi32(u, 4)), sb[1], ob[1]);
    }
  }
  static reg fma(reg a, reg b, reg c) { return _mm256_fmadd_ps(a, b, c); }
  static void store(float* p, reg v) { _mm256_storeu_ps(p, v); }
  static float hsum(reg v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
  }
};

}  // namespace

const DotTiles& dot_tiles_avx2() {
  static const DotTiles t = make_dot_tiles<Avx2>("avx2");
  return t;
}

}  // namespace updraft::cpu::wq
