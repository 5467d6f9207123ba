// fuse_epilogue: bias add, residual add and activation after conv2d/linear/matmul move into
// the op's epilogue, in the order act(op + bias + residual) only.
#include <gtest/gtest.h>

#include "pass_test_util.h"
#include "passes/fuse_epilogue.h"

using namespace updraft;
using namespace updraft::testing;

TEST(PassFuseEpilogue, ConvBiasRelu) {
  auto g = check_pass(R"(graph(%x: f32[2, 3, 8, 8]) {
  %w = constant f32[4, 3, 3, 3] random(seed=1)
  %b = constant f32[1, 4, 1, 1] random(seed=2)
  %0 = conv2d(%x, %w) {padding=[1, 1]}
  %1 = add(%0, %b)
  %2 = relu(%1)
  return (%2)
})", fuse_epilogue, Changed::yes);
  ASSERT_EQ(ops_of(*g), "conv2d");
  Node* conv = g->nodes()[0];
  EXPECT_TRUE(conv->attr("has_bias").b());
  EXPECT_FALSE(conv->attr("has_residual").b());
  EXPECT_EQ(conv->attr("activation").s(), "relu");
  ASSERT_EQ(conv->inputs.size(), 3u);
  EXPECT_EQ(conv->input(2)->type.str(), "f32[4]");  // bias reshaped to one dim
}

TEST(PassFuseEpilogue, LinearBiasResidualGeluTanh) {
  auto g = check_pass(R"(graph(%x: f32[s0, 5, 16], %r: f32[s0, 5, 8]) {
  %w = constant f32[8, 16] random(seed=1)
  %b = constant f32[8] random(seed=2)
  %0 = linear(%x, %w)
  %1 = add(%b, %0)                 // bias on the left is still a bias
  %2 = add(%1, %r)
  %3 = gelu(%2) {approximate="tanh"}
  return (%3)
})", fuse_epilogue, Changed::yes, {{"s0", 2}});
  ASSERT_EQ(ops_of(*g), "linear");
  Node* lin = g->nodes()[0];
  EXPECT_TRUE(lin->attr("has_bias").b());
  EXPECT_TRUE(lin->attr("has_residual").b());
  EXPECT_EQ(lin->attr("activation").s(), "gelu_tanh");
  EXPECT_EQ(lin->input(3), g->inputs()[1]);  // residual follows the bias
}

TEST(PassFuseEpilogue, ClampAndLeakyReluCarryTheirParameters) {
  auto g = check_pass(R"(graph(%a: f32[3, 4, 6], %b: f32[3, 6, 5]) {
  %0 = matmul(%a, %b)
  %1 = clamp(%0) {min=-0.5, max=0.75}
  return (%1)
})", fuse_epilogue, Changed::yes);
  ASSERT_EQ(ops_of(*g), "matmul");
  EXPECT_EQ(g->nodes()[0]->attr("activation").s(), "clamp");
  EXPECT_EQ(g->nodes()[0]->attr("act_alpha").f(), -0.5);
  EXPECT_EQ(g->nodes()[0]->attr("act_beta").f(), 0.75);

  auto g2 = check_pass(R"(graph(%x: f32[4, 16]) {
  %w = constant f32[8, 16] random(seed=1)
  %0 = linear(%x, %w)
  %1 = leaky_relu(%0) {negative_slope=0.2}
  return (%1)
})", fuse_epilogue, Changed::yes);
  EXPECT_EQ(g2->nodes()[0]->attr("activation").s(), "leaky_relu");
  EXPECT_DOUBLE_EQ(g2->nodes()[0]->attr("act_alpha").f(), 0.2);
}

TEST(PassFuseEpilogue, ResidualAfterActivationIsNotFused) {
  // relu(conv) + r is not relu(conv + r): only the relu moves into the conv.
  auto g = check_pass(R"(graph(%x: f32[1, 3, 8, 8], %r: f32[1, 4, 8, 8]) {
  %w = constant f32[4, 3, 3, 3] random(seed=1)
  %0 = conv2d(%x, %w) {padding=[1, 1]}
  %1 = relu(%0)
  %2 = add(%1, %r)
  return (%2)
})", fuse_epilogue, Changed::yes);
  ASSERT_EQ(ops_of(*g), "conv2d add");
  EXPECT_EQ(g->nodes()[0]->attr("activation").s(), "relu");
  EXPECT_FALSE(g->nodes()[0]->attr("has_residual").b());
}

TEST(PassFuseEpilogue, IntermediateWithTwoUsersStops) {
  auto g = check_pass(R"(graph(%x: f32[4, 16]) {
  %w = constant f32[8, 16] random(seed=1)
  %b = constant f32[8] random(seed=2)
  %0 = linear(%x, %w)
  %1 = add(%0, %b)
  %2 = silu(%1)
  %3 = mul(%1, %2)
  return (%3)
})", fuse_epilogue, Changed::yes);
  ASSERT_EQ(ops_of(*g), "linear silu mul");  // bias fused; %1 has two users so silu stays
  EXPECT_TRUE(g->nodes()[0]->attr("has_bias").b());
  EXPECT_EQ(g->nodes()[0]->attr("activation").s(), "none");

  check_pass(R"(graph(%x: f32[4, 16]) {
  %w = constant f32[8, 16] random(seed=1)
  %0 = linear(%x, %w)
  %1 = relu(%0)
  return (%1, %0)
})", fuse_epilogue, Changed::no);  // %0 is a graph output
}

