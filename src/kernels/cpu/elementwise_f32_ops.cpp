// f32 block ops for the elementwise evaluator, AVX2 + FMA (x86-64-v3; no AVX-512).
//
// Every op runs 8 lanes at a time; the ragged tail of a block goes through the same vector
// code with masked loads/stores, so an element's result never depends on its position.
// exp/tanh/sigmoid/silu/gelu_tanh/elu/erf/gelu use the vector polynomials of simd_f32.h (max
// error a few ulp, well inside rtol 1e-5 / atol 1e-6 of PyTorch); log, sin, cos, pow, the inverse
// trig/hyperbolic and log/exp variants, atan2, fmod and the floor-division family call the C
// library per element, which is accurate to < 1 ulp.
#include <immintrin.h>

#include <cmath>

#include "kernels/cpu/elementwise_internal.h"
#include "kernels/cpu/simd_f32.h"

namespace updraft::cpu_ew {
namespace {

namespace simd = cpu::simd;  // exp256, expm1_256, tanh256: the shared vector math

inline __m256 splat(float v) { return _mm256_set1_ps(v); }
inline __m256 bool01(__m256 mask) { return _mm256_and_ps(mask, splat(1.0f)); }

// Lanes [0, r) set, for the tail of a block (0 < r < 8).
inline __m256i tail_mask(int r) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(r), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

// x / (1 + e^{-z}): sigmoid (x = 1, z = x), silu (z = x), gelu_tanh (z = 2u, see below).
inline __m256 div_one_plus_exp_neg(__m256 num, __m256 z) {
  __m256 e = simd::exp256(_mm256_sub_ps(_mm256_setzero_ps(), z));
  return _mm256_div_ps(num, _mm256_add_ps(splat(1.0f), e));
}

// NaN-propagating max/min (maxps alone returns its second operand on NaN).
inline __m256 max_nan(__m256 a, __m256 b) {
  __m256 r = _mm256_max_ps(a, b);
  return _mm256_blendv_ps(r, _mm256_add_ps(a, b), _mm256_cmp_ps(a, b, _CMP_UNORD_Q));
}
inline __m256 min_nan(__m256 a, __m256 b) {
  __m256 r = _mm256_min_ps(a, b);
  return _mm256_blendv_ps(r, _mm256_add_ps(a, b), _mm256_cmp_ps(a, b, _CMP_UNORD_Q));
}

template <typename F> void map1(const float* a, float* d, int n, F f) {
  int i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(d + i, f(_mm256_loadu_ps(a + i)));
  if (i < n) {
    __m256i m = tail_mask(n - i);
    _mm256_maskstore_ps(d + i, m, f(_mm256_maskload_ps(a + i, m)));
  }
}
template <typename F> void map2(const float* a, const float* b, float* d, int n, F f) {
  int i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(d + i, f(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i)));
  if (i < n) {
    __m256i m = tail_mask(n - i);
    _mm256_maskstore_ps(d + i, m, f(_mm256_maskload_ps(a + i, m), _mm256_maskload_ps(b + i, m)));
  }
}
template <typename F> void map3(const float* a, const float* b, const float* c, float* d, int n, F f) {
  int i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(d + i, f(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), _mm256_loadu_ps(c + i)));
  if (i < n) {
    __m256i m = tail_mask(n - i);
    _mm256_maskstore_ps(d + i, m, f(_mm256_maskload_ps(a + i, m), _mm256_maskload_ps(b + i, m), _mm256_maskload_ps(c + i, m)));
  }
}
// Per-element C library calls (accurate where no vector polynomial here is).
template <typename F> void scalar1(const float* a, float* d, int n, F f) {
  for (int i = 0; i < n; ++i) d[i] = f(a[i]);
}
template <typename F> void scalar2(const float* a, const float* b, float* d, int n, F f) {
  for (int i = 0; i < n; ++i) d[i] = f(a[i], b[i]);
}

// Python-style floor division and remainder, step for step as PyTorch computes them in f32.
float py_floor_divide(float a, float b) {
  if (b == 0) return a / b;
  float mod = std::fmod(a, b);
  float div = (a - mod) / b;
  if (mod != 0 && (b < 0) != (mod < 0)) div -= 1;
  if (div == 0) return std::copysign(0.0f, a / b);
  float fl = std::floor(div);
  if (div - fl > 0.5f) fl += 1;
  return fl;
}
float py_remainder(float a, float b) {
  float mod = std::fmod(a, b);
  if (mod != 0 && (b < 0) != (mod < 0)) mod += b;
  return mod;
}

}  // namespace

