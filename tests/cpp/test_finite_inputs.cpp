// runtime/finite_inputs.h: which nodes may fuse a relu / clamp epilogue into oneDNN on calls
// whose inputs are finite; the kernels' two forms (kernels/kernel.h, call_inputs_finite); and
// the plan's per-call scan (Plan::finite_inputs).
#include <gtest/gtest.h>

#include <cmath>

#include "kernel_test_util.h"
#include "runtime/executable.h"
#include "runtime/finite_inputs.h"
#include "runtime/plan.h"

using namespace updraft;
using namespace updraft::testing;

namespace {

Tensor rnd(const std::vector<int64_t>& s, uint32_t seed) { return random_tensor(DType::f32, s, seed); }

Attrs conv_attrs(const std::string& act) {
  Attrs a = epilogue_attrs(act);
  a["padding"] = std::vector<int64_t>{1, 1};
  a["has_bias"] = true;
  return a;
}

// x with a NaN, a +inf and a -inf among random values.
Tensor with_specials(Tensor x) {
  float* p = x.ptr<float>();
  p[3] = NAN;
  p[x.numel() / 2] = INFINITY;
  p[x.numel() - 2] = -INFINITY;
  return x;
}

// The cpu kernel of n built as a plan builds it for a node finite_inputs marks.
std::unique_ptr<Kernel> finite_kernel(const OneNode& n) {
  KernelContext ctx = n.context();
  ctx.finite_inputs = true;
  return KernelRegistry::get().create(ctx, Device::cpu);
}

Tensor run_as(const Kernel& k, const OneNode& n, bool finite) {
  FiniteCall call(finite);
  return run_kernel(k, n);
}

// One node per op over graph input x (f32[1, 4, 6, 6]) and constant weights.
struct Chain {
  Graph g;
  Value* x;
  Chain() { x = g.add_input("x", {DType::f32, {Dim(1), Dim(4), Dim(6), Dim(6)}}); }
  Value* conv(Value* in, const std::string& act, Tensor w) {
    Value* wv = g.add_constant("w" + std::to_string(g.num_values()), std::move(w));
    Value* bv = g.add_constant("b" + std::to_string(g.num_values()), rnd({4}, 9));
    return g.add_node("conv2d", {in, wv, bv}, conv_attrs(act))->output();
  }
};

}  // namespace

TEST(FiniteInputs, KernelsFuseReluAndClampOnlyOnFiniteCalls) {
  for (const std::string act : {"relu", "clamp"}) {
    SCOPED_TRACE(act);
    // Blocked (nChw8c, oneDNN's direct kernels) fuses; plain NCHW runs oneDNN's gemm-based form,
    // whose post-ops go one element at a time, so the engine's pass always applies it there.
    for (int64_t block : {8, 0})
    for (bool finite_x : {true, false}) {
      SCOPED_TRACE("block " + std::to_string(block));
      Tensor x = rnd({2, 8, 7, 7}, 1);
      if (!finite_x) x = with_specials(x);
      Attrs a = conv_attrs(act);
      a["src_block"] = block;
      a["dst_block"] = block;
      auto n = build("conv2d", {input(x), constant(rnd({8, 8, 3, 3}, 2)), constant(rnd({8}, 3))}, a);
      auto fast = finite_kernel(*n);
      const bool gemm = fast->name().find(":gemm:") != std::string::npos;
      EXPECT_EQ(gemm, block == 0) << fast->name();
      EXPECT_EQ(fast->fuses_when_finite(), !gemm) << fast->name();
      EXPECT_EQ(fast->name().find(":act_fused_if_finite") != std::string::npos, !gemm) << fast->name();
      Tensor want = run_kernel(*make_kernel_for(*n, Device::ref), *n);
      // A call the plan did not find finite runs the exact form: NaN stays NaN.
      EXPECT_TRUE(all_close(run_as(*fast, *n, false), want, 1e-4, 1e-5));
      if (finite_x) EXPECT_TRUE(all_close(run_as(*fast, *n, true), want, 1e-4, 1e-5));
      // Built without finite_inputs: one form only.
      EXPECT_FALSE(make_kernel_for(*n, Device::cpu)->fuses_when_finite());
    }
    Tensor a = rnd({9, 16}, 4);
    auto lin = build("linear", {input(a), constant(rnd({24, 16}, 5)), constant(rnd({24}, 6))},
                     [&] { Attrs l = epilogue_attrs(act); l["has_bias"] = true; return l; }());
    auto fast = finite_kernel(*lin);
    Tensor want = run_kernel(*make_kernel_for(*lin, Device::ref), *lin);
    EXPECT_TRUE(all_close(run_as(*fast, *lin, fast->fuses_when_finite()), want, 1e-4, 1e-5)) << fast->name();
    Tensor special = with_specials(a);
    auto lin_nan = build("linear", {input(special), constant(rnd({24, 16}, 5)), constant(rnd({24}, 6))},
                         [&] { Attrs l = epilogue_attrs(act); l["has_bias"] = true; return l; }());
    EXPECT_TRUE(all_close(run_as(*finite_kernel(*lin_nan), *lin_nan, false),
                          run_kernel(*make_kernel_for(*lin_nan, Device::ref), *lin_nan), 1e-4, 1e-5));
  }
}

