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
#include "kernels/elementwise_ops.h"

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

// The block forms: Vec1/Vec2/Vec3 run D::f over __m256 lanes (map1..3), Lib1/Lib2 run D::f per
// element (C library calls). D is the op's specialisation (CRTP).
template <typename D> struct Vec1 {
  static constexpr bool kHas = true;
  static void run(const float* a, const float*, const float*, float* d, int n) {
    map1(a, d, n, [](__m256 x) { return D::f(x); });
  }
};
template <typename D> struct Vec2 {
  static constexpr bool kHas = true;
  static void run(const float* a, const float* b, const float*, float* d, int n) {
    map2(a, b, d, n, [](__m256 x, __m256 y) { return D::f(x, y); });
  }
};
template <typename D> struct Vec3 {
  static constexpr bool kHas = true;
  static void run(const float* a, const float* b, const float* c, float* d, int n) {
    map3(a, b, c, d, n, [](__m256 x, __m256 y, __m256 z) { return D::f(x, y, z); });
  }
};
template <typename D> struct Lib1 {
  static constexpr bool kHas = true;
  static void run(const float* a, const float*, const float*, float* d, int n) {
    scalar1(a, d, n, [](float x) { return D::f(x); });
  }
};
template <typename D> struct Lib2 {
  static constexpr bool kHas = true;
  static void run(const float* a, const float* b, const float*, float* d, int n) {
    scalar2(a, b, d, n, [](float x, float y) { return D::f(x, y); });
  }
};

}  // namespace

// The f32 functor of each op; an op with none has no f32 fast kernel (the reference runs it).
template <EwOp Op> struct F32Fn {
  static constexpr bool kHas = false;
};

#define F32_VEC1(OP, ...) \
  template <> struct F32Fn<EwOp::OP> : Vec1<F32Fn<EwOp::OP>> { static __m256 f(__m256 x) { return __VA_ARGS__; } };
#define F32_VEC2(OP, ...)                                        \
  template <> struct F32Fn<EwOp::OP> : Vec2<F32Fn<EwOp::OP>> { \
    static __m256 f(__m256 x, __m256 y) { return __VA_ARGS__; } \
  };
#define F32_VEC3(OP, ...)                                                  \
  template <> struct F32Fn<EwOp::OP> : Vec3<F32Fn<EwOp::OP>> {           \
    static __m256 f(__m256 x, __m256 y, __m256 z) { return __VA_ARGS__; } \
  };
#define F32_LIB1(OP, ...) \
  template <> struct F32Fn<EwOp::OP> : Lib1<F32Fn<EwOp::OP>> { static float f(float x) { return __VA_ARGS__; } };
#define F32_LIB2(OP, ...) \
  template <> struct F32Fn<EwOp::OP> : Lib2<F32Fn<EwOp::OP>> { static float f(float x, float y) { return __VA_ARGS__; } };

F32_VEC1(neg, _mm256_xor_ps(x, splat(-0.0f)))
F32_VEC1(abs, _mm256_andnot_ps(splat(-0.0f), x))
F32_VEC1(relu, _mm256_max_ps(_mm256_setzero_ps(), x))  // NaN -> x
F32_VEC1(sigmoid, div_one_plus_exp_neg(splat(1.0f), x))
F32_VEC1(tanh, simd::tanh256(x))
F32_VEC1(exp, simd::exp256(x))
F32_LIB1(log, std::log(x))
F32_VEC1(sqrt, _mm256_sqrt_ps(x))
F32_VEC1(rsqrt, _mm256_div_ps(splat(1.0f), _mm256_sqrt_ps(x)))
F32_VEC1(erf, simd::erf256(x))
F32_VEC1(silu, div_one_plus_exp_neg(x, x))
F32_VEC1(reciprocal, _mm256_div_ps(splat(1.0f), x))
F32_LIB1(sin, std::sin(x))
F32_LIB1(cos, std::cos(x))
F32_VEC1(floor, _mm256_floor_ps(x))
F32_VEC1(ceil, _mm256_ceil_ps(x))
F32_VEC1(round, _mm256_round_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC))
F32_VEC1(sign, _mm256_sub_ps(bool01(_mm256_cmp_ps(x, _mm256_setzero_ps(), _CMP_GT_OQ)),
                             bool01(_mm256_cmp_ps(x, _mm256_setzero_ps(), _CMP_LT_OQ))))
// x * min(max(x + 3, 0), 6) / 6, NaN propagating like PyTorch's
F32_VEC1(hardswish, _mm256_div_ps(_mm256_mul_ps(x, _mm256_min_ps(splat(6.0f), _mm256_max_ps(_mm256_setzero_ps(),
                                                                                           _mm256_add_ps(x, splat(3.0f))))),
                                  splat(6.0f)))
F32_VEC1(hardsigmoid,
         _mm256_div_ps(_mm256_min_ps(splat(6.0f), _mm256_max_ps(_mm256_setzero_ps(), _mm256_add_ps(x, splat(3.0f)))),
                       splat(6.0f)))
