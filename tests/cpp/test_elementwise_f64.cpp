// Elementwise f64 kernels (cpu, elementwise_f64.cpp) against the reference kernels: every op of
// the vocabulary on odd sizes, broadcasting, strided inputs, 1 and 2 threads, and every pair of
// edge values (NaN, +-Inf, +-0, tiny, huge) for the binary ops, pow and division included.
//
// Tolerance: the f64 block ops use the reference's own formulas in double, so arithmetic,
// compares, selects and rounding must be bit-equal (sign of zero included). Transcendental
// functions run on glibc's vector math (1-2 ulp from the C library's scalar functions the
// reference calls) and formulas of several operations may differ by FMA contraction: rtol
// 1e-14 (~45 ulp, far below any formula mistake) for those; special values (NaN, +-inf, +-0)
// must still agree exactly in kind (all_close checks NaN positions).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "kernel_test_util.h"

using namespace updraft;
using namespace updraft::testing;

namespace {

constexpr double kF64Rtol = 1e-14;
constexpr double kF64Atol = 1e-300;

const std::vector<std::string> kExactUnary = {"neg", "abs", "relu", "sqrt", "reciprocal", "floor", "ceil",
                                              "round", "sign", "clamp", "isnan", "logical_not", "rsqrt"};
const std::vector<std::string> kMathUnary = {
    "sigmoid", "tanh", "exp", "log", "erf", "silu", "sin", "cos", "hardswish", "hardsigmoid", "gelu",
    "leaky_relu", "elu", "acos", "acosh", "asin", "asinh", "atan", "atanh", "cosh", "sinh", "tan", "log1p",
    "expm1", "log2", "log10", "exp2"};
const std::vector<std::string> kBinary = {"add", "sub", "mul", "div", "maximum", "minimum", "pow", "eq", "ne", "lt",
                                          "le", "gt", "ge", "remainder", "floor_divide", "atan2", "fmod"};

Attrs attrs_for(const std::string& op) {
  if (op == "clamp") return {{"min", -0.5}, {"max", 1.25}};
  if (op == "leaky_relu") return {{"negative_slope", 0.2}};
  if (op == "elu") return {{"alpha", 1.5}};
  return {};
}

double tol_for(const std::string& op) {
  for (const auto& e : kExactUnary)
    if (e == op) return 0.0;
  return kF64Rtol;
}

// Also checks the sign of every zero, which all_close cannot see.
::testing::AssertionResult matches_ref_signed(const std::string& op, const std::vector<TensorView>& ins, Attrs attrs,
                                              double rtol, int threads = 0, double atol = kF64Atol) {
  auto one = build(op, inputs_of(ins), attrs);
  std::string name = one->kernel_name(Device::cpu);
  if (name != "cpu_f64_" + op && name.rfind("cpu_f64_", 0) != 0)
    return ::testing::AssertionFailure() << op << " ran " << name << " on cpu";
  auto want = run_node(*one->node, ins, Device::ref);
  auto got = run_node(*one->node, ins, Device::cpu, nullptr, threads);
  auto r = all_close(got[0], want[0], rtol, rtol ? atol : 0.0);
  if (!r) return ::testing::AssertionFailure() << op << ": " << r.message();
  if (got[0].dtype() == DType::f64)
    for (int64_t i = 0; i < got[0].numel(); ++i) {
      double g = got[0].ptr<double>()[i], w = want[0].ptr<double>()[i];
      if (g == 0 && w == 0 && std::signbit(g) != std::signbit(w))
        return ::testing::AssertionFailure() << op << ": element " << i << " has the wrong sign of zero";
    }
  return ::testing::AssertionSuccess();
}

Tensor f64_of(const std::vector<double>& v) {
  Tensor t(DType::f64, {static_cast<int64_t>(v.size())});
  std::copy(v.begin(), v.end(), t.ptr<double>());
  return t;
}

const double kInf = std::numeric_limits<double>::infinity();
const double kNan = std::numeric_limits<double>::quiet_NaN();
const std::vector<double> kEdges = {0.0, -0.0, kInf, -kInf, kNan, 1.0, -1.0, 0.5, -0.5, 2.0, -2.0, 3.0, 2.5, -2.5,
                                    1e-310, -1e-310, 1e-300, 1e300, -1e300, 710.0, -745.0, 7.0, -7.0, 0.3};

}  // namespace

