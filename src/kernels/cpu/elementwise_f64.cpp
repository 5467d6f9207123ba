// f64 block ops for the elementwise evaluator (BlockProgram<double>, elementwise_exec.cpp).
//
// Each op computes the reference kernel's formula (ref/elementwise.cpp) in double.
// Arithmetic, compares, selects, min/max, clamp and the rounding ops are plain loops with no
// calls or branches the vectoriser cannot turn into blends, so -O3 -mavx2 runs them 4 lanes at a
// time and their results (NaN/Inf/-0 and division by zero included) are the reference's bit
// for bit. The transcendental functions run on glibc's AVX2 vector math (simd_f64.h: within
// 1-2 ulp of the C library's scalar functions, which the reference calls; PyTorch's SLEEF
// is 1 ulp): a per-element scalar call is far slower than PyTorch's vector math (figures:
// docs/BENCHMARKS.md, "Code-comment figures"). The floor-division
// family and fmod stay per element (exact in any case).
#include <cmath>
#include <limits>

#include "kernels/cpu/elementwise_internal.h"
#include "kernels/cpu/simd_f64.h"
#include "kernels/elementwise_ops.h"

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

// The block forms: Map1..3 run D::f per element on doubles (loops the vectoriser turns into
// 4-lane code), Vec1/Vec2 run D::f over __m256d lanes (glibc's vector math), Block runs
// D::block over the whole block. D is the op's specialisation (CRTP).
template <typename D> struct Map1 {
  static constexpr bool kHas = true;
  static void run(const double* a, const double*, const double*, double* d, int n) {
    map1(a, d, n, [](double x) { return D::f(x); });
  }
};
template <typename D> struct Map2 {
  static constexpr bool kHas = true;
  static void run(const double* a, const double* b, const double*, double* d, int n) {
    map2(a, b, d, n, [](double x, double y) { return D::f(x, y); });
  }
};
template <typename D> struct Map3 {
  static constexpr bool kHas = true;
  static void run(const double* a, const double* b, const double* c, double* d, int n) {
    map3(a, b, c, d, n, [](double x, double y, double z) { return D::f(x, y, z); });
  }
};
template <typename D> struct Vec1 {
  static constexpr bool kHas = true;
  static void run(const double* a, const double*, const double*, double* d, int n) {
    vec1(a, d, n, [](__m256d x) { return D::f(x); });
  }
};
template <typename D> struct Vec2 {
  static constexpr bool kHas = true;
  static void run(const double* a, const double* b, const double*, double* d, int n) {
    simd64::apply2([](__m256d x, __m256d y) { return D::f(x, y); }, a, b, d, n);
  }
};
struct Block {
  static constexpr bool kHas = true;
};

}  // namespace

// The f64 functor of each op; an op with none has no f64 fast kernel (the reference runs it).
template <EwOp Op> struct F64Fn {
  static constexpr bool kHas = false;
};

#define F64_MAP1(OP, ...) \
  template <> struct F64Fn<EwOp::OP> : Map1<F64Fn<EwOp::OP>> { static double f(double x) { return __VA_ARGS__; } };
#define F64_MAP2(OP, ...)                                         \
  template <> struct F64Fn<EwOp::OP> : Map2<F64Fn<EwOp::OP>> {  \
    static double f(double x, double y) { return __VA_ARGS__; } \
  };
#define F64_MAP3(OP, ...)                                                   \
  template <> struct F64Fn<EwOp::OP> : Map3<F64Fn<EwOp::OP>> {            \
    static double f(double x, double y, double z) { return __VA_ARGS__; } \
  };
#define F64_VEC1(OP, ...) \
  template <> struct F64Fn<EwOp::OP> : Vec1<F64Fn<EwOp::OP>> { static __m256d f(__m256d x) { return __VA_ARGS__; } };
#define F64_VEC2(OP, ...)                                           \
  template <> struct F64Fn<EwOp::OP> : Vec2<F64Fn<EwOp::OP>> {    \
    static __m256d f(__m256d x, __m256d y) { return __VA_ARGS__; } \
  };

