// fuse_elementwise: structure after the pass, and outputs before == after (node-by-node
// evaluation on the reference kernels, and the fused graph also on the cpu kernels).
#include <cmath>
#include <gtest/gtest.h>

#include <map>

#include "ir/text.h"
#include "ir/elementwise_program.h"
#include "ir/graph.h"
#include "kernels/kernel.h"
#include "passes/fuse_elementwise.h"
#include "test_util.h"

using namespace updraft;
using namespace updraft::testing;

namespace {

// Fusion reorders nothing but lets the cpu kernel keep intermediates in registers, with
// vector-polynomial transcendentals: a few ulp per op, well inside PyTorch parity.
constexpr double kRtol = 1e-5;
constexpr double kAtol = 1e-6;

// Runs every node in order on `d`; returns the graph outputs.
std::vector<Tensor> evaluate(const Graph& g, const std::vector<Tensor>& inputs, Device d) {
  std::map<const Value*, Tensor> env;
  for (size_t k = 0; k < inputs.size(); ++k) env[g.inputs()[k]] = inputs[k];
  for (Value* c : g.constants()) env[c] = *c->constant;
  for (Node* n : g.nodes()) {
    std::vector<TensorView> ins;
    for (Value* v : n->inputs) ins.push_back(env.at(v).view());
    auto outs = run_node(*n, ins, d);
    for (size_t k = 0; k < outs.size(); ++k) env[n->output(k)] = outs[k];
  }
  std::vector<Tensor> r;
  for (Value* v : g.outputs()) r.push_back(env.at(v));
  return r;
}

Tensor scalar(float v, std::vector<int64_t> shape = {}) {
  Tensor t(DType::f32, shape);
  t.ptr<float>()[0] = v;
  return t;
}

int count(const Graph& g, const std::string& op) {
  int c = 0;
  for (Node* n : g.nodes()) c += n->op_name() == op;
  return c;
}

// Runs the pass and checks before/after outputs agree (ref both sides, and cpu after).
void fuse_and_compare(Graph& g, const std::vector<Tensor>& inputs, bool expect_change = true) {
  auto before = evaluate(g, inputs, Device::ref);
  EXPECT_EQ(fuse_elementwise(g), expect_change);
  auto after = evaluate(g, inputs, Device::ref);
  auto after_cpu = evaluate(g, inputs, Device::cpu);
  ASSERT_EQ(before.size(), after.size());
  for (size_t k = 0; k < before.size(); ++k) {
    EXPECT_EQ(before[k].shape(), after[k].shape());
    EXPECT_TRUE(all_close(after[k], before[k], kRtol, kAtol)) << "output " << k << " (ref)";
    EXPECT_TRUE(all_close(after_cpu[k], before[k], kRtol, kAtol)) << "output " << k << " (cpu)";
  }
}

const Node* only_node(const Graph& g) {
  EXPECT_EQ(g.num_nodes(), 1u);
  return g.nodes().empty() ? nullptr : g.nodes()[0];
}

TEST(FuseElementwise, ChainWithScalarConstantBecomesOneNode) {
  Graph g;
  Value* x = g.add_input("x", {DType::f32, {Dim::sym("s0"), 33}});
  Value* y = g.add_input("y", {DType::f32, {33}});
  Value* half = g.add_constant("half", scalar(0.5f));
  Value* a = g.add_node("mul", {x, half})->output(0);
  Value* b = g.add_node("add", {a, y})->output(0);
  Value* c = g.add_node("gelu", {b}, {{"approximate", "tanh"}})->output(0);
  Value* d = g.add_node("clamp", {c}, {{"min", -1.0}, {"max", 2.0}})->output(0);
  g.set_outputs({d});
  fuse_and_compare(g, {random_tensor(DType::f32, {7, 33}, 1), random_tensor(DType::f32, {33}, 2)});
  const Node* f = only_node(g);
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->op_name(), "fused_elementwise");
  EXPECT_EQ(f->inputs.size(), 2u);  // the constant became an immediate
  EXPECT_EQ(f->attr("program").s(), "f32: mul $0 #0.5; add %0 $1; gelu_tanh %1; clamp %2 #-1 #2");
  EXPECT_EQ(g.outputs()[0]->type.str(), "f32[s0, 33]");
}

TEST(FuseElementwise, DagWithSharedInputAndMultiUseIntermediate) {
  // silu by hand plus a value used twice inside the group: (x * sigmoid(x)) -> t; t * t + t
  Graph g;
  Value* x = g.add_input("x", {DType::f32, {1000}});
  Value* s = g.add_node("sigmoid", {x})->output(0);
  Value* t = g.add_node("mul", {x, s})->output(0);
  Value* t2 = g.add_node("mul", {t, t})->output(0);
  Value* r = g.add_node("add", {t2, t})->output(0);
  g.set_outputs({r});
  fuse_and_compare(g, {random_tensor(DType::f32, {1000}, 3)});
  const Node* f = only_node(g);
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->inputs.size(), 1u);
  EXPECT_EQ(parse_ew_program(f->attr("program").s(), "t").instrs.size(), 4u);  // t computed once
}

