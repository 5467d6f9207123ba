// The AVX-512 micro-kernel of the f64 GEMM (gemm_f64.h): 12 x 16 tiles, 24 zmm accumulators.
// Compiled with -mavx512f (CMakeLists.txt); reached only through pick_micro() after a CPU check.
#include <immintrin.h>

#include "kernels/cpu/gemm_f64.h"
#include "kernels/cpu/gemm_f64_ukr.h"

namespace updraft::cpu::f64 {

namespace {
struct Avx512 {
  using reg = __m512d;
  static constexpr int lanes = 8;
  static reg zero() { return _mm512_setzero_pd(); }
  static reg load(const double* p) { return _mm512_loadu_pd(p); }
  static void store(double* p, reg v) { _mm512_storeu_pd(p, v); }
  static reg set1(double x) { return _mm512_set1_pd(x); }
  static reg fma(reg a, reg b, reg c) { return _mm512_fmadd_pd(a, b, c); }
  static reg add(reg a, reg b) { return _mm512_add_pd(a, b); }
};
}  // namespace

const MicroKernel& micro_avx512() {
  static const MicroKernel k{"avx512", 12, 16, micro<Avx512, 12, 2>};
  return k;
}

}  // namespace updraft::cpu::f64
