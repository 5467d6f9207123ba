// f64 block ops for the elementwise evaluator (BlockProgram<double>, elementwise_exec.cpp).
//
// Each op is a plain loop over a block in double with the reference kernel's formula
// (ref/elementwise.cpp), so results, NaN/Inf/-0 and division by zero included, are the
// reference's bit for bit. Arithmetic, compares, selects, min/max, clamp and the rounding ops
// have no calls or branches the vectoriser cannot turn into blends, so -O3 -mavx2 runs them 4
// lanes at a time (the loop bodies are kept branch-free for that reason). The transcendental
// ops call the C library's double functions per element (< 1 ulp); PyTorch's own vector
// versions (SLEEF, 1 ulp) may differ from them by an ulp or two.
#include <cmath>
#include <limits>

#include "kernels/cpu/elementwise_internal.h"

namespace updraft::cpu_ew {
namespace {

template <typename F> inline void map1(const double* a, double* d, int n, F f) {
  for (int i = 0; i < n; ++i) d[i] = f(a[i]);
}
template <typename F> inline void map2(const double* a, const double* b, double* d, int n, F f) {
  for (int i = 0; i < n; ++i) d[i] = f(a[i], b[i]);
}
template <typename F> inline void map3(const double* a, const double* b, const double* c, double* d, int n, F f) {
  for (int i = 0; i < n; ++i) d[i] = f(a[i], b[i], c[i]);
}

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
    case EwOp::sigmoid: return map1(a, d, n, [](double x) { return 1.0 / (1.0 + std::exp(-x)); });
    case EwOp::tanh: return map1(a, d, n, [](double x) { return std::tanh(x); });
    case EwOp::exp: return map1(a, d, n, [](double x) { return std::exp(x); });
    case EwOp::log: return map1(a, d, n, [](double x) { return std::log(x); });
    case EwOp::sqrt: return map1(a, d, n, [](double x) { return std::sqrt(x); });
    case EwOp::rsqrt: return map1(a, d, n, [](double x) { return 1.0 / std::sqrt(x); });
    case EwOp::erf: return map1(a, d, n, [](double x) { return std::erf(x); });
    case EwOp::silu: return map1(a, d, n, [](double x) { return x / (1.0 + std::exp(-x)); });
    case EwOp::reciprocal: return map1(a, d, n, [](double x) { return 1.0 / x; });
    case EwOp::sin: return map1(a, d, n, [](double x) { return std::sin(x); });
    case EwOp::cos: return map1(a, d, n, [](double x) { return std::cos(x); });
    case EwOp::floor: return map1(a, d, n, [](double x) { return std::floor(x); });
    case EwOp::ceil: return map1(a, d, n, [](double x) { return std::ceil(x); });
    case EwOp::round: return map1(a, d, n, [](double x) { return std::nearbyint(x); });  // half to even
    case EwOp::sign: return map1(a, d, n, [](double x) { return b01(x > 0) - b01(x < 0); });
    case EwOp::hardswish:
      return map1(a, d, n, [](double x) { return x * std::min(std::max(x + 3.0, 0.0), 6.0) / 6.0; });
    case EwOp::hardsigmoid:
      return map1(a, d, n, [](double x) { return std::min(std::max(x + 3.0, 0.0), 6.0) / 6.0; });
    // x * Phi(x) = 0.5 x erfc(-x / sqrt 2): erfc keeps the negative tail accurate.
    case EwOp::gelu: return map1(a, d, n, [](double x) { return 0.5 * x * std::erfc(-x * M_SQRT1_2); });
    case EwOp::gelu_tanh:
      return map1(a, d, n, [](double x) {
        double u = std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x);
        return 0.5 * x * (1.0 + std::tanh(u));
      });
    case EwOp::acos: return map1(a, d, n, [](double x) { return std::acos(x); });
    case EwOp::acosh: return map1(a, d, n, [](double x) { return std::acosh(x); });
    case EwOp::asin: return map1(a, d, n, [](double x) { return std::asin(x); });
    case EwOp::asinh: return map1(a, d, n, [](double x) { return std::asinh(x); });
    case EwOp::atan: return map1(a, d, n, [](double x) { return std::atan(x); });
    case EwOp::atanh: return map1(a, d, n, [](double x) { return std::atanh(x); });
    case EwOp::cosh: return map1(a, d, n, [](double x) { return std::cosh(x); });
    case EwOp::sinh: return map1(a, d, n, [](double x) { return std::sinh(x); });
    case EwOp::tan: return map1(a, d, n, [](double x) { return std::tan(x); });
    case EwOp::log1p: return map1(a, d, n, [](double x) { return std::log1p(x); });
    case EwOp::expm1: return map1(a, d, n, [](double x) { return std::expm1(x); });
    case EwOp::log2: return map1(a, d, n, [](double x) { return std::log2(x); });
    case EwOp::log10: return map1(a, d, n, [](double x) { return std::log10(x); });
    case EwOp::exp2: return map1(a, d, n, [](double x) { return std::exp2(x); });
    case EwOp::logical_not: return map1(a, d, n, [](double x) { return b01(x == 0.0); });
    case EwOp::isnan: return map1(a, d, n, [](double x) { return b01(x != x); });
    case EwOp::leaky_relu: return map2(a, b, d, n, [](double x, double s) { return x > 0 ? x : x * s; });
    case EwOp::elu: return map2(a, b, d, n, [](double x, double al) { return x > 0 ? x : al * std::expm1(x); });
    case EwOp::add: return map2(a, b, d, n, [](double x, double y) { return x + y; });
    case EwOp::sub: return map2(a, b, d, n, [](double x, double y) { return x - y; });
    case EwOp::mul: return map2(a, b, d, n, [](double x, double y) { return x * y; });
    case EwOp::div: return map2(a, b, d, n, [](double x, double y) { return x / y; });
    // NaN in either operand gives NaN (x + y carries it), as PyTorch's maximum/minimum.
    case EwOp::maximum:
      return map2(a, b, d, n, [](double x, double y) { return (x != x || y != y) ? x + y : std::max(x, y); });
    case EwOp::minimum:
      return map2(a, b, d, n, [](double x, double y) { return (x != x || y != y) ? x + y : std::min(x, y); });
    case EwOp::pow: return map2(a, b, d, n, [](double x, double y) { return std::pow(x, y); });
    case EwOp::remainder: return map2(a, b, d, n, py_remainder);
    case EwOp::floor_divide: return map2(a, b, d, n, py_floor_divide);
    case EwOp::atan2: return map2(a, b, d, n, [](double y, double x) { return std::atan2(y, x); });
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