TEST(FiniteInputs, ProofFollowsOpsThatKeepFiniteValuesFinite) {
  {  // input -> conv(relu) -> conv(clamp): both marked, the input scanned
    Chain c;
    Value* a = c.conv(c.x, "relu", rnd({4, 4, 3, 3}, 1));
    Value* b = c.conv(a, "clamp", rnd({4, 4, 3, 3}, 2));
    c.g.set_outputs({b});
    FiniteInputs f = prove_finite_inputs(c.g);
    EXPECT_TRUE(f.marks(*a->producer));
    EXPECT_TRUE(f.marks(*b->producer));
    EXPECT_EQ(f.inputs, std::vector<int>{0});
  }
  {  // log can make -inf and NaN from finite values: nothing past it is marked
    Chain c;
    Value* l = c.g.add_node("log", {c.x})->output();
    Value* a = c.conv(l, "relu", rnd({4, 4, 3, 3}, 1));
    c.g.set_outputs({a});
    FiniteInputs f = prove_finite_inputs(c.g);
    EXPECT_FALSE(f.marks(*a->producer));
    EXPECT_TRUE(f.inputs.empty());
  }
  {  // a program with a division, and one with only mul / add and finite immediates
    Chain c;
    Value* d = c.g.add_node("fused_elementwise", {c.x, c.x}, {{"program", std::string("f32: div $0 $1")}})->output();
    Value* m = c.g.add_node("fused_elementwise", {c.x}, {{"program", std::string("f32: mul $0 #2.0; add %0 #1.0")}})->output();
    Value* a = c.conv(d, "relu", rnd({4, 4, 3, 3}, 1));
    Value* b = c.conv(m, "relu", rnd({4, 4, 3, 3}, 2));
    c.g.set_outputs({a, b});
    FiniteInputs f = prove_finite_inputs(c.g);
    EXPECT_FALSE(f.marks(*a->producer));
    EXPECT_TRUE(f.marks(*b->producer));
  }
  {  // a weight holding a NaN, and a layer norm with eps 0 (a constant row gives inf)
    Chain c;
    Tensor w = rnd({4, 4, 3, 3}, 1);
    w.ptr<float>()[5] = NAN;
    Value* a = c.conv(c.x, "relu", w);
    Value* ln = c.g.add_node("layer_norm", {c.x}, {{"normalized_ndim", int64_t{1}}, {"eps", 0.0}, {"has_weight", false}, {"has_bias", false}})->output();
    Value* b = c.conv(ln, "relu", rnd({4, 4, 3, 3}, 2));
    c.g.set_outputs({a, b});
    FiniteInputs f = prove_finite_inputs(c.g);
    EXPECT_FALSE(f.marks(*a->producer));
    EXPECT_FALSE(f.marks(*b->producer));
  }
  {  // a mean over static dims keeps finite values finite; over a dim that may be empty, 0 / 0
    Chain c;
    Value* m = c.g.add_node("mean", {c.x}, {{"dims", std::vector<int64_t>{2, 3}}, {"keepdim", true}})->output();
    Value* a = c.conv(m, "relu", rnd({4, 4, 3, 3}, 1));
    Value* s = c.g.add_input("s", {DType::f32, {Dim(1), Dim(4), Dim::sym("s0"), Dim(6)}});
    Value* ms = c.g.add_node("mean", {s}, {{"dims", std::vector<int64_t>{-2}}, {"keepdim", true}})->output();
    Value* b = c.conv(ms, "relu", rnd({4, 4, 3, 3}, 2));
    c.g.set_outputs({a, b});
    FiniteInputs f = prove_finite_inputs(c.g);
    EXPECT_TRUE(f.marks(*a->producer));
    EXPECT_FALSE(f.marks(*b->producer));
    EXPECT_EQ(f.inputs, std::vector<int>{0});
  }
  {  // gelu runs as a oneDNN post-op already (it keeps NaN): nothing to mark or scan
    Chain c;
    Value* a = c.conv(c.x, "gelu", rnd({4, 4, 3, 3}, 1));
    c.g.set_outputs({a});
    FiniteInputs f = prove_finite_inputs(c.g);
    EXPECT_FALSE(f.any());
    EXPECT_TRUE(f.inputs.empty());
  }
}

