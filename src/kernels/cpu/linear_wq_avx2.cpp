// The low-precision-weight dot tiles (linear_wq_tiles.h) on AVX2 + FMA, the engine's baseline:
// 8 lanes; i8 weights widen with vpmovsxbd + vcvtdq2ps, bf16 with vpmovzxwd + a 16-bit shift.
#include <immintrin.h>

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
