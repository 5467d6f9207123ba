// constant_fold: all-constant nodes become constants, within a size bound.
#include <gtest/gtest.h>

#include "pass_test_util.h"
#include "passes/constant_fold.h"

using namespace updraft;
using namespace updraft::testing;

TEST(PassConstantFold, FoldsAChainInOnePass) {
  auto g = check_pass(R"(graph(%x: f32[2, 3]) {
  %a = constant f32[2, 3] [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]
  %b = constant f32[3] [0.5, 0.25, 2.0]
  %0 = mul(%a, %b)
  %1 = reshape(%0) {shape=[3, 2]}
  %2 = permute(%1) {dims=[1, 0]}
  %3 = add(%x, %2)
  return (%3)
})", constant_fold, Changed::yes);
  ASSERT_EQ(ops_of(*g), "add");
  const Value* c = g->nodes()[0]->input(1);
  ASSERT_TRUE(c->is_constant());
  EXPECT_EQ(c->type.str(), "f32[2, 3]");
  // mul -> [0.5, 0.5, 6, 2, 1.25, 12]; viewed [3, 2] and transposed.
  const float want[] = {0.5f, 6.f, 1.25f, 0.5f, 2.f, 12.f};
  for (int i = 0; i < 6; ++i) EXPECT_EQ(c->constant->ptr<float>()[i], want[i]) << i;
}

TEST(PassConstantFold, MultiOutputAndIntegerNodes) {
  auto g = check_pass(R"(graph(%x: i64[2]) {
  %a = constant i64[4] [1, 2, 3, 4]
  %p, %q = split(%a) {dim=0, sizes=[2, 2]}
  %0 = add(%p, %q)
  %1 = mul(%x, %0)
  return (%1)
})", constant_fold, Changed::yes);
  ASSERT_EQ(ops_of(*g), "mul");
  const Tensor& c = *g->nodes()[0]->input(1)->constant;
  EXPECT_EQ(c.ptr<int64_t>()[0], 4);
  EXPECT_EQ(c.ptr<int64_t>()[1], 6);
}

TEST(PassConstantFold, BigBroadcastStaysANode) {
  // expanding 8 values to 64K would grow the model 8000x: keep the expand.
  auto g = check_pass(R"(graph(%x: f32[8192, 8]) {
  %a = constant f32[8] random(seed=1)
  %0 = expand(%a) {shape=[8192, 8]}
  %1 = add(%x, %0)
  return (%1)
})", constant_fold, Changed::no);
  EXPECT_EQ(ops_of(*g), "expand add");
  // A tiny one folds.
  auto g2 = check_pass(R"(graph(%x: f32[4, 8]) {
  %a = constant f32[8] random(seed=1)
  %0 = expand(%a) {shape=[4, 8]}
  %1 = add(%x, %0)
  return (%1)
})", constant_fold, Changed::yes);
  EXPECT_EQ(ops_of(*g2), "add");
}

TEST(PassConstantFold, GraphOutputsAndNonConstantNodesStay) {
  auto g = check_pass(R"(graph(%x: f32[3]) {
  %a = constant f32[3] [1.0, 2.0, 3.0]
  %0 = neg(%a)
  %1 = add(%x, %a)
  return (%0, %1)
})", constant_fold, Changed::no);
  EXPECT_EQ(ops_of(*g), "neg add");
}