void run_block_op(EwOp op, const float* a, const float* b, const float* c, float* d, int n) {
  const __m256 zero = _mm256_setzero_ps(), one = splat(1.0f), three = splat(3.0f), six = splat(6.0f);
  const __m256 signbit = splat(-0.0f);
  switch (op) {
    case EwOp::neg: return map1(a, d, n, [&](__m256 x) { return _mm256_xor_ps(x, signbit); });
    case EwOp::abs: return map1(a, d, n, [&](__m256 x) { return _mm256_andnot_ps(signbit, x); });
    case EwOp::relu: return map1(a, d, n, [&](__m256 x) { return _mm256_max_ps(zero, x); });  // NaN -> x
    case EwOp::sigmoid: return map1(a, d, n, [&](__m256 x) { return div_one_plus_exp_neg(one, x); });
    case EwOp::tanh: return map1(a, d, n, simd::tanh256);
    case EwOp::exp: return map1(a, d, n, simd::exp256);
    case EwOp::log: return scalar1(a, d, n, [](float x) { return std::log(x); });
    case EwOp::sqrt: return map1(a, d, n, [](__m256 x) { return _mm256_sqrt_ps(x); });
    case EwOp::rsqrt: return map1(a, d, n, [&](__m256 x) { return _mm256_div_ps(one, _mm256_sqrt_ps(x)); });
    case EwOp::erf: return map1(a, d, n, simd::erf256);
    case EwOp::silu: return map1(a, d, n, [&](__m256 x) { return div_one_plus_exp_neg(x, x); });
    case EwOp::reciprocal: return map1(a, d, n, [&](__m256 x) { return _mm256_div_ps(one, x); });
    case EwOp::sin: return scalar1(a, d, n, [](float x) { return std::sin(x); });
    case EwOp::cos: return scalar1(a, d, n, [](float x) { return std::cos(x); });
    case EwOp::floor: return map1(a, d, n, [](__m256 x) { return _mm256_floor_ps(x); });
    case EwOp::ceil: return map1(a, d, n, [](__m256 x) { return _mm256_ceil_ps(x); });
    case EwOp::round:
      return map1(a, d, n, [](__m256 x) { return _mm256_round_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); });
    case EwOp::sign:
      return map1(a, d, n, [&](__m256 x) {
        return _mm256_sub_ps(bool01(_mm256_cmp_ps(x, zero, _CMP_GT_OQ)), bool01(_mm256_cmp_ps(x, zero, _CMP_LT_OQ)));
      });
    case EwOp::hardswish:  // x * min(max(x + 3, 0), 6) / 6, NaN propagating like PyTorch's
      return map1(a, d, n, [&](__m256 x) {
        __m256 t = _mm256_min_ps(six, _mm256_max_ps(zero, _mm256_add_ps(x, three)));
        return _mm256_div_ps(_mm256_mul_ps(x, t), six);
      });
    case EwOp::hardsigmoid:
      return map1(a, d, n, [&](__m256 x) {
        return _mm256_div_ps(_mm256_min_ps(six, _mm256_max_ps(zero, _mm256_add_ps(x, three))), six);
      });
    // x * Phi(x) = 0.5 x erfc(-x / sqrt 2): erfc keeps the negative tail accurate.
    case EwOp::gelu: return map1(a, d, n, simd::gelu_erf256);
    // 0.5 x (1 + tanh u) == x / (1 + e^{-2u}), which has no cancellation for x << 0.
    case EwOp::gelu_tanh:
      return map1(a, d, n, [&](__m256 x) {
        __m256 x3 = _mm256_mul_ps(_mm256_mul_ps(x, x), x);
        __m256 u = _mm256_mul_ps(splat(0.7978845608028654f), _mm256_fmadd_ps(splat(0.044715f), x3, x));
        return div_one_plus_exp_neg(x, _mm256_add_ps(u, u));
      });
    // Inverse trig/hyperbolic, log/exp variants: C library per element (< 1 ulp; a vector
    // polynomial would need its own range reduction per function for rare ops).
    case EwOp::acos: return scalar1(a, d, n, [](float x) { return std::acos(x); });
    case EwOp::acosh: return scalar1(a, d, n, [](float x) { return std::acosh(x); });
    case EwOp::asin: return scalar1(a, d, n, [](float x) { return std::asin(x); });
    case EwOp::asinh: return scalar1(a, d, n, [](float x) { return std::asinh(x); });
    case EwOp::atan: return scalar1(a, d, n, [](float x) { return std::atan(x); });
    case EwOp::atanh: return scalar1(a, d, n, [](float x) { return std::atanh(x); });
    case EwOp::cosh: return scalar1(a, d, n, [](float x) { return std::cosh(x); });
    case EwOp::sinh: return scalar1(a, d, n, [](float x) { return std::sinh(x); });
    case EwOp::tan: return scalar1(a, d, n, [](float x) { return std::tan(x); });
    case EwOp::log1p: return scalar1(a, d, n, [](float x) { return std::log1p(x); });
    case EwOp::expm1: return scalar1(a, d, n, [](float x) { return std::expm1(x); });
    case EwOp::log2: return scalar1(a, d, n, [](float x) { return std::log2(x); });
    case EwOp::log10: return scalar1(a, d, n, [](float x) { return std::log10(x); });
    case EwOp::exp2: return scalar1(a, d, n, [](float x) { return std::exp2(x); });
    case EwOp::logical_not: return map1(a, d, n, [&](__m256 x) { return bool01(_mm256_cmp_ps(x, zero, _CMP_EQ_OQ)); });
    case EwOp::isnan: return map1(a, d, n, [&](__m256 x) { return bool01(_mm256_cmp_ps(x, x, _CMP_UNORD_Q)); });
    case EwOp::leaky_relu:
      return map2(a, b, d, n, [&](__m256 x, __m256 s) {
        return _mm256_blendv_ps(_mm256_mul_ps(x, s), x, _mm256_cmp_ps(x, zero, _CMP_GT_OQ));
      });
    case EwOp::elu:
      return map2(a, b, d, n, [&](__m256 x, __m256 alpha) {
        return _mm256_blendv_ps(_mm256_mul_ps(alpha, simd::expm1_256(x)), x, _mm256_cmp_ps(x, zero, _CMP_GT_OQ));
      });
    case EwOp::add: return map2(a, b, d, n, [](__m256 x, __m256 y) { return _mm256_add_ps(x, y); });
    case EwOp::sub: return map2(a, b, d, n, [](__m256 x, __m256 y) { return _mm256_sub_ps(x, y); });
    case EwOp::mul: return map2(a, b, d, n, [](__m256 x, __m256 y) { return _mm256_mul_ps(x, y); });
    case EwOp::div: return map2(a, b, d, n, [](__m256 x, __m256 y) { return _mm256_div_ps(x, y); });
    case EwOp::maximum: return map2(a, b, d, n, max_nan);
    case EwOp::minimum: return map2(a, b, d, n, min_nan);
    case EwOp::pow: return scalar2(a, b, d, n, [](float x, float y) { return std::pow(x, y); });
    case EwOp::remainder: return scalar2(a, b, d, n, py_remainder);
    case EwOp::floor_divide: return scalar2(a, b, d, n, py_floor_divide);
    case EwOp::atan2: return scalar2(a, b, d, n, [](float y, float x) { return std::atan2(y, x); });
    case EwOp::fmod: return scalar2(a, b, d, n, [](float x, float y) { return std::fmod(x, y); });
    case EwOp::eq: return map2(a, b, d, n, [](__m256 x, __m256 y) { return bool01(_mm256_cmp_ps(x, y, _CMP_EQ_OQ)); });
    case EwOp::ne: return map2(a, b, d, n, [](__m256 x, __m256 y) { return bool01(_mm256_cmp_ps(x, y, _CMP_NEQ_UQ)); });
    case EwOp::lt: return map2(a, b, d, n, [](__m256 x, __m256 y) { return bool01(_mm256_cmp_ps(x, y, _CMP_LT_OQ)); });
    case EwOp::le: return map2(a, b, d, n, [](__m256 x, __m256 y) { return bool01(_mm256_cmp_ps(x, y, _CMP_LE_OQ)); });
    case EwOp::gt: return map2(a, b, d, n, [](__m256 x, __m256 y) { return bool01(_mm256_cmp_ps(x, y, _CMP_GT_OQ)); });
    case EwOp::ge: return map2(a, b, d, n, [](__m256 x, __m256 y) { return bool01(_mm256_cmp_ps(x, y, _CMP_GE_OQ)); });
    case EwOp::logical_and:
      return map2(a, b, d, n, [&](__m256 x, __m256 y) {
        return bool01(_mm256_and_ps(_mm256_cmp_ps(x, zero, _CMP_NEQ_UQ), _mm256_cmp_ps(y, zero, _CMP_NEQ_UQ)));
      });
    case EwOp::logical_or:
      return map2(a, b, d, n, [&](__m256 x, __m256 y) {
        return bool01(_mm256_or_ps(_mm256_cmp_ps(x, zero, _CMP_NEQ_UQ), _mm256_cmp_ps(y, zero, _CMP_NEQ_UQ)));
      });
    case EwOp::clamp:  // maxps/minps return their second operand on NaN, so x's NaN survives
      return map3(a, b, c, d, n, [](__m256 x, __m256 lo, __m256 hi) { return _mm256_min_ps(hi, _mm256_max_ps(lo, x)); });
    case EwOp::where:
      return map3(a, b, c, d, n, [&](__m256 cond, __m256 x, __m256 y) {
        return _mm256_blendv_ps(y, x, _mm256_cmp_ps(cond, zero, _CMP_NEQ_UQ));
      });
    default: break;
  }
  throw Error("kernels", std::string("cpu f32 elementwise: op '") + ew_op_info(op).name + "' has no f32 block kernel");
}

}  // namespace updraft::cpu_ew