TEST(FuseElementwise, CompareAndWhereFuseWithBoolInsideAndOut) {
  Graph g;
  Value* x = g.add_input("x", {DType::f32, {5, 9}});
  Value* m = g.add_input("m", {DType::boolean, {9}});
  Value* zero = g.add_constant("zero", scalar(0.0f));
  Value* pos = g.add_node("gt", {x, zero})->output(0);
  Value* slope = g.add_node("mul", {x, g.add_constant("k", scalar(0.1f))})->output(0);
  Value* lrelu = g.add_node("where", {pos, x, slope})->output(0);
  Value* masked = g.add_node("where", {m, lrelu, zero})->output(0);
  Value* flag = g.add_node("lt", {masked, g.add_constant("c", scalar(0.2f))})->output(0);
  g.set_outputs({flag});
  fuse_and_compare(g, {random_tensor(DType::f32, {5, 9}, 4), random_tensor(DType::boolean, {9}, 5)});
  const Node* f = only_node(g);
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->output(0)->type.dtype, DType::boolean);
  EXPECT_EQ(f->attr("program").s().substr(0, 5), "bool:");
}

// Dropout's x * f32(mask) * scale and its gradient's g * f32(mask) * scale: the bool cast joins
// the program (as where(mask, 1, 0)); one node reading x and the mask as bytes.
TEST(FuseElementwise, BoolToF32CastJoinsTheProgram) {
  Graph g;
  Value* x = g.add_input("x", {DType::f32, {7, 33}});
  Value* m = g.add_input("m", {DType::boolean, {7, 33}});
  Value* f = g.add_node("cast", {m}, {{"dtype", "f32"}})->output(0);
  Value* kept = g.add_node("mul", {x, f})->output(0);
  Value* y = g.add_node("mul", {kept, g.add_constant("scale", scalar(1.25f))})->output(0);
  g.set_outputs({y});
  fuse_and_compare(g, {random_tensor(DType::f32, {7, 33}, 9), random_tensor(DType::boolean, {7, 33}, 10)});
  const Node* fused = only_node(g);
  ASSERT_NE(fused, nullptr);
  ASSERT_EQ(fused->inputs.size(), 2u);
  EXPECT_TRUE(fused->input(0) == m || fused->input(1) == m);  // the mask itself, not a cast copy

  Graph h;  // a lone cast stays a cast; a cast to another dtype is not fused
  Value* b = h.add_input("b", {DType::boolean, {8}});
  Value* c = h.add_node("cast", {b}, {{"dtype", "f32"}})->output(0);
  h.set_outputs({c});
  fuse_and_compare(h, {random_tensor(DType::boolean, {8}, 11)}, /*expect_change=*/false);
  EXPECT_EQ(count(h, "cast"), 1);
}

TEST(FuseElementwise, GraphOutputIntermediateBecomesAnExtraResult) {
  Graph g;
  Value* x = g.add_input("x", {DType::f32, {64}});
  Value* e = g.add_node("exp", {x})->output(0);  // also a graph output: stored by the same pass
  Value* a = g.add_node("add", {e, x})->output(0);
  Value* r = g.add_node("relu", {a})->output(0);
  g.set_outputs({e, r});
  fuse_and_compare(g, {random_tensor(DType::f32, {64}, 6)});
  ASSERT_EQ(g.num_nodes(), 1u);
  const Node* f = g.nodes()[0];
  EXPECT_EQ(f->attr("program").s(), "f32: exp $0; add %0 $0; relu %1 | %0");
  EXPECT_EQ(g.outputs()[0], f->output(1));
  EXPECT_EQ(g.outputs()[1], f->output(0));
}

