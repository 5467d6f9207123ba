// fold_transpose_matmul: a permute swapping a float32 matmul operand's last two dims becomes the
// matmul's transpose_a / transpose_b, with the same outputs on the reference kernels
// (check_pass) and on the fast kernels (oneDNN reading the operand with swapped strides).
#include <gtest/gtest.h>

#include "core/error.h"
#include "pass_test_util.h"
#include "passes/fold_transpose_matmul.h"

using namespace updraft;
using namespace updraft::testing;

namespace {

const Node* the_matmul(const Graph& g) {
  for (const Node* n : g.nodes())
    if (n->op_name() == "matmul") return n;
  return nullptr;
}

std::unique_ptr<Graph> folds(const std::string& text, bool ta, bool tb) {
  auto g = check_pass(text, then_dce<fold_transpose_matmul>, Changed::yes, {}, 1e-5, 1e-5);
  const Node* m = the_matmul(*g);
  EXPECT_EQ(m->attr("transpose_a").b(), ta);
  EXPECT_EQ(m->attr("transpose_b").b(), tb);
  EXPECT_EQ(ops_of(*g).find("permute"), std::string::npos) << ops_of(*g);
  expect_fast_matches(text, *g);
  return g;
}

}  // namespace

TEST(PassFoldTransposeMatmul, WeightGradientReadsTheActivationTransposed) {
  // dW = dy^T x, as a linear layer's backward writes it (2-d, T tokens).
  folds(R"(graph(%dy: f32[37, 24], %x: f32[37, 50]) {
  %t = permute(%dy) {dims=[1, 0]}
  %w = matmul(%t, %x)
  return (%w)
})",
        true, false);
}

TEST(PassFoldTransposeMatmul, BatchedAttentionOperandsBothSides) {
  // q @ k^T with negative dims, and (p^T @ dq) with both operands transposed, 4-d batch dims.
  folds(R"(graph(%q: f32[2, 3, 7, 8], %k: f32[2, 3, 9, 8]) {
  %kt = permute(%k) {dims=[0, 1, -1, -2]}
  %s = matmul(%q, %kt)
  return (%s)
})",
        false, true);
  folds(R"(graph(%a: f32[2, 3, 8, 7], %b: f32[2, 3, 5, 8]) {
  %at = permute(%a) {dims=[0, 1, 3, 2]}
  %bt = permute(%b) {dims=[0, 1, 3, 2]}
  %s = matmul(%at, %bt)
  return (%s)
})",
        true, true);
}

TEST(PassFoldTransposeMatmul, BroadcastBatchAndEpilogueKept) {
  // a 2-d transposed b broadcast over a's batch, with a bias in the epilogue.
  folds(R"(graph(%x: f32[4, 6, 10], %w: f32[12, 10], %b: f32[12]) {
  %wt = permute(%w) {dims=[1, 0]}
  %y = matmul(%x, %wt, %b) {has_bias=true}
  return (%y)
})",
        false, true);
}

TEST(PassFoldTransposeMatmul, PermuteWithAnotherUserStays) {
  auto g = check_pass(R"(graph(%a: f32[5, 6], %b: f32[5, 4]) {
  %t = permute(%a) {dims=[1, 0]}
  %m = matmul(%t, %b)
  %n = neg(%t)
  return (%m, %n)
})",
                      then_dce<fold_transpose_matmul>, Changed::yes);
  EXPECT_TRUE(the_matmul(*g)->attr("transpose_a").b());
  EXPECT_EQ(the_matmul(*g)->input(0), g->inputs()[0]);
  EXPECT_NE(ops_of(*g).find("permute"), std::string::npos);  // neg still reads it
}

TEST(PassFoldTransposeMatmul, LeavesOtherPermutesAndDtypes) {
  // a permute that moves a batch dim, and an f64 matmul (its kernel reads dense operands).
  check_pass(R"(graph(%a: f32[2, 3, 4], %b: f32[3, 4, 5]) {
  %t = permute(%a) {dims=[1, 0, 2]}
  %m = matmul(%t, %b)
  return (%m)
})",
             then_dce<fold_transpose_matmul>, Changed::no);
  check_pass(R"(graph(%a: f64[4, 3], %b: f64[4, 5]) {
  %t = permute(%a) {dims=[1, 0]}
  %m = matmul(%t, %b)
  return (%m)
})",
             then_dce<fold_transpose_matmul>, Changed::no);
}

// The shape function reads K from the transposed operand and names a rank-1 one.
TEST(PassFoldTransposeMatmul, ShapeFunctionChecksTheTransposedK) {
  Graph g;
  Value* a = g.add_input("a", {DType::f32, {Dim(4), Dim(3)}});
  Value* b = g.add_input("b", {DType::f32, {Dim(4), Dim(5)}});
  EXPECT_THROW(g.add_node("matmul", {a, b}), Error);  // K 3 vs 4
  Node* ok = g.add_node("matmul", {a, b}, {{"transpose_a", true}});
  EXPECT_EQ(shape_str(ok->output(0)->type.shape), "[3, 5]");
  Value* v = g.add_input("v", {DType::f32, {Dim(4)}});
  EXPECT_THROW(g.add_node("matmul", {v, b}, {{"transpose_a", true}}), Error);  // rank 1
}
