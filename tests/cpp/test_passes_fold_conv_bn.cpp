// fold_conv_bn: batch_norm after conv2d becomes new conv weights and bias.
#include <gtest/gtest.h>

#include "pass_test_util.h"
#include "passes/fold_conv_bn.h"

using namespace updraft;
using namespace updraft::testing;

namespace {
// var in [0.5, 2) keeps the normalisation well conditioned, so f32 results agree tightly.
const char* kBnParams = R"(
  %mean = constant f32[4] random(seed=3)
  %var = constant f32[4] random(seed=4, lo=0.5, hi=2.0)
  %gamma = constant f32[4] random(seed=5)
  %beta = constant f32[4] random(seed=6))";
}  // namespace

TEST(PassFoldConvBn, ConvWithoutBiasGetsOne) {
  auto g = check_pass(std::string(R"(graph(%x: f32[2, 3, 8, 8]) {
  %w = constant f32[4, 3, 3, 3] random(seed=1))") + kBnParams + R"(
  %0 = conv2d(%x, %w) {padding=[1, 1]}
  %1 = batch_norm(%0, %mean, %var, %gamma, %beta) {eps=0.001}
  return (%1)
})", fold_conv_bn, Changed::yes, {}, 1e-4, 1e-5);
  ASSERT_EQ(ops_of(*g), "conv2d");
  Node* conv = g->nodes()[0];
  EXPECT_TRUE(conv->attr("has_bias").b());
  EXPECT_EQ(conv->attr("padding").ints(), (std::vector<int64_t>{1, 1}));
  // The weights stay the parameter; the batch norm's scale is a third input, applied by the
  // conv kernel when it prepacks them.
  EXPECT_TRUE(conv->attr("has_weight_scale").b());
  ASSERT_EQ(conv->inputs.size(), 4u);
  EXPECT_EQ(conv->input(1)->name, "w");
  EXPECT_EQ(conv->input(2)->type.str(), "f32[4]");
  EXPECT_TRUE(conv->input(2)->is_constant());
  EXPECT_TRUE(conv->input(3)->is_constant());
}

TEST(PassFoldConvBn, TwoBatchNormsMultiplyTheScale) {
  auto g = check_pass(std::string(R"(graph(%x: f32[2, 3, 8, 8]) {
  %w = constant f32[4, 3, 3, 3] random(seed=1))") + kBnParams + R"(
  %var2 = constant f32[4] random(seed=7, lo=0.5, hi=2.0)
  %0 = conv2d(%x, %w) {padding=[1, 1]}
  %1 = batch_norm(%0, %mean, %var, %gamma, %beta) {eps=0.001}
  %2 = batch_norm(%1, %beta, %var2, %mean, %gamma)
  return (%2)
})", fold_conv_bn, Changed::yes, {}, 1e-4, 1e-5);
  ASSERT_EQ(ops_of(*g), "conv2d");
  EXPECT_EQ(g->nodes()[0]->inputs.size(), 4u);
}

TEST(PassFoldConvBn, ExistingBiasAndSymbolicBatchAndNoAffine) {
  auto g = check_pass(R"(graph(%x: f32[s0, 3, 6, 6]) {
  %w = constant f32[4, 3, 3, 3] random(seed=1)
  %b = constant f32[4] random(seed=2)
  %mean = constant f32[4] random(seed=3)
  %var = constant f32[4] random(seed=4, lo=0.5, hi=2.0)
  %0 = conv2d(%x, %w, %b) {has_bias=true, stride=[2, 2]}
  %1 = batch_norm(%0, %mean, %var) {has_weight=false, has_bias=false}
  return (%1)
})", fold_conv_bn, Changed::yes, {{"s0", 3}}, 1e-4, 1e-5);
  EXPECT_EQ(ops_of(*g), "conv2d");
}

TEST(PassFoldConvBn, ConvOutputWithAnotherUserIsKept) {
  auto g = check_pass(std::string(R"(graph(%x: f32[1, 3, 8, 8]) {
  %w = constant f32[4, 3, 3, 3] random(seed=1))") + kBnParams + R"(
  %0 = conv2d(%x, %w)
  %1 = batch_norm(%0, %mean, %var, %gamma, %beta)
  %2 = add(%0, %1)
  return (%2)
})", fold_conv_bn, Changed::no);
  EXPECT_EQ(ops_of(*g), "conv2d batch_norm add");
}

TEST(PassFoldConvBn, NonConstantWeightOrStatsAreKept) {
  check_pass(std::string(R"(graph(%x: f32[1, 3, 8, 8], %w: f32[4, 3, 3, 3]) {)") + kBnParams + R"(
  %0 = conv2d(%x, %w)
  %1 = batch_norm(%0, %mean, %var, %gamma, %beta)
  return (%1)
})", fold_conv_bn, Changed::no);
  check_pass(R"(graph(%x: f32[1, 3, 8, 8], %mean: f32[4]) {
  %w = constant f32[4, 3, 3, 3] random(seed=1)
  %var = constant f32[4] full(1.0)
  %0 = conv2d(%x, %w)
  %1 = batch_norm(%0, %mean, %var) {has_weight=false, has_bias=false}
  return (%1)
})", fold_conv_bn, Changed::no);
}

TEST(PassFoldConvBn, ConvWithActivationIsKept) {
  // batch_norm(relu(conv)) is not a conv with new weights.
  check_pass(std::string(R"(graph(%x: f32[1, 3, 8, 8]) {
  %w = constant f32[4, 3, 3, 3] random(seed=1))") + kBnParams + R"(
  %0 = conv2d(%x, %w) {activation="relu"}
  %1 = batch_norm(%0, %mean, %var, %gamma, %beta)
  return (%1)
})", fold_conv_bn, Changed::no);
}
