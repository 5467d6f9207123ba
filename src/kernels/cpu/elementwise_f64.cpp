// f64 block ops for the elementwise evaluator (BlockProgram<double>, elementwise_exec.cpp).
//
// Each op computes the reference kernel's formula (ref/elementwise.cpp) in double.
// Arithmetic, compares, selects, min/max, clamp and the rounding ops are plain loops with no
// calls or branches the vectoriser cannot turn into blends, so -O3 -mavx2 runs them 4 lanes at a
// time and their results (NaN/Inf/-0 and division by zero included) are the reference's bit
// for bit. The transcendental functions run on glibc's AVX2 vector math (simd_f64.h: within
// 1-2 ulp of the C library's scalar functions, which the reference calls; PyTorch's SLEEF
// is 1 ulp): a per-element scalar call was 5-20x slower than PyTorch. The floor-division
// family and fmod stay per element (exact in any case).
#include <cmath>
#include <limits>

#include "kernels/cpu/elementwise_internal.h"
#include "kernels/cpu/simd_f64.h"

namespace updraft::cpu_ew {
namespace {

namespace simd64 = cpu::simd64;

template <typename F> inline void map1(const double* a, double* d, int n, F f) {
  for (int i = 0; i < n; ++i) d[i] = f(a[i]);
}
template <typename F> inline void map2(const double* a, const double* b, double* d, int n, F f) {
  for (int i = 0; i < n; ++i) d[i] = f(a[i], b[i]);
}
template <typename F> inline void map3(const double* a, const double* b, const double* c, double* d, int n, F f) {
  for (int i = 0; i < n; ++i) d[i] = f(a[i], b[i], c[i]);
}

template <typename V> inline void vec1(const double* a, double* d, int n, V f) { simd64::apply(f, a, d, n); }
inline __m256d splat(double v) { return _mm256_set1_pd(v); }
inline __m256d one() { return _mm256_set1_pd(1.0); }
inline __m256d neg(__m256d x) { return _mm256_xor_pd(x, _mm256_set1_pd(-0.0)); }

inline double b01(bool v) { return v ? 1.0 : 0.0; }

// Python-style floor division and remainder, step for step as PyTorch computes them.
double py_floor_divide(double a, double b) {
  if (b == 0) return a / b;
  double mod = std::fmod(a, b);
  double div = (a - mod) / b;
  if (mod != 0 && (b < 0) != (mod < 0)) div -= 1;
  if (div == 0) return std::copysign(0.0, a / b);
  double fl = std::floor(div);
  if (div - fl > 0.5) fl += 1;
  return fl;
}
double py_remainder(double a, double b) {
  double mod = std::fmod(a, b);
  if (mod != 0 && (b < 0) != (mod < 0)) mod += b;
  return mod;
}

}  // namespace

void run_block_op(EwOp op, const double* a, const double* b, const double* c, double* d, int n) {
  switch (op) {
    case EwOp::neg: return map1(a, d, n, [](double x) { return -x; });
    case EwOp::abs: return map1(a, d, n, [](double x) { return std::fabs(x); });
    case EwOp::relu: return map1(a, d, n, [](double x) { return x < 0 ? 0.0 : x; });  // NaN -> x
    case EwOp::sigmoid: return vec1(a, d, n, [](__m256d x) { return _mm256_div_pd(one(), _mm256_add_pd(one(), simd64::exp4(neg(x)))); });
    case EwOp::tanh: return vec1(a, d, n, _ZGVdN4v_tanh);
    case EwOp::exp: return vec1(a, d, n, simd64::exp4);
    case EwOp::log: return vec1(a, d, n, _ZGVdN4v_log);
    case EwOp::sqrt: return map1(a, d, n, [](double x) { return std::sqrt(x); });
    case EwOp::rsqrt: return map1(a, d, n, [](double x) { return 1.0 / std::sqrt(x); });
    case EwOp::erf: return vec1(a, d, n, _ZGVdN4v_erf);
    case EwOp::silu: return vec1(a, d, n, [](__m256d x) { return _mm256_div_pd(x, _mm256_add_pd(one(), simd64::exp4(neg(x)))); });
    case EwOp::reciprocal: return map1(a, d, n, [](double x) { return 1.0 / x; });
    case EwOp::sin: return vec1(a, d, n, _ZGVdN4v_sin);
    case EwOp::cos: return vec1(a, d, n, _ZGVdN4v_cos);
    case EwOp::floor: return map1(a, d, n, [](double x) { return std::floor(x); });
    case EwOp::ceil: return map1(a, d, n, [](double x) { return std::ceil(x); });
    case EwOp::round: return map1(a, d, n, [](double x) { return std::nearbyint(x); });  // half to even
    case EwOp::sign: return map1(a, d, n, [](double x) { return b01(x > 0) - b01(x < 0); });
    case EwOp::hardswish:
      return map1(a, d, n, [](double x) { return x * std::min(std::max(x + 3.0, 0.0), 6.0) / 6.0; });
    case EwOp::hardsigmoid:
      return map1(a, d, n, [](double x) { return std::min(std::max(x + 3.0, 0.0), 6.0) / 6.0; });
    // x * Phi(x) = 0.5 x erfc(-x / sqrt 2): erfc keeps the negative tail accurate.
    // x >= -1: 0.5 x (1 + erf(x / sqrt 2)) on the vector erf (1 + erf >= 0.31 there: no
    // cancellation). Below (and NaN): 0.5 x erfc(-x / sqrt 2) per element, as the reference:
    // libmvec's erfc loses up to 1e-6 relative in the tail, the C library's does not.
    case EwOp::gelu: {
      double t[kBlock];
      vec1(a, t, n, [](__m256d x) {
        __m256d e = _ZGVdN4v_erf(_mm256_mul_pd(x, splat(M_SQRT1_2)));
        return _mm256_mul_pd(_mm256_mul_pd(splat(0.5), x), _mm256_add_pd(one(), e));
      });
      for (int i = 0; i < n; ++i) d[i] = a[i] >= -1.0 ? t[i] : 0.5 * a[i] * std::erfc(-a[i] * M_SQRT1_2);
      return;
    }
    case EwOp::gelu_tanh:
      return vec1(a, d, n, [](__m256d x) {
        __m256d x3 = _mm256_mul_pd(_mm256_mul_pd(_mm256_mul_pd(splat(0.044715), x), x), x);
        __m256d u = _mm256_mul_pd(splat(std::sqrt(2.0 / M_PI)), _mm256_add_pd(x, x3));
        return _mm256_mul_pd(_mm256_mul_pd(splat(0.5), x), _mm256_add_pd(one(), _ZGVdN4v_tanh(u)));
      });
    case EwOp::acos: return vec1(a, d, n, _ZGVdN4v_acos);
    case EwOp::acosh: return vec1(a, d, n, _ZGVdN4v_acosh);
    case EwOp::asin: return vec1(a, d, n, _ZGVdN4v_asin);
    case EwOp::asinh: return vec1(a, d, n, _ZGVdN4v_asinh);
    case EwOp::atan: return vec1(a, d, n, _ZGVdN4v_atan);
    case EwOp::atanh: return vec1(a, d, n, _ZGVdN4v_atanh);
    case EwOp::cosh: return vec1(a, d, n, _ZGVdN4v_cosh);
    case EwOp::sinh: return vec1(a, d, n, _ZGVdN4v_sinh);
    case EwOp::tan: return vec1(a, d, n, _ZGVdN4v_tan);
    case EwOp::log1p: return vec1(a, d, n, _ZGVdN4v_log1p);
    case EwOp::expm1: return vec1(a, d, n, _ZGVdN4v_expm1);
    case EwOp::log2: return vec1(a, d, n, _ZGVdN4v_log2);
    case EwOp::log10: return vec1(a, d, n, _ZGVdN4v_log10);
    case EwOp::exp2: return vec1(a, d, n, _ZGVdN4v_exp2);
    case EwOp::logical_not: return map1(a, d, n, [](double x) { return b01(x == 0.0); });
    case EwOp::isnan: return map1(a, d, n, [](double x) { return b01(x != x); });
    case EwOp::leaky_relu: return map2(a, b, d, n, [](double x, double s) { return x > 0 ? x : x * s; });
    case EwOp::elu: {  // expm1 over the block first (vector), then the select; d may alias a or b
      double t[kBlock];
      simd64::apply(_ZGVdN4v_expm1, a, t, n);
      for (int i = 0; i < n; ++i) d[i] = a[i] > 0 ? a[i] : b[i] * t[i];
      return;
    }
    case EwOp::add: return map2(a, b, d, n, [](double x, double y) { return x + y; });
    case EwOp::sub: return map2(a, b, d, n, [](double x, double y) { return x - y; });
    case EwOp::mul: return map2(a, b, d, n, [](double x, double y) { return x * y; });
    case EwOp::div: return map2(a, b, d, n, [](double x, double y) { return x / y; });
    // NaN in either operand gives NaN (x + y carries it), as PyTorch's maximum/minimum.
    case EwOp::maximum:
      return map2(a, b, d, n, [](double x, double y) { return (x != x || y != y) ? x + y : std::max(x, y); });
    case EwOp::minimum:
      return map2(a, b, d, n, [](double x, double y) { return (x != x || y != y) ? x + y : std::min(x, y); });
    case EwOp::pow: return simd64::apply2(_ZGVdN4vv_pow, a, b, d, n);
    case EwOp::remainder: return map2(a, b, d, n, py_remainder);
    case EwOp::floor_divide: return map2(a, b, d, n, py_floor_divide);
    case EwOp::atan2: return simd64::apply2(_ZGVdN4vv_atan2, a, b, d, n);
    case EwOp::fmod: return map2(a, b, d, n, [](double x, double y) { return std::fmod(x, y); });
    case EwOp::eq: return map2(a, b, d, n, [](double x, double y) { return b01(x == y); });
    case EwOp::ne: return map2(a, b, d, n, [](double x, double y) { return b01(x != y); });
    case EwOp::lt: return map2(a, b, d, n, [](double x, double y) { return b01(x < y); });
    case EwOp::le: return map2(a, b, d, n, [](double x, double y) { return b01(x <= y); });
    case EwOp::gt: return map2(a, b, d, n, [](double x, double y) { return b01(x > y); });
    case EwOp::ge: return map2(a, b, d, n, [](double x, double y) { return b01(x >= y); });
    case EwOp::logical_and: return map2(a, b, d, n, [](double x, double y) { return b01((x != 0) & (y != 0)); });
    case EwOp::logical_or: return map2(a, b, d, n, [](double x, double y) { return b01((x != 0) | (y != 0)); });
    case EwOp::clamp:  // a NaN x stays NaN
      return map3(a, b, c, d, n, [](double x, double lo, double hi) { return x != x ? x : std::min(std::max(x, lo), hi); });
    case EwOp::where: return map3(a, b, c, d, n, [](double m, double x, double y) { return m != 0 ? x : y; });
    default: break;
  }
  throw Error("kernels", std::string("cpu f64 elementwise: op '") + ew_op_info(op).name + "' has no f64 block kernel");
}

}  // namespace updraft::cpu_ew