// x * Phi(x) = 0.5 x erfc(-x / sqrt 2): erfc keeps the negative tail accurate.
F32_VEC1(gelu, simd::gelu_erf256(x))
// 0.5 x (1 + tanh u) == x / (1 + e^{-2u}), which has no cancellation for x << 0.
template <> struct F32Fn<EwOp::gelu_tanh> : Vec1<F32Fn<EwOp::gelu_tanh>> {
  static __m256 f(__m256 x) {
    __m256 x3 = _mm256_mul_ps(_mm256_mul_ps(x, x), x);
    __m256 u = _mm256_mul_ps(splat(0.7978845608028654f), _mm256_fmadd_ps(splat(0.044715f), x3, x));
    return div_one_plus_exp_neg(x, _mm256_add_ps(u, u));
  }
};
F32_VEC1(logical_not, bool01(_mm256_cmp_ps(x, _mm256_setzero_ps(), _CMP_EQ_OQ)))
F32_VEC1(isnan, bool01(_mm256_cmp_ps(x, x, _CMP_UNORD_Q)))
// Inverse trig/hyperbolic, log/exp variants: C library per element (< 1 ulp; a vector
// polynomial would need its own range reduction per function for rare ops).
F32_LIB1(acos, std::acos(x))
F32_LIB1(acosh, std::acosh(x))
F32_LIB1(asin, std::asin(x))
F32_LIB1(asinh, std::asinh(x))
F32_LIB1(atan, std::atan(x))
F32_LIB1(atanh, std::atanh(x))
F32_LIB1(cosh, std::cosh(x))
F32_LIB1(sinh, std::sinh(x))
F32_LIB1(tan, std::tan(x))
F32_LIB1(log1p, std::log1p(x))
F32_LIB1(expm1, std::expm1(x))
F32_LIB1(log2, std::log2(x))
F32_LIB1(log10, std::log10(x))
F32_LIB1(exp2, std::exp2(x))
F32_VEC2(leaky_relu, _mm256_blendv_ps(_mm256_mul_ps(x, y), x, _mm256_cmp_ps(x, _mm256_setzero_ps(), _CMP_GT_OQ)))
F32_VEC2(elu, _mm256_blendv_ps(_mm256_mul_ps(y, simd::expm1_256(x)), x, _mm256_cmp_ps(x, _mm256_setzero_ps(), _CMP_GT_OQ)))
// In f32 step for step as PyTorch's CPU kernel (clamp, x / (1 - x), log).
F32_LIB2(logit, std::log([&] {
           const float z = y < 0 ? x : (x < y ? y : (x > 1.0f - y ? 1.0f - y : x));
           return z / (1.0f - z);
         }()))
F32_VEC2(add, _mm256_add_ps(x, y))
F32_VEC2(sub, _mm256_sub_ps(x, y))
F32_VEC2(mul, _mm256_mul_ps(x, y))
F32_VEC2(div, _mm256_div_ps(x, y))
F32_VEC2(maximum, max_nan(x, y))
F32_VEC2(minimum, min_nan(x, y))
F32_LIB2(pow, std::pow(x, y))
F32_LIB2(remainder, ew_py_remainder(x, y))
F32_LIB2(floor_divide, ew_py_floor_divide(x, y))
F32_LIB2(atan2, std::atan2(x, y))
F32_LIB2(fmod, std::fmod(x, y))
F32_VEC2(copysign, _mm256_or_ps(_mm256_andnot_ps(splat(-0.0f), x), _mm256_and_ps(splat(-0.0f), y)))
F32_VEC2(eq, bool01(_mm256_cmp_ps(x, y, _CMP_EQ_OQ)))
F32_VEC2(ne, bool01(_mm256_cmp_ps(x, y, _CMP_NEQ_UQ)))
F32_VEC2(lt, bool01(_mm256_cmp_ps(x, y, _CMP_LT_OQ)))
F32_VEC2(le, bool01(_mm256_cmp_ps(x, y, _CMP_LE_OQ)))
F32_VEC2(gt, bool01(_mm256_cmp_ps(x, y, _CMP_GT_OQ)))
F32_VEC2(ge, bool01(_mm256_cmp_ps(x, y, _CMP_GE_OQ)))
F32_VEC2(logical_and, bool01(_mm256_and_ps(_mm256_cmp_ps(x, _mm256_setzero_ps(), _CMP_NEQ_UQ),
                                           _mm256_cmp_ps(y, _mm256_setzero_ps(), _CMP_NEQ_UQ))))
F32_VEC2(logical_or, bool01(_mm256_or_ps(_mm256_cmp_ps(x, _mm256_setzero_ps(), _CMP_NEQ_UQ),
                                         _mm256_cmp_ps(y, _mm256_setzero_ps(), _CMP_NEQ_UQ))))
// maxps/minps return their second operand on NaN, so x's NaN survives
F32_VEC3(clamp, _mm256_min_ps(z, _mm256_max_ps(y, x)))
F32_VEC3(where, _mm256_blendv_ps(z, y, _mm256_cmp_ps(x, _mm256_setzero_ps(), _CMP_NEQ_UQ)))
F32_VEC3(fma, _mm256_fmadd_ps(x, y, z))

BlockFn<float> block_fn(EwOp op, float) { return block_fn_of<F32Fn, float>(op); }

}  // namespace updraft::cpu_ew
