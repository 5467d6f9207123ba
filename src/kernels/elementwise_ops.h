// The reference scalar formulas of the elementwise ops, generated from the rows of
// ir/elementwise_ops.def: the reference kernels (ref/elementwise.cpp), the reference epilogue
// (ref/compute.cpp) and the f64 GEMM epilogue (cpu/gemm_f64.cpp) all evaluate these, so an
// op has one formula. The single-node ops register a kernel per node row:
//
//   for (const char* op : ew_kernel_node_ops()) r.add(op, Device::ref, factory);
//   double y = EwRef<EwOp::gelu>::eval<double>(x, 0, 0);   // one op, known at compile time
//   float z = ew_ref<float>(op, x, y, 0);                   // any op (a switch)
//
// Float semantics: operands arrive at their precision T (f32 or f64); transcendental and
// arithmetic results are computed in double and rounded once to T (for + - * / that equals
// T arithmetic); floor_divide/remainder/fmod are computed in T because their result depends
// on the rounding of intermediate steps exactly as PyTorch does it. Integer ops compute in
// int64 with two's-complement wrap (i32 results truncate, as PyTorch's do).
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "core/error.h"
#include "ir/elementwise_program.h"

namespace updraft {

// Python-style floor division and remainder, step for step as PyTorch computes them at T.
template <typename T> T ew_py_floor_divide(T a, T b) {
  if (b == 0) return a / b;
  T mod = std::fmod(a, b);
  T div = (a - mod) / b;
  if (mod != 0 && (b < 0) != (mod < 0)) div -= 1;
  if (div == 0) return std::copysign(T(0), a / b);
  T fl = std::floor(div);
  if (div - fl > T(0.5)) fl += 1;
  return fl;
}
template <typename T> T ew_py_remainder(T a, T b) {
  T mod = std::fmod(a, b);
  if (mod != 0 && (b < 0) != (mod < 0)) mod += b;
  return mod;
}

// Integer floor division / remainder in int64 (rounds toward -inf; the remainder takes the
// divisor's sign); b == -1 is taken apart because INT64_MIN / -1 overflows.
inline int64_t ew_int_divmod(int64_t a, int64_t b, bool remainder) {
  UPDRAFT_CHECK(b != 0, remainder ? "remainder" : "floor_divide", "integer division by zero");
  if (b == -1) return remainder ? 0 : static_cast<int64_t>(0 - static_cast<uint64_t>(a));
  int64_t q = a / b, m = a % b;
  bool adjust = m != 0 && ((m < 0) != (b < 0));
  return remainder ? (adjust ? m + b : m) : (adjust ? q - 1 : q);
}
inline int64_t ew_int_floor_divide(int64_t a, int64_t b) { return ew_int_divmod(a, b, false); }
inline int64_t ew_int_remainder(int64_t a, int64_t b) { return ew_int_divmod(a, b, true); }
// Integer clamp by float bounds: +-inf never binds, a fractional bound rounds inward.
inline int64_t ew_int_clamp(int64_t a, double lo, double hi) {
  double x = static_cast<double>(a);
  if (x < lo) return static_cast<int64_t>(std::ceil(lo));
  if (x > hi) return static_cast<int64_t>(std::floor(hi));
  return a;
}

// erfinv in double (glibc has none): Winitzki's closed form (relative error < 2e-3) as the
// start, then Halley steps on erf(y) = |x|, taken as erfc(y) = 1 - |x| above 0.5, where 1 - |x|
// is exact and erfc keeps the tail's relative precision (erf(y) - |x| would cancel to 1e-16
// absolute). Within about 1 ulp of torch.erfinv over [-1, 1].
inline double ew_erfinv(double x) {
  if (!(std::fabs(x) <= 1.0)) return std::numeric_limits<double>::quiet_NaN();
  if (std::fabs(x) == 1.0) return std::copysign(std::numeric_limits<double>::infinity(), x);
  if (x == 0.0) return x;  // keeps -0
  const double ax = std::fabs(x);
  const bool tail = ax > 0.5;
  const double w = std::log((1.0 - ax) * (1.0 + ax));  // ln(1 - x^2) < 0
  const double k = 0.147, t = 2.0 / (M_PI * k) + 0.5 * w;
  double y = std::sqrt(std::sqrt(t * t - w / k) - t);
  for (int i = 0; i < 4; ++i) {
    const double f = tail ? (1.0 - ax) - std::erfc(y) : std::erf(y) - ax;  // erf(y) - |x| either way
    const double d = 2.0 / std::sqrt(M_PI) * std::exp(-y * y);            // erf'(y)
    y -= f / (d + y * f);  // Halley, as erf''(y) = -2 y erf'(y)
  }
  return std::copysign(y, x);
}

[[noreturn]] inline void ew_no_semantics(EwOp op, const char* what) {
  throw Error(ew_op_info(op).name, std::string("has no ") + what + " semantics");
}

// EwRef<op>::eval<T>(a, b, c): the op's reference formula on operands of precision T;
// EwRef<op>::eval_int(a, b, c, imm): its integer semantics (imm[k]: operand k's immediate).
template <EwOp Op> struct EwRef;
#define UPDRAFT_EW_REF_ref(...) return static_cast<T>(__VA_ARGS__);
#define UPDRAFT_EW_REF_no_ref
#define UPDRAFT_EW_INT_int_ref(...) return (__VA_ARGS__);
#define UPDRAFT_EW_INT_no_int
#define UPDRAFT_EW_OP(name, arity, form, result, dtypes, attrs, epi, doc, ref, int_ref)         \
  template <> struct EwRef<EwOp::name> {                                                       \
    template <typename T> static T eval(T ta, T tb, T tc) {                                    \
      [[maybe_unused]] const double a = ta, b = tb, c = tc;                                    \
      UPDRAFT_EW_REF_##ref ew_no_semantics(EwOp::name, "float");                               \
    }                                                                                          \
    static int64_t eval_int(int64_t a, int64_t b, int64_t c, const double* imm) {              \
      [[maybe_unused]] const uint64_t ua = static_cast<uint64_t>(a), ub = static_cast<uint64_t>(b); \
      (void)c, (void)imm;                                                                      \
      UPDRAFT_EW_INT_##int_ref ew_no_semantics(EwOp::name, "integer");                         \
    }                                                                                          \
  };
#include "ir/elementwise_ops.def"

// Any op by value: a switch over the rows.
template <typename T> T ew_ref(EwOp op, T a, T b, T c) {
  switch (op) {
#define UPDRAFT_EW_OP(name, ...) \
  case EwOp::name: return EwRef<EwOp::name>::template eval<T>(a, b, c);
#include "ir/elementwise_ops.def"
    case EwOp::count_: break;
  }
  ew_no_semantics(op, "float");
}
inline int64_t ew_ref_int(EwOp op, const int64_t* v, const double* imm) {
  switch (op) {
#define UPDRAFT_EW_OP(name, ...) \
  case EwOp::name: return EwRef<EwOp::name>::eval_int(v[0], v[1], v[2], imm);
#include "ir/elementwise_ops.def"
    case EwOp::count_: break;
  }
  ew_no_semantics(op, "integer");
}

// Node ops that get the elementwise kernel factories (every node row but cast, which has its
// own kernels).
inline const std::vector<const char*>& ew_kernel_node_ops() {
  static const std::vector<const char*> ops = [] {
    std::vector<const char*> v;
    for (const EwNodeInfo& n : kEwNodeOps)
      if (n.op != EwOp::cast) v.push_back(n.name);
    return v;
  }();
  return ops;
}

}  // namespace updraft
