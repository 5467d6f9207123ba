// cse: one node per (op, inputs, attributes); identical small constants merge first.
#include <gtest/gtest.h>

#include "pass_test_util.h"
#include "passes/cse.h"

using namespace updraft;
using namespace updraft::testing;

TEST(PassCse, MergesRepeatsAndCascades) {
  auto g = check_pass(R"(graph(%x: f32[4, 5]) {
  %0 = relu(%x)
  %1 = relu(%x)
  %2 = exp(%0)
  %3 = exp(%1)            // equal once %1 became %0
  %4 = add(%2, %3)
  return (%4)
})", then_dce<cse>, Changed::yes);
  EXPECT_EQ(ops_of(*g), "relu exp add");
  EXPECT_EQ(g->nodes()[2]->input(0), g->nodes()[2]->input(1));
}

TEST(PassCse, AttributesMustMatchWithDefaultsResolved) {
  auto g = check_pass(R"(graph(%x: f32[4, 5]) {
  %0 = gelu(%x)
  %1 = gelu(%x) {approximate="none"}   // the default: same node
  %2 = gelu(%x) {approximate="tanh"}   // different
  %3 = sum(%x) {dims=[0]}
  %4 = sum(%x) {dims=[1]}
  %5 = add(%0, %1)
  %6 = add(%5, %2)
  return (%6, %3, %4)
})", then_dce<cse>, Changed::yes);
  EXPECT_EQ(ops_of(*g), "gelu gelu sum sum add add");
}

TEST(PassCse, IdenticalConstantsMergeSoTheirUsersDo) {
  auto g = check_pass(R"(graph(%x: f32[3]) {
  %a = constant f32[3] [1.0, 2.0, 3.0]
  %b = constant f32[3] [1.0, 2.0, 3.0]
  %c = constant f32[3] [1.0, 2.0, 4.0]
  %0 = mul(%x, %a)
  %1 = mul(%x, %b)
  %2 = mul(%x, %c)
  %3 = add(%0, %1)
  %4 = add(%3, %2)
  return (%4)
})", then_dce<cse>, Changed::yes);
  EXPECT_EQ(ops_of(*g), "mul mul add add");
}

TEST(PassCse, TwoGraphOutputsKeepTheirOwnNodes) {
  auto g = check_pass(R"(graph(%x: f32[3]) {
  %0 = relu(%x)
  %1 = relu(%x)
  return (%0, %1)
})", then_dce<cse>, Changed::no);
  EXPECT_EQ(g->num_nodes(), 2u);
}

namespace {
// %x * %a + %x * %b with %a and %b equal constants; `source_a`/`source_b` >= 0 make them the
// caller's parameters (Value::source), as the front end binds frozen weights.
std::unique_ptr<Graph> two_equal_constants(int source_a, int source_b) {
  auto g = std::make_unique<Graph>();
  Value* x = g->add_input("x", {DType::f32, {3}});
  auto ones = [] {
    Tensor t(DType::f32, {3});
    for (int i = 0; i < 3; ++i) t.ptr<float>()[i] = 1.f;
    return t;
  };
  Value* a = g->add_constant("a", ones());
  Value* b = g->add_constant("b", ones());
  a->source = source_a;
  b->source = source_b;
  Value* y = g->add_node("add", {g->add_node("mul", {x, a})->output(0), g->add_node("mul", {x, b})->output(0)})->output(0);
  g->set_outputs({y});
  return g;
}
}  // namespace

TEST(PassCse, EqualParametersAreNeverMerged) {
  // Fresh norm weights are all ones: equal today, but a cache hit binds another checkpoint
  // and either may be updated in place.
  for (auto [sa, sb] : {std::pair{0, 1}, std::pair{0, -1}, std::pair{-1, 1}}) {
    auto g = two_equal_constants(sa, sb);
    then_dce<cse>(*g);
    EXPECT_EQ(ops_of(*g), "mul mul add") << "sources " << sa << ", " << sb;
  }
  auto lit = two_equal_constants(-1, -1);  // two literals do merge
  then_dce<cse>(*lit);
  EXPECT_EQ(ops_of(*lit), "mul add");
}

TEST(PassCse, ConstantsFoldedFromAParameterAreNotLiterals) {
  // A fold over a parameter gives a constant that is the parameter's function, not a literal.
  Graph g;
  Value* p = g.add_constant("p", Tensor(DType::f32, {3}));
  p->source = 0;
  Value* lit = g.add_constant("l", Tensor(DType::f32, {3}));
  Node* n = g.add_node("neg", {p});
  Value* folded = g.add_constant("", Tensor(DType::f32, {3}));
  g.record_fold(*n, {folded});
  EXPECT_FALSE(p->is_literal());
  EXPECT_FALSE(folded->is_literal());
  Node* m = g.add_node("neg", {lit});
  Value* folded_lit = g.add_constant("", Tensor(DType::f32, {3}));
  g.record_fold(*m, {folded_lit});
  EXPECT_TRUE(folded_lit->is_literal());
}
