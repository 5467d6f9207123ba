// The low-precision-weight dot tiles (linear_wq_tiles.h) on AVX-512F, in a unit of its own
// compiled with -mavx512f (CMakeLists.txt); linear_wq.cpp calls them only where the CPU reports
// AVX-512F and cpu_isa allows it. 16 lanes; i8 weights widen with vpmovsxbd + vcvtdq2ps, bf16
// with vpmovzxwd + a 16-bit shift (no AVX512-BF16 needed), int4 with vpmovzxbd and a mask or a
// 4-bit shift per nibble.
#include <immintrin.h>

#include "kernels/cpu/linear_wq_tiles.h"

namespace updraft::cpu::wq {

namespace {

// 8 lanes in this unit (its flags): bcast_dot's tiles for a last block of up to 8 rows of x.
struct Ymm {
  using reg = __m256;
  static constexpr int lanes = 8;
  static reg zero() { return _mm256_setzero_ps(); }
  static reg bcast(float v) { return _mm256_set1_ps(v); }
  static reg loadx(const float* p) { return _mm256_loadu_ps(p); }
  static reg fma(reg a, reg b, reg c) { return _mm256_fmadd_ps(a, b, c); }
  static void store(float* p, reg v) { _mm256_storeu_ps(p, v); }
};

struct Avx512 {
  using half = Ymm;
  using reg = __m512;
  static constexpr int lanes = 16;
  static reg zero() { return _mm512_setzero_ps(); }
  static reg bcast(float v) { return _mm512_set1_ps(v); }
  static reg loadx(const float* p) { return _mm512_loadu_ps(p); }
  static reg widen(const float* p) { return _mm512_loadu_ps(p); }
  static reg widen(const int8_t* p) {
    return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
  }
  static reg widen(const uint16_t* p) {
    __m512i u = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
    return _mm512_castsi512_ps(_mm512_slli_epi32(u, 16));
  }
  // An int4 block's 32 bytes (kernels/quantize.h: byte i holds element i of each of the two
  // groups) times the groups' scales: the 16 possible weights (q - 8) * s of a group are one
  // vector, and each nibble picks its lane of it (vpermps): one multiply per group where widening
  // each nibble to f32 and scaling it took two instructions per vector.
  static void dequant_u4(const uint8_t* p, const uint16_t* s, reg* w) {
    const __m512 q = _mm512_set_ps(7, 6, 5, 4, 3, 2, 1, 0, -1, -2, -3, -4, -5, -6, -7, -8);
    const __m512i pair = _mm512_set1_epi32(static_cast<int>(int4_scale_pair(s)));
    const __m512 s0 = _mm512_castsi512_ps(_mm512_slli_epi32(pair, 16));
    const __m512 s1 = _mm512_castsi512_ps(_mm512_and_si512(pair, _mm512_set1_epi32(static_cast<int>(0xFFFF0000u))));
    const __m512 l0 = _mm512_mul_ps(q, s0), l1 = _mm512_mul_ps(q, s1);
    const __m512i a = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    const __m512i b = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 16)));
    const __m512i nib = _mm512_set1_epi32(0xF);
    w[0] = _mm512_permutexvar_ps(_mm512_and_si512(a, nib), l0);
    w[1] = _mm512_permutexvar_ps(_mm512_and_si512(b, nib), l0);
    w[2] = _mm512_permutexvar_ps(_mm512_srli_epi32(a, 4), l1);
    w[3] = _mm512_permutexvar_ps(_mm512_srli_epi32(b, 4), l1);
  }
  static reg fma(reg a, reg b, reg c) { return _mm512_fmadd_ps(a, b, c); }
  static void store(float* p, reg v) { _mm512_storeu_ps(p, v); }
  static float hsum(reg v) { return _mm512_reduce_add_ps(v); }
};

}  // namespace

const DotTiles& dot_tiles_avx512() {
  static const DotTiles t = make_dot_tiles<Avx512>("avx512");
  return t;
}

}  // namespace updraft::cpu::wq
