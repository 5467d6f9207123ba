// The elementwise rows (src/ir/elementwise_ops.def) and what is derived from them: the op table,
// the epilogue activations (one formula for a fused activation and the node), the fast kernels'
// coverage (an op without a fast functor has no fast kernel).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <optional>

#include "ir/elementwise_program.h"
#include "ir/graph.h"
#include "ir/op_table.h"
#include "ir/ops/params.h"
#include "kernels/elementwise_ops.h"
#include "kernels/kernel.h"

using namespace updraft;

namespace {

Tensor filled(DType dt, const std::vector<int64_t>& shape, const std::vector<double>& v) {
  Tensor t(dt, shape);
  for (size_t i = 0; i < v.size(); ++i) {
    if (dt == DType::f32) t.ptr<float>()[i] = static_cast<float>(v[i]);
    else t.ptr<double>()[i] = v[i];
  }
  return t;
}
double at(const Tensor& t, int64_t i) {
  return t.dtype() == DType::f32 ? t.ptr<float>()[i] : t.ptr<double>()[i];
}

// y = act(x @ I) through a linear with an epilogue, on device d: the epilogue's activation of x.
std::vector<double> linear_act(DType dt, const std::vector<double>& xs, const std::string& act, double alpha,
                               double beta, Device d) {
  const int64_t n = static_cast<int64_t>(xs.size());
  Graph g;
  Value* x = g.add_input("x", {dt, {Dim(n), Dim(1)}});
  Value* w = g.add_constant("w", filled(dt, {1, 1}, {1.0}));
  Node* lin = g.add_node("linear", {x, w},
                         {{"activation", Attr(act)}, {"act_alpha", Attr(alpha)}, {"act_beta", Attr(beta)}});
  Tensor xt = filled(dt, {n, 1}, xs);
  std::vector<Tensor> out = run_node(*lin, {xt.view(), w->constant->view()}, d);
  std::vector<double> r;
  for (int64_t i = 0; i < n; ++i) r.push_back(at(out[0], i));
  return r;
}

// One elementwise node over inputs of n elements each (1-d), on device d.
std::vector<double> node_run(DType dt, const std::vector<std::vector<double>>& ins, const std::string& op, Attrs attrs,
                             Device d) {
  const int64_t n = static_cast<int64_t>(ins[0].size());
  Graph g;
  std::vector<Value*> vals;
  std::vector<Tensor> ts;
  std::vector<TensorView> views;
  for (size_t k = 0; k < ins.size(); ++k) {
    vals.push_back(g.add_input("x" + std::to_string(k), {dt, {Dim(n)}}));
    ts.push_back(filled(dt, {n}, ins[k]));
  }
  for (const Tensor& t : ts) views.push_back(t.view());
  Node* node = g.add_node(op, vals, std::move(attrs));
  std::vector<Tensor> out = run_node(*node, views, d);
  std::vector<double> r;
  for (int64_t i = 0; i < n; ++i) r.push_back(at(out[0], i));
  return r;
}
std::vector<double> node_act(DType dt, const std::vector<double>& xs, const std::string& op, Attrs attrs, Device d) {
  return node_run(dt, {xs}, op, std::move(attrs), d);
}

// The fast kernel the CPU factory builds for `op` on dt inputs of 1000 elements, or nullopt.
std::optional<std::string> fast_kernel(const std::string& op, DType dt, int nin, Attrs attrs = {}) {
  Graph g;
  std::vector<Value*> vals;
  for (int k = 0; k < nin; ++k) vals.push_back(g.add_input("x" + std::to_string(k), {dt, {Dim(1000)}}));
  return probe_fast_kernel(*g.add_node(op, vals, std::move(attrs)), 8);
}

bool same_bits(double a, double b) { return std::memcmp(&a, &b, sizeof a) == 0 || (std::isnan(a) && std::isnan(b)); }

}  // namespace

TEST(ElementwiseRows, OpTableRowsComeFromTheRows) {
  for (const EwNodeInfo& row : kEwNodeOps) {
    SCOPED_TRACE(row.name);
    const OpDef* d = OpTable::get().find(row.name);
    ASSERT_NE(d, nullptr);
    EXPECT_EQ(d->cls, OpClass::Elementwise);
    EXPECT_EQ(d->doc, row.doc);
    EXPECT_EQ(d->min_inputs, ew_op_info(row.op).arity - row.attrs.num_imms());
    EXPECT_FALSE(d->dtypes.empty());
  }
  for (int i = 0; i < static_cast<int>(EwOp::count_); ++i) {
    EwOp op = static_cast<EwOp>(i);
    EXPECT_EQ(ew_op_from_name(ew_op_info(op).name), op);
  }
}