TEST(FiniteInputs, PlanScansItsInputAndKeepsEagerNaNs) {
  auto g = std::make_unique<Graph>();
  Value* x = g->add_input("x", {DType::f32, {Dim(1), Dim(8), Dim(12), Dim(12)}});
  Value* w1 = g->add_constant("w1", rnd({8, 8, 3, 3}, 1));
  Value* w2 = g->add_constant("w2", rnd({8, 8, 1, 1}, 2));
  Value* a = g->add_node("conv2d", {x, w1}, {{"padding", std::vector<int64_t>{1, 1}}, {"activation", std::string("relu")}})->output();
  Attrs clamp = epilogue_attrs("clamp");
  Value* b = g->add_node("conv2d", {a, w2}, clamp)->output();
  g->set_outputs({b});
  // The reference: the same two convs on the reference kernels, one after the other.
  auto reference = [](const Tensor& in) {
    auto c1 = build("conv2d", {input(in), constant(rnd({8, 8, 3, 3}, 1))},
                    {{"padding", std::vector<int64_t>{1, 1}}, {"activation", std::string("relu")}});
    Tensor mid = run_kernel(*make_kernel_for(*c1, Device::ref), *c1);
    auto c2 = build("conv2d", {input(mid), constant(rnd({8, 8, 1, 1}, 2))}, epilogue_attrs("clamp"));
    return run_kernel(*make_kernel_for(*c2, Device::ref), *c2);
  };
  auto exe = Executable::compile(std::move(g), CompileOptions{});
  auto plan = exe->plan({{1, 8, 12, 12}});
  EXPECT_EQ(plan->finite_inputs(), std::vector<int>{0});
  int fused = 0;
  for (const Step& s : plan->steps())
    if (s.kernel && s.kernel->fuses_when_finite()) ++fused;
  EXPECT_EQ(fused, 2);
  Tensor finite = rnd({1, 8, 12, 12}, 7), special = with_specials(rnd({1, 8, 12, 12}, 7));
  for (const Tensor& in : {finite, special, finite}) {
    Tensor out(DType::f32, {1, 8, 12, 12});
    exe->run_plan(*plan, {in.view()}, {out.view()});
    EXPECT_TRUE(all_close(out, reference(in), 1e-4, 1e-5));
  }
}