TEST(ElementwiseCpuF64, UnaryMatchesRefAcrossSizesAndThreads) {
  for (int64_t n : {0, 1, 7, 33, 129, 100003}) {
    Tensor x = random_tensor(DType::f64, {n}, 1, -6, 6);
    Tensor pos = random_tensor(DType::f64, {n}, 2, 0.01, 8);
    for (int threads : {1, 2}) {
      for (const auto& op : kExactUnary)
        EXPECT_TRUE(matches_ref_signed(op, {x.view()}, attrs_for(op), 0.0, threads)) << "n=" << n;
      for (const auto& op : kMathUnary)
        EXPECT_TRUE(matches_ref_signed(op, {x.view()}, attrs_for(op), kF64Rtol, threads)) << "n=" << n;
      for (const char* op : {"log", "sqrt", "rsqrt", "log2", "log10", "acosh"})
        EXPECT_TRUE(matches_ref_signed(op, {pos.view()}, {}, tol_for(op), threads)) << "n=" << n;
      // 0.5 x (1 + tanh u) cancels for x << 0 on both sides (as in PyTorch): an ulp of tanh
      // becomes an absolute error of ~x * eps there, hence an absolute 1e-15.
      EXPECT_TRUE(matches_ref_signed("gelu", {x.view()}, {{"approximate", "tanh"}}, kF64Rtol, threads, 1e-15));
    }
  }
}

TEST(ElementwiseCpuF64, UnaryEdgeValues) {
  Tensor x = f64_of(kEdges);
  for (const auto& op : kExactUnary) EXPECT_TRUE(matches_ref_signed(op, {x.view()}, attrs_for(op), 0.0));
  for (const auto& op : kMathUnary) EXPECT_TRUE(matches_ref_signed(op, {x.view()}, attrs_for(op), kF64Rtol));
  EXPECT_TRUE(matches_ref_signed("gelu", {x.view()}, {{"approximate", "tanh"}}, kF64Rtol, 0, 1e-15));
  // x ** 0.5 and x ** -0.5 run as sqrt / rsqrt, as PyTorch's do (-inf ** 0.5 is NaN in eager,
  // +inf in the reference's std::pow): tests/python/test_f64_ops.py checks those against eager.
  for (double e : {2.0, -1.0, 3.0, 1.7, 0.0, -2.0})
    EXPECT_TRUE(matches_ref_signed("pow_scalar", {x.view()}, {{"exponent", e}}, kF64Rtol)) << "e=" << e;
}

// Every (a, b) pair of edge values: division by +-0, inf - inf, pow(-2, 0.5), pow(0, -1),
// pow(nan, 0), remainder by 0, atan2 of zeros, max/min with NaN.
TEST(ElementwiseCpuF64, BinaryEdgeValuePairs) {
  const int64_t k = static_cast<int64_t>(kEdges.size());
  Tensor a(DType::f64, {k, 1}), b(DType::f64, {k});
  std::copy(kEdges.begin(), kEdges.end(), a.ptr<double>());
  std::copy(kEdges.begin(), kEdges.end(), b.ptr<double>());
  for (const auto& op : kBinary) {
    double tol = op == "pow" || op == "atan2" ? kF64Rtol : 0.0;  // vector math vs the C library
    EXPECT_TRUE(matches_ref_signed(op, {a.view(), b.view()}, {}, tol)) << op;
    EXPECT_TRUE(matches_ref_signed(op, {b.view(), a.view()}, {}, tol)) << op;
  }
  Tensor cond = random_tensor(DType::boolean, {k, k}, 3);
  EXPECT_TRUE(matches_ref_signed("where", {cond.view(), a.view(), b.view()}, {}, 0.0));
}

struct BShapes {
  std::vector<int64_t> a, b;
};
const std::vector<BShapes> kBroadcasts = {
    {{100003}, {100003}}, {{7, 33}, {}},  {{}, {7, 33}},         {{7, 33}, {33}},    {{7, 33}, {7, 1}},
    {{5, 3, 9}, {5, 1, 9}}, {{1, 9}, {7, 1}}, {{300, 257}, {257}}, {{300, 257}, {300, 1}}, {{0, 3}, {3}},
    {{1}, {1}},
};