// The fused epilogue's GELU is the gelu node's formula (erfc form): in the negative tail the
// erf form 0.5 x (1 + erf(x / sqrt 2)) cancels to 0, where x Phi(x) is tiny but not zero.
TEST(ElementwiseRows, EpilogueGeluIsTheNodeGeluInTheNegativeTail) {
  const std::vector<double> xs = {-10.0, -8.5, -6.0, -1.0, 0.0, 2.0};
  for (DType dt : {DType::f32, DType::f64}) {
    SCOPED_TRACE(dtype_name(dt));
    std::vector<double> node = node_act(dt, xs, "gelu", {}, Device::ref);
    EXPECT_LT(node[0], 0.0);  // -10 Phi(-10) ~ -7.6e-23
    std::vector<double> ref = linear_act(dt, xs, "gelu", 0, 0, Device::ref);
    for (size_t i = 0; i < xs.size(); ++i) EXPECT_TRUE(same_bits(ref[i], node[i])) << xs[i] << ": " << ref[i] << " vs " << node[i];
    if (dt == DType::f64) {  // the f64 GEMM's epilogue evaluates the same formula
      std::vector<double> fast = linear_act(dt, xs, "gelu", 0, 0, Device::cpu);
      for (size_t i = 0; i < xs.size(); ++i) EXPECT_TRUE(same_bits(fast[i], node[i])) << xs[i];
    }
  }
}

// Every row marked as an epilogue activation is accepted by the compute ops and computes the
// row's formula with act_alpha / act_beta as its immediates (reference and f64 GEMM alike).
TEST(ElementwiseRows, EveryEpilogueRowRunsAsAnActivation) {
  const std::vector<double> xs = {-3.5, -1.0, -0.25, 0.0, 0.5, 2.0, 7.0};
  int count = 0;
  for (int i = 0; i < static_cast<int>(EwOp::count_); ++i) {
    EwOp op = static_cast<EwOp>(i);
    if (ew_op_info(op).epi == EwEpi::no) continue;
    ++count;
    SCOPED_TRACE(ew_op_info(op).name);
    const double alpha = 0.3, beta = 1.5;  // clamp: [0.3, 1.5]; leaky_relu: slope 0.3
    for (Device d : {Device::ref, Device::cpu}) {
      std::vector<double> got = linear_act(DType::f64, xs, ew_op_info(op).name, alpha, beta, d);
      for (size_t k = 0; k < xs.size(); ++k)
        EXPECT_TRUE(same_bits(got[k], ew_ref<double>(op, xs[k], alpha, beta))) << xs[k] << " on " << device_name(d);
    }
  }
  EXPECT_GE(count, 9);
  EXPECT_THROW(Epilogue::activation("exp"), Error);  // a row without epi is not an activation
  EXPECT_FALSE(Epilogue::activation("none").has_value());
}

TEST(ElementwiseRows, Copysign) {
  const double inf = INFINITY, nan = NAN;
  const std::vector<double> a = {1.5, -2.0, 0.0, -0.0, inf, -inf, nan, 3.0, -0.0, 7.0};
  const std::vector<double> b = {-1.0, 3.0, -0.0, 2.0, -1.0, 0.0, -1.0, -nan, -5.0, nan};
  for (DType dt : {DType::f32, DType::f64}) {
    SCOPED_TRACE(dtype_name(dt));
    ASSERT_TRUE(fast_kernel("copysign", dt, 2).has_value());
    for (Device d : {Device::ref, Device::cpu}) {
      std::vector<double> got = node_run(dt, {a, b}, "copysign", {}, d);
      for (size_t i = 0; i < a.size(); ++i) {
        double want = std::copysign(a[i], b[i]);
        EXPECT_EQ(std::signbit(got[i]), std::signbit(want)) << a[i] << ", " << b[i] << " on " << device_name(d);
        EXPECT_TRUE(same_bits(std::fabs(got[i]), std::fabs(want))) << a[i] << ", " << b[i];
      }
    }
  }
  EwProgram p = parse_ew_program("f32: copysign $0 $1; mul %0 #2", "test");
  EXPECT_EQ(p.instrs[0].op, EwOp::copysign);
}

