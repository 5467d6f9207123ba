// canonicalize: identity ops dropped, reshape chains merged, expands absorbed by broadcasting.
#include <gtest/gtest.h>

#include "pass_test_util.h"
#include "passes/canonicalize.h"

using namespace updraft;
using namespace updraft::testing;

TEST(PassCanonicalize, DropsIdentities) {
  auto g = check_pass(R"(graph(%x: f32[s0, 4, 5]) {
  %0 = reshape(%x) {shape=[-1, 4, 5]}
  %1 = permute(%0) {dims=[0, 1, 2]}
  %2 = cast(%1) {dtype="f32"}
  %3 = expand(%2) {shape=[-1, 4, 5]}
  %4 = copy(%3)
  %5 = relu(%4)
  return (%5)
})", then_dce<canonicalize>, Changed::yes, {{"s0", 3}});
  EXPECT_EQ(ops_of(*g), "relu");
  EXPECT_EQ(g->nodes()[0]->input(0), g->inputs()[0]);
}

TEST(PassCanonicalize, MergesReshapeChains) {
  auto g = check_pass(R"(graph(%x: f32[2, 3, 4]) {
  %0 = reshape(%x) {shape=[6, 4]}
  %1 = reshape(%0) {shape=[4, -1]}
  %2 = reshape(%1) {shape=[2, 12]}
  %3 = neg(%2)
  return (%3)
})", then_dce<canonicalize>, Changed::yes);
  EXPECT_EQ(ops_of(*g), "reshape neg");
  EXPECT_EQ(g->nodes()[0]->input(0), g->inputs()[0]);
}

TEST(PassCanonicalize, AbsorbsExpandIntoBroadcastingConsumer) {
  auto g = check_pass(R"(graph(%x: f32[4, 8], %b: f32[8]) {
  %0 = expand(%b) {shape=[4, 8]}
  %1 = add(%x, %0)
  %2 = relu(%0)              // unary: the expand decides its shape, so it stays
  return (%1, %2)
})", then_dce<canonicalize>, Changed::yes);
  EXPECT_EQ(ops_of(*g), "expand add relu");
  EXPECT_EQ(g->nodes()[1]->input(1), g->inputs()[1]);
}

TEST(PassCanonicalize, KeepsNodesThatComputeGraphOutputs) {
  // Returning the input itself would make an output alias an input; keep the copy.
  auto g = check_pass(R"(graph(%x: f32[3]) {
  %0 = reshape(%x) {shape=[3]}
  %1 = copy(%x)
  return (%0, %1)
})", then_dce<canonicalize>, Changed::no);
  EXPECT_EQ(ops_of(*g), "reshape copy");
}

TEST(PassCanonicalize, RealPermuteAndReshapeStay) {
  check_pass(R"(graph(%x: f32[2, 3]) {
  %0 = permute(%x) {dims=[1, 0]}
  %1 = reshape(%0) {shape=[6]}
  %2 = neg(%1)
  return (%2)
})", then_dce<canonicalize>, Changed::no);
}

TEST(PassCanonicalize, TransposeOfATransposeCancels) {
  // A training graph's weight: transposed for the forward matmul, transposed back for the
  // backward one.
  auto g = check_pass(R"(graph(%w: f32[3, 5], %g: f32[4, 3]) {
  %0 = permute(%w) {dims=[1, 0]}
  %1 = permute(%0) {dims=[-1, -2]}
  %2 = matmul(%g, %1)
  return (%2)
})", then_dce<canonicalize>, Changed::yes);
  EXPECT_EQ(ops_of(*g), "matmul");
  EXPECT_EQ(g->nodes()[0]->input(1), g->inputs()[0]);
}

TEST(PassCanonicalize, MergesPermuteChainsIntoOne) {
  // [2,3,4,5] -(0,2,1,3)-> [2,4,3,5] -(3,0,2,1)-> [5,2,3,4]: one permute (3,0,1,2) of x.
  auto g = check_pass(R"(graph(%x: f32[2, 3, 4, 5]) {
  %0 = permute(%x) {dims=[0, 2, 1, 3]}
  %1 = permute(%0) {dims=[3, 0, 2, 1]}
  %2 = neg(%1)
  return (%2)
})", then_dce<canonicalize>, Changed::yes);
  EXPECT_EQ(ops_of(*g), "permute neg");
  EXPECT_EQ(g->nodes()[0]->input(0), g->inputs()[0]);
  EXPECT_EQ(g->nodes()[0]->attr("dims").ints(), (std::vector<int64_t>{3, 0, 1, 2}));
}

TEST(PassCanonicalize, LinearOfATransposedWeightBecomesMatmul) {
  // linear(x, w^T) = x @ w: matmul reads w as [K, N] in place, with the bias epilogue kept.
  auto g = check_pass(R"(graph(%g: f32[4, 3], %w: f32[3, 5], %b: f32[5]) {
  %0 = permute(%w) {dims=[1, 0]}
  %1 = linear(%g, %0, %b) {has_bias=true}
  return (%1)
})", then_dce<canonicalize>, Changed::yes);
  EXPECT_EQ(ops_of(*g), "matmul");
  EXPECT_EQ(g->nodes()[0]->input(1), g->inputs()[1]);
  EXPECT_TRUE(g->nodes()[0]->attr("has_bias").b());
}

TEST(PassCanonicalize, LinearOfATransposedConstantStaysForFolding) {
  check_pass(R"(graph(%g: f32[4, 3]) {
  %w = constant f32[3, 5] random(seed=1)
  %0 = permute(%w) {dims=[1, 0]}
  %1 = linear(%g, %0)
  return (%1)
})", then_dce<canonicalize>, Changed::no);
}

TEST(PassCanonicalize, DropsMultiplyByOneAndWhereOfALiteral) {
  // An optimizer step's addcdiv(value=1) and lerp on a constant weight (a 0-d literal branch).
  auto g = check_pass(R"(graph(%x: f32[8], %y: f32[8]) {
  %one = constant f32[] [1.0]
  %no = constant bool[] [0]
  %0 = mul(%x, %one)
  %1 = mul(%one, %0)
  %2 = div(%1, %one)
  %3 = where(%no, %x, %2)
  %4 = neg(%3)
  %5 = div(%one, %y)           // 1 / y is not y
  %6 = where(%no, %y, %one)    // the literal branch is 0-d: its broadcast stays
  return (%4, %5, %6)
})", then_dce<canonicalize>, Changed::yes);
  EXPECT_EQ(ops_of(*g), "neg div where");
  EXPECT_EQ(g->nodes()[0]->input(0), g->inputs()[0]);
}