F64_MAP1(neg, -x)
F64_MAP1(abs, std::fabs(x))
F64_MAP1(relu, x < 0 ? 0.0 : x)  // NaN -> x
F64_VEC1(sigmoid, _mm256_div_pd(one(), _mm256_add_pd(one(), simd64::exp4(neg(x)))))
F64_VEC1(tanh, _ZGVdN4v_tanh(x))
F64_VEC1(exp, simd64::exp4(x))
F64_VEC1(log, _ZGVdN4v_log(x))
F64_MAP1(sqrt, std::sqrt(x))
F64_MAP1(rsqrt, 1.0 / std::sqrt(x))
F64_VEC1(erf, _ZGVdN4v_erf(x))
F64_VEC1(silu, _mm256_div_pd(x, _mm256_add_pd(one(), simd64::exp4(neg(x)))))
F64_MAP1(reciprocal, 1.0 / x)
F64_VEC1(sin, _ZGVdN4v_sin(x))
F64_VEC1(cos, _ZGVdN4v_cos(x))
F64_MAP1(floor, std::floor(x))
F64_MAP1(ceil, std::ceil(x))
F64_MAP1(round, std::nearbyint(x))  // half to even
F64_MAP1(sign, b01(x > 0) - b01(x < 0))
F64_MAP1(hardswish, x * std::min(std::max(x + 3.0, 0.0), 6.0) / 6.0)
F64_MAP1(hardsigmoid, std::min(std::max(x + 3.0, 0.0), 6.0) / 6.0)
// x * Phi(x) = 0.5 x erfc(-x / sqrt 2): erfc keeps the negative tail accurate.
// x >= -1: 0.5 x (1 + erf(x / sqrt 2)) on the vector erf (1 + erf >= 0.31 there: no
// cancellation). Below (and NaN): 0.5 x erfc(-x / sqrt 2) per element, as the reference:
// libmvec's erfc loses up to 1e-6 relative in the tail, the C library's does not.
template <> struct F64Fn<EwOp::gelu> : Block {
  static void run(const double* a, const double*, const double*, double* d, int n) {
    double t[kBlock];
    vec1(a, t, n, [](__m256d x) {
      __m256d e = _ZGVdN4v_erf(_mm256_mul_pd(x, splat(M_SQRT1_2)));
      return _mm256_mul_pd(_mm256_mul_pd(splat(0.5), x), _mm256_add_pd(one(), e));
    });
    for (int i = 0; i < n; ++i) d[i] = a[i] >= -1.0 ? t[i] : 0.5 * a[i] * std::erfc(-a[i] * M_SQRT1_2);
  }
};
template <> struct F64Fn<EwOp::gelu_tanh> : Vec1<F64Fn<EwOp::gelu_tanh>> {
  static __m256d f(__m256d x) {
    __m256d x3 = _mm256_mul_pd(_mm256_mul_pd(_mm256_mul_pd(splat(0.044715), x), x), x);
    __m256d u = _mm256_mul_pd(splat(std::sqrt(2.0 / M_PI)), _mm256_add_pd(x, x3));
    return _mm256_mul_pd(_mm256_mul_pd(splat(0.5), x), _mm256_add_pd(one(), _ZGVdN4v_tanh(u)));
  }
};
F64_VEC1(acos, _ZGVdN4v_acos(x))
F64_VEC1(acosh, _ZGVdN4v_acosh(x))
F64_VEC1(asin, _ZGVdN4v_asin(x))
F64_VEC1(asinh, _ZGVdN4v_asinh(x))
F64_VEC1(atan, _ZGVdN4v_atan(x))
F64_VEC1(atanh, _ZGVdN4v_atanh(x))
F64_VEC1(cosh, _ZGVdN4v_cosh(x))
F64_VEC1(sinh, _ZGVdN4v_sinh(x))
F64_VEC1(tan, _ZGVdN4v_tan(x))
F64_VEC1(log1p, _ZGVdN4v_log1p(x))
F64_VEC1(expm1, _ZGVdN4v_expm1(x))
F64_VEC1(log2, _ZGVdN4v_log2(x))
F64_VEC1(log10, _ZGVdN4v_log10(x))
F64_VEC1(exp2, _ZGVdN4v_exp2(x))
F64_MAP1(logical_not, b01(x == 0.0))
F64_MAP1(isnan, b01(x != x))
F64_MAP2(leaky_relu, x > 0 ? x : x * y)
template <> struct F64Fn<EwOp::elu> : Block {  // expm1 over the block first (vector), then the select; d may alias a or b
  static void run(const double* a, const double* b, const double*, double* d, int n) {
    double t[kBlock];
    simd64::apply(_ZGVdN4v_expm1, a, t, n);
    for (int i = 0; i < n; ++i) d[i] = a[i] > 0 ? a[i] : b[i] * t[i];
  }
};
F64_MAP2(logit, std::log([&] {
           const double z = y < 0 ? x : (x < y ? y : (x > 1.0 - y ? 1.0 - y : x));
           return z / (1.0 - z);
         }()))
F64_MAP2(add, x + y)
F64_MAP2(sub, x - y)
F64_MAP2(mul, x * y)
F64_MAP2(div, x / y)
// NaN in either operand gives NaN (x + y carries it), as PyTorch's maximum/minimum.
F64_MAP2(maximum, (x != x || y != y) ? x + y : std::max(x, y))
F64_MAP2(minimum, (x != x || y != y) ? x + y : std::min(x, y))
F64_VEC2(pow, _ZGVdN4vv_pow(x, y))
F64_MAP2(remainder, ew_py_remainder(x, y))
F64_MAP2(floor_divide, ew_py_floor_divide(x, y))
F64_VEC2(atan2, _ZGVdN4vv_atan2(x, y))
F64_MAP2(fmod, std::fmod(x, y))
F64_MAP2(copysign, std::copysign(x, y))
F64_MAP2(eq, b01(x == y))
F64_MAP2(ne, b01(x != y))
F64_MAP2(lt, b01(x < y))
F64_MAP2(le, b01(x <= y))
F64_MAP2(gt, b01(x > y))
F64_MAP2(ge, b01(x >= y))
F64_MAP2(logical_and, b01((x != 0) & (y != 0)))
F64_MAP2(logical_or, b01((x != 0) | (y != 0)))
F64_MAP3(clamp, x != x ? x : std::min(std::max(x, y), z))  // a NaN x stays NaN
F64_MAP3(where, x != 0 ? y : z)
F64_MAP3(fma, std::fma(x, y, z))

BlockFn<double> block_fn(EwOp op, double) { return block_fn_of<F64Fn, double>(op); }

}  // namespace updraft::cpu_ew
