// cse: one node per (op, inputs, attributes); identical small constants merge first.
#include <gtest/gtest.h>

#include "pass_test_util.h"
#include "passes/cse.h"
#include "passes/dce.h"

using namespace updraft;
using namespace updraft::testing;

namespace {
bool cse_then_dce(Graph& g) {
  bool changed = cse(g);
  dce(g);
  return changed;
}
}  // namespace

TEST(PassCse, MergesRepeatsAndCascades) {
  auto g = check_pass(R"(graph(%x: f32[4, 5]) {
  %0 = relu(%x)
  %1 = relu(%x)
  %2 = exp(%0)
  %3 = exp(%1)            // equal once %1 became %0
  %4 = add(%2, %3)
  return (%4)
})", cse_then_dce, Changed::yes);
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
})", cse_then_dce, Changed::yes);
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
})", cse_then_dce, Changed::yes);
  EXPECT_EQ(ops_of(*g), "mul mul add add");
}

TEST(PassCse, TwoGraphOutputsKeepTheirOwnNodes) {
  auto g = check_pass(R"(graph(%x: f32[3]) {
  %0 = relu(%x)
  %1 = relu(%x)
  return (%0, %1)
})", cse_then_dce, Changed::no);
  EXPECT_EQ(g->num_nodes(), 2u);
}
