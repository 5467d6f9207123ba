// The f64 GEMM micro-kernel (gemm_f64.h), written once over a vector type so that the AVX2 build
// (gemm_f64.cpp, 4 lanes) and the AVX-512 build (gemm_f64_avx512.cpp, compiled with -mavx512f,
// 8 lanes) share it.
//
//   struct V { using reg = __m256d; static constexpr int lanes = 4;
//              static reg zero(); static reg load(const double*); static void store(double*, reg);
//              static reg set1(double); static reg fma(reg a, reg b, reg c); static reg add(reg, reg); };
//   micro<V, MR, NV>(kc, a, b, c, ldc, m, n, accumulate);   // an MR x (NV * lanes) tile
//
// In an unnamed namespace on purpose: each translation unit instantiates its own copy with its
// own instruction set, and the linker must never merge an AVX-512 instantiation into the AVX2
// path.
#pragma once
#include <immintrin.h>

#include <cstdint>

namespace updraft::cpu::f64 {
namespace {

// The accumulators (MR x NV registers) live in registers across the k loop: every loop over
// them is a compile-time count, fully unrolled.
template <typename V, int MR, int NV>
void micro(int64_t kc, const double* a, const double* b, double* c, int64_t ldc, int m, int n, bool accumulate) {
  constexpr int NR = NV * V::lanes;
  typename V::reg acc[MR][NV];
#pragma GCC unroll 32
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) acc[i][v] = V::zero();
  // C's rows are needed at the end: start fetching them now.
  for (int i = 0; i < m; ++i) _mm_prefetch(reinterpret_cast<const char*>(c + i * ldc), _MM_HINT_T0);
  for (int64_t k = 0; k < kc; ++k) {
    // The panels a few steps ahead (A's from L2, B's from L2/L3).
    _mm_prefetch(reinterpret_cast<const char*>(a + 8 * MR), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(b + 8 * NR), _MM_HINT_T0);
    typename V::reg bv[NV];
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) bv[v] = V::load(b + v * V::lanes);
#pragma GCC unroll 32
    for (int i = 0; i < MR; ++i) {
      typename V::reg ai = V::set1(a[i]);
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) acc[i][v] = V::fma(ai, bv[v], acc[i][v]);
    }
    a += MR;
    b += NR;
  }
  if (m == MR && n == NR) {
#pragma GCC unroll 32
    for (int i = 0; i < MR; ++i)
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) {
        double* p = c + i * ldc + v * V::lanes;
        V::store(p, accumulate ? V::add(acc[i][v], V::load(p)) : acc[i][v]);
      }
    return;
  }
  // An edge tile: through a buffer, only the m x n corner reaches C.
  alignas(64) double t[MR * NR];
#pragma GCC unroll 32
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) V::store(t + i * NR + v * V::lanes, acc[i][v]);
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < n; ++j) c[i * ldc + j] = accumulate ? c[i * ldc + j] + t[i * NR + j] : t[i * NR + j];
}

}  // namespace
}  // namespace updraft::cpu::f64