// logit(x, eps): eps < 0 (the default, torch's eps=None) does not clamp.
TEST(ElementwiseRows, Logit) {
  const double inf = INFINITY, nan = NAN;
  const std::vector<double> xs = {0.25, 0.5, 0.9, 1e-3, 0.0, 1.0, -0.5, 1.5, nan, 0.999};
  auto logit = [](double z) { return std::log(z / (1.0 - z)); };
  for (DType dt : {DType::f32, DType::f64}) {
    SCOPED_TRACE(dtype_name(dt));
    // f32: the fast kernel rounds 1 - eps and x / (1 - x) to f32, as PyTorch does
    const double tol = dt == DType::f32 ? 2e-6 : 1e-15;
    ASSERT_TRUE(fast_kernel("logit", dt, 1).has_value());
    for (Device d : {Device::ref, Device::cpu}) {
      std::vector<double> none = node_act(dt, xs, "logit", {}, d);
      std::vector<double> eps = node_act(dt, xs, "logit", {{"eps", Attr(0.01)}}, d);
      for (size_t i = 0; i < xs.size(); ++i) {
        SCOPED_TRACE(std::to_string(xs[i]) + " on " + device_name(d));
        double x = dt == DType::f32 ? static_cast<float>(xs[i]) : xs[i];
        const double lo = dt == DType::f32 ? static_cast<float>(0.01) : 0.01;  // eps at the data type
        double want = logit(x), want_eps = logit(std::min(std::max(x, lo), 1.0 - lo));
        if (std::isnan(x)) want_eps = nan;
        for (auto [g, w] : {std::pair{none[i], want}, std::pair{eps[i], want_eps}}) {
          if (std::isnan(w) || std::isinf(w)) EXPECT_TRUE(same_bits(g, w)) << g << " vs " << w;
          else EXPECT_NEAR(g, w, tol * std::fabs(w)) << g << " vs " << w;
        }
      }
      EXPECT_EQ(none[4], -inf);
      EXPECT_EQ(none[5], inf);
    }
  }
}

// erfinv against torch.erfinv (float64 values printed by torch 2.13) across (-1, 1) and at its
// ends; no fast kernel
// (no functor), so the probe says no and only the reference runs it.
TEST(ElementwiseRows, ErfinvHasOnlyTheReference) {
  const double inf = INFINITY;
  struct Case {
    double x, want;
  };
  const std::vector<Case> cases = {
      {0.5, 0.4769362762044699},     {-0.9, -1.1630871536766743},    {0.999, 2.3267537655135246},
      {1e-10, 8.862269254527581e-11}, {0.1, 0.08885599049425769},     {1 - 1e-15, 5.675915739744713},
      {-0.99999, -3.123413274341571}, {0.75, 0.8134198475976185},
  };
  for (const Case& c : cases) {
    std::vector<double> got = node_act(DType::f64, {c.x}, "erfinv", {}, Device::ref);
    EXPECT_NEAR(got[0], c.want, 9e-16 * std::fabs(c.want)) << c.x;  // 4 ulp
  }
  std::vector<double> ends = node_act(DType::f64, {1.0, -1.0, 1.5, -2.0, NAN, -0.0}, "erfinv", {}, Device::cpu);
  EXPECT_EQ(ends[0], inf);
  EXPECT_EQ(ends[1], -inf);
  EXPECT_TRUE(std::isnan(ends[2]) && std::isnan(ends[3]) && std::isnan(ends[4]));
  EXPECT_TRUE(same_bits(ends[5], -0.0));
  std::vector<double> f32 = node_act(DType::f32, {0.5, -0.9}, "erfinv", {}, Device::ref);
  EXPECT_EQ(f32[0], static_cast<float>(0.4769362762044699));
  EXPECT_EQ(f32[1], static_cast<float>(-1.1630871536766743));
  for (DType dt : {DType::f32, DType::f64}) EXPECT_FALSE(fast_kernel("erfinv", dt, 1).has_value()) << dtype_name(dt);
  EXPECT_THROW(parse_ew_program("f32: erfinv $0", "test"), Error);  // node only: not a program op
}