TEST(ElementwiseCpuF64, BinaryBroadcastingAndThreads) {
  for (const auto& s : kBroadcasts) {
    Tensor a = random_tensor(DType::f64, s.a, 4, -3, 3);
    Tensor b = random_tensor(DType::f64, s.b, 5, -3, 3);
    for (int threads : {1, 2})
      for (const auto& op : kBinary)
        EXPECT_TRUE(matches_ref_signed(op, {a.view(), b.view()}, {}, op == "pow" || op == "atan2" ? kF64Rtol : 0.0, threads))
            << op << " " << Attr(s.a).str() << " " << Attr(s.b).str() << " threads " << threads;
    Tensor c = random_tensor(DType::boolean, s.a, 6);
    EXPECT_TRUE(matches_ref_signed("where", {c.view(), a.view(), b.view()}, {}, 0.0));
  }
}

TEST(ElementwiseCpuF64, StridedInputs) {
  Tensor a = random_tensor(DType::f64, {33, 17}, 8);
  Tensor b = random_tensor(DType::f64, {33, 17}, 9);
  auto [at, at_store] = transposed_copy(a);
  auto [bt, bt_store] = transposed_copy(b);
  ASSERT_FALSE(at.is_contiguous());
  for (const auto& op : kExactUnary) EXPECT_TRUE(matches_ref_signed(op, {at}, attrs_for(op), 0.0));
  for (const auto& op : kMathUnary) EXPECT_TRUE(matches_ref_signed(op, {at}, attrs_for(op), kF64Rtol));
  for (const std::string op : {"add", "mul", "div", "maximum", "lt", "pow"}) {
    double tol = op == "pow" ? kF64Rtol : 0.0;
    EXPECT_TRUE(matches_ref_signed(op, {at, b.view()}, {}, tol));
    EXPECT_TRUE(matches_ref_signed(op, {a.view(), bt}, {}, tol));
    EXPECT_TRUE(matches_ref_signed(op, {at, bt}, {}, tol));
  }
  Tensor c = random_tensor(DType::f64, {3, 5, 17}, 10);
  Tensor row = random_tensor(DType::f64, {17}, 11);
  auto [ct, ct_store] = transposed_copy(c);
  EXPECT_TRUE(matches_ref_signed("sub", {ct, row.view()}, {}, 0.0));
}

TEST(ElementwiseCpuF64, KernelNames) {
  Tensor d = random_tensor(DType::f64, {4}, 1);
  auto dn = build("exp", {d.view()});
  EXPECT_EQ(dn->kernel_name(Device::cpu), "cpu_f64_exp");
  auto an = build("add", {d.view(), d.view()});
  EXPECT_EQ(an->kernel_name(Device::cpu), "cpu_f64_add");
}

// exp (and sigmoid / silu through it) is the engine's own vector polynomial (simd_f64.h exp4):
// a dense grid over the whole range, through the subnormal results and both fallbacks
// (x < -708, x > 709), within 2 ulp (relative 4.5e-16) of the C library's exp.
TEST(ElementwiseCpuF64, ExpDenseGridWithinTwoUlp) {
  const int64_t n = 1500001;
  Tensor x(DType::f64, {n});
  for (int64_t i = 0; i < n; ++i) x.ptr<double>()[i] = -750.0 + 1465.0 * static_cast<double>(i) / (n - 1);
  EXPECT_TRUE(matches_ref_signed("exp", {x.view()}, {}, 4.5e-16, 0, 0.0));
  Tensor small = random_tensor(DType::f64, {100003}, 21, -1, 1);
  EXPECT_TRUE(matches_ref_signed("exp", {small.view()}, {}, 4.5e-16, 0, 0.0));
  EXPECT_TRUE(matches_ref_signed("sigmoid", {x.view()}, {}, kF64Rtol));
  EXPECT_TRUE(matches_ref_signed("silu", {x.view()}, {}, kF64Rtol));
}