TEST(PassFuseEpilogue, NotABias) {
  // [4] against NCHW aligns with W, not the channels; and a broadcasting residual-like add
  // would change the output shape. Neither fuses.
  check_pass(R"(graph(%x: f32[1, 3, 4, 4]) {
  %w = constant f32[4, 3, 1, 1] random(seed=1)
  %c = constant f32[4] random(seed=2)
  %0 = conv2d(%x, %w)
  %1 = add(%0, %c)
  return (%1)
})", fuse_epilogue, Changed::no);
  check_pass(R"(graph(%x: f32[4, 16], %y: f32[3, 4, 8]) {
  %w = constant f32[8, 16] random(seed=1)
  %0 = linear(%x, %w)
  %1 = add(%0, %y)
  return (%1)
})", fuse_epilogue, Changed::no);
}

TEST(PassFuseEpilogue, ResidualComputedAfterTheOpIsStillInScope) {
  // The residual is produced between the conv and the add; the fused node must come after it.
  auto g = check_pass(R"(graph(%x: f32[1, 4, 6, 6]) {
  %w = constant f32[4, 4, 3, 3] random(seed=1)
  %0 = conv2d(%x, %w) {padding=[1, 1]}
  %r = sigmoid(%x)
  %1 = add(%r, %0)
  %2 = hardswish(%1)
  return (%2)
})", fuse_epilogue, Changed::yes);
  ASSERT_EQ(ops_of(*g), "sigmoid conv2d");
  EXPECT_EQ(g->nodes()[1]->attr("activation").s(), "hardswish");
  EXPECT_TRUE(g->nodes()[1]->attr("has_residual").b());
}

TEST(PassFuseEpilogue, OneResidualOnly) {
  // The epilogue holds one residual: the second add stays a node.
  auto g = check_pass(R"(graph(%x: f32[4, 16], %r: f32[4, 8], %s: f32[4, 8]) {
  %w = constant f32[8, 16] random(seed=1)
  %0 = linear(%x, %w)
  %1 = add(%0, %r)
  %2 = add(%1, %s)
  return (%2)
})", fuse_epilogue, Changed::yes);
  ASSERT_EQ(ops_of(*g), "linear add");
  EXPECT_TRUE(g->nodes()[0]->attr("has_residual").b());
  EXPECT_EQ(fuse_epilogue(*g), false);  // a second run finds nothing more
}

TEST(PassFuseEpilogue, LooksThroughAReshapeThatKeepsTheLastDim) {
  // The front end's linear on [B*S, K] viewed back to [B, S, N], then residual and gelu.
  auto g = check_pass(R"(graph(%x: f32[s0, 16], %r: f32[2, (s0//2), 8]) {
  %w = constant f32[8, 16] random(seed=1)
  %b = constant f32[8] random(seed=2)
  %0 = linear(%x, %w, %b) {has_bias=true}
  %1 = reshape(%0) {shape=[2, (s0//2), 8]}
  %2 = add(%1, %r)
  %3 = gelu(%2)
  return (%3)
})", fuse_epilogue, Changed::yes, {{"s0", 6}});
  ASSERT_EQ(ops_of(*g), "reshape linear reshape");  // the residual viewed, the op, the result viewed
  Node* lin = g->nodes()[1];
  EXPECT_TRUE(lin->attr("has_residual").b());
  EXPECT_EQ(lin->attr("activation").s(), "gelu");
  EXPECT_EQ(lin->input(3)->type.str(), "f32[s0, 8]");
}

TEST(PassFuseEpilogue, ActivationOnlyThroughAReshape) {
  auto g = check_pass(R"(graph(%x: f32[6, 16]) {
  %w = constant f32[32, 16] random(seed=1)
  %0 = linear(%x, %w)
  %1 = reshape(%0) {shape=[2, 3, 32]}
  %2 = gelu(%1)
  return (%2)
})", fuse_epilogue, Changed::yes);
  ASSERT_EQ(ops_of(*g), "linear reshape");
  EXPECT_EQ(g->nodes()[0]->attr("activation").s(), "gelu");
}

TEST(PassFuseEpilogue, AReshapeThatMovesTheLastDimStops) {
  check_pass(R"(graph(%x: f32[6, 16]) {
  %w = constant f32[32, 16] random(seed=1)
  %0 = linear(%x, %w)
  %1 = reshape(%0) {shape=[6, 4, 8]}
  %2 = relu(%1)
  return (%2)
})", fuse_epilogue, Changed::no);
}
