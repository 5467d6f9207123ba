// fold_pad_conv: a zero pad of H/W before conv2d becomes the conv's (possibly asymmetric)
// padding; the folded graph agrees with the original on the reference kernels and on the
// fast (oneDNN) kernels. Also canonicalize's removal of all-zero pads.
#include <gtest/gtest.h>

#include "pass_test_util.h"
#include "passes/canonicalize.h"
#include "passes/fold_pad_conv.h"

using namespace updraft;
using namespace updraft::testing;

TEST(PassFoldPadConv, TfSamePaddingBecomesAsymmetricConvPadding) {
  // Stride-2 "same" padding: nothing before, one after, in both H and W.
  const char* text = R"(graph(%x: f32[2, 8, 9, 10]) {
  %w = constant f32[8, 1, 3, 3] random(seed=1)
  %0 = pad(%x) {pads=[0, 1, 0, 1]}
  %1 = conv2d(%0, %w) {stride=[2, 2], groups=8}
  return (%1)
})";
  auto g = check_pass(text, fold_pad_conv, Changed::yes, {}, 1e-4, 1e-5);
  Node* conv = g->nodes().back();
  EXPECT_EQ(conv->input(0), g->inputs()[0]);
  EXPECT_EQ(conv->attr("padding").ints(), (std::vector<int64_t>{0, 0}));
  EXPECT_EQ(conv->attr("padding_end").ints(), (std::vector<int64_t>{1, 1}));
  expect_fast_matches(text, *g);
}

TEST(PassFoldPadConv, SymmetricPadAddsToExistingPadding) {
  const char* text = R"(graph(%x: f32[1, 4, 7, 7]) {
  %w = constant f32[6, 4, 5, 3] random(seed=1)
  %0 = pad(%x) {pads=[1, 1, 2, 2]}
  %1 = conv2d(%0, %w) {padding=[1, 0]}
  return (%1)
})";
  auto g = check_pass(text, fold_pad_conv, Changed::yes, {}, 1e-4, 1e-5);
  Node* conv = g->nodes().back();
  EXPECT_EQ(conv->attr("padding").ints(), (std::vector<int64_t>{3, 1}));
  EXPECT_FALSE(conv->has_attr("padding_end"));
  expect_fast_matches(text, *g);
}

TEST(PassFoldPadConv, NonZeroValueBatchPadsCropsAndHugePadsStay) {
  for (const char* pad : {"{pads=[1, 1, 1, 1], value=1.0}", "{pads=[1, 1, 1, 1, 0, 0, 1, 0]}", "{pads=[-1, 0, 1, 1]}",
                          "{pads=[3, 3, 0, 0]}"}) {
    SCOPED_TRACE(pad);
    check_pass(std::string(R"(graph(%x: f32[1, 4, 7, 7]) {
  %w = constant f32[4, 4, 3, 3] random(seed=1)
  %0 = pad(%x) )") + pad + R"(
  %1 = conv2d(%0, %w)
  return (%1)
})", fold_pad_conv, Changed::no);
  }
}

TEST(PassFoldPadConv, PadWithAnotherUserStaysForIt) {
  auto g = check_pass(R"(graph(%x: f32[1, 4, 6, 6]) {
  %w = constant f32[4, 4, 3, 3] random(seed=1)
  %0 = pad(%x) {pads=[1, 1, 1, 1]}
  %1 = conv2d(%0, %w)
  %2 = relu(%0)
  return (%1, %2)
})", fold_pad_conv, Changed::yes, {}, 1e-4, 1e-5);
  EXPECT_EQ(ops_of(*g), "pad conv2d relu");
  EXPECT_EQ(g->nodes()[1]->input(0), g->inputs()[0]);
}

TEST(PassCanonicalize, DropsAllZeroPads) {
  auto g = check_pass(R"(graph(%x: f32[1, 4, 6, 6]) {
  %0 = pad(%x) {pads=[0, 0, 0, 0]}
  %1 = relu(%0)
  return (%1)
})", canonicalize, Changed::yes);
  EXPECT_EQ(g->nodes().back()->input(0), g->inputs()[0]);
}