TEST(FuseElementwise, ValuesReadOutsideJoinOnlyWhenEveryReaderFollowsTheRoot) {
  // m2 = m * 0.9 + g (read by the update below and returned), v2 = v * 0.99 + g * g (the same),
  // p2 = p - m2 / sqrt(v2): one program with two extra results, as an optimizer step's.
  Graph g;
  Value* p = g.add_input("p", {DType::f32, {40}});
  Value* gr = g.add_input("g", {DType::f32, {40}});
  Value* m = g.add_input("m", {DType::f32, {40}});
  Value* v = g.add_input("v", {DType::f32, {40}});
  Value* m2 = g.add_node("add", {g.add_node("mul", {m, g.add_constant("b1", scalar(0.9f))})->output(0), gr})->output(0);
  Value* v2 = g.add_node("add", {g.add_node("mul", {v, g.add_constant("b2", scalar(0.99f))})->output(0),
                                 g.add_node("mul", {gr, gr})->output(0)})->output(0);
  Value* p2 = g.add_node("sub", {p, g.add_node("div", {m2, g.add_node("sqrt", {v2})->output(0)})->output(0)})->output(0);
  // A reader of m2 before the root in graph order: m2 cannot join a group rooted at q.
  Value* early = g.add_node("neg", {m2})->output(0);
  Value* q = g.add_node("add", {early, v2})->output(0);
  g.set_outputs({p2, m2, v2, q});
  std::vector<Tensor> ins;
  for (int k = 0; k < 4; ++k) ins.push_back(random_tensor(DType::f32, {40}, 20 + k));
  for (int64_t i = 0; i < 40; ++i) ins[3].ptr<float>()[i] = std::abs(ins[3].ptr<float>()[i]);  // v: a second moment
  fuse_and_compare(g, ins);
  int extra = 0;
  for (const Node* n : g.nodes())
    if (n->op_name() == "fused_elementwise") extra += static_cast<int>(n->outputs.size()) - 1;
  EXPECT_EQ(extra, 2) << print_graph(g);
}

TEST(FuseElementwise, LoneOpsAndNonFusibleBoundariesStay) {
  Graph g;
  Value* x = g.add_input("x", {DType::f32, {16}});
  Value* r = g.add_node("relu", {x})->output(0);
  Value* c = g.add_node("cast", {r}, {{"dtype", "f64"}})->output(0);
  Value* n = g.add_node("neg", {c})->output(0);  // f64: not fused
  g.set_outputs({n});
  fuse_and_compare(g, {random_tensor(DType::f32, {16}, 7)}, /*expect_change=*/false);
  EXPECT_EQ(g.num_nodes(), 3u);

  Graph h;
  Value* y = h.add_input("y", {DType::f32, {16}});
  Value* a = h.add_node("relu", {y})->output(0);
  Value* b = h.add_node("cast", {a}, {{"dtype", "f32"}})->output(0);
  Value* d = h.add_node("exp", {b})->output(0);
  Value* e = h.add_node("neg", {d})->output(0);
  h.set_outputs({e});
  fuse_and_compare(h, {random_tensor(DType::f32, {16}, 8)});
  EXPECT_EQ(h.num_nodes(), 3u);  // relu, cast, fused(exp, neg)
  EXPECT_EQ(count(h, "relu"), 1);
  EXPECT_EQ(count(h, "fused_elementwise"), 1);
}

TEST(FuseElementwise, RankRaisingConstantStaysATensorInput) {
  // x[4] + c[1,1,1] has shape [1,1,4]: c's rank matters, so it cannot become an immediate.
  Graph g;
  Value* x = g.add_input("x", {DType::f32, {4}});
  Value* c = g.add_constant("c", scalar(1.5f, {1, 1, 1}));
  Value* a = g.add_node("add", {x, c})->output(0);
  Value* r = g.add_node("relu", {a})->output(0);
  g.set_outputs({r});
  fuse_and_compare(g, {random_tensor(DType::f32, {4}, 9)});
  const Node* f = only_node(g);
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->inputs.size(), 2u);
  EXPECT_EQ(f->output(0)->type.str(), "f32[1, 1, 4]");
}

TEST(FuseElementwise, LongChainSplitsIntoBoundedGroups) {
  Graph g;
  Value* x = g.add_input("x", {DType::f32, {3, 1000}});
  Value* v = x;
  const char* ops[] = {"tanh", "sigmoid", "neg", "exp", "silu"};
  for (int i = 0; i < 40; ++i) v = g.add_node(ops[i % 5], {v})->output(0);
  g.set_outputs({v});
  fuse_and_compare(g, {random_tensor(DType::f32, {3, 1000}, 10)});
  EXPECT_EQ(g.num_nodes(), 3u);  // 16 + 16 + 8
  EXPECT_EQ(count(g, "fused_elementwise"), 3);
}

TEST(FuseElementwise, ManyInputsStayWithinTheInputLimit) {
  Graph g;
  std::vector<Tensor> ins;
  Value* acc = g.add_input("x0", {DType::f32, {50}});
  ins.push_back(random_tensor(DType::f32, {50}, 100));
  for (int k = 1; k < 12; ++k) {
    Value* xk = g.add_input("x" + std::to_string(k), {DType::f32, {50}});
    ins.push_back(random_tensor(DType::f32, {50}, 100 + k));
    acc = g.add_node("add", {acc, xk})->output(0);
  }
  g.set_outputs({acc});
  fuse_and_compare(g, ins);
  for (Node* n : g.nodes())
    if (n->op_name() == "fused_elementwise") EXPECT_LE(n->inputs.size(), 8u);
  EXPECT_LT(g.num_nodes(), 11u);
}

}  // namespace
