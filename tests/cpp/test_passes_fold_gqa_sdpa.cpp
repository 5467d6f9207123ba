// fold_gqa_sdpa: sdpa over k/v repeated for grouped-query attention reads the grouped k/v
// instead (decode: the R heads of a group as R query rows; otherwise k/v broadcast over R), with
// the same outputs on the reference kernels (check_pass) and on the fast kernels.
#include <gtest/gtest.h>

#include "pass_test_util.h"
#include "passes/fold_gqa_sdpa.h"

using namespace updraft;
using namespace updraft::testing;

namespace {

// transformers' repeat_kv of %k and %v ([B, G, S, E] -> [B, G * R, S, E]) before sdpa; `q`,
// `k`: input shapes, `mask`: an input declaration or "", `attrs`: sdpa's.
std::string gqa_graph(const std::string& q, const std::string& k, const std::string& k5, const std::string& rep5,
                      const std::string& rep4, const std::string& mask, const std::string& attrs) {
  std::string in = "%q: f32" + q + ", %k: f32" + k + ", %v: f32" + k + (mask.empty() ? "" : ", %m: " + mask);
  return "graph(" + in + ") {\n" +
         "  %k5 = reshape(%k) {shape=" + k5 + "}\n  %ke = expand(%k5) {shape=" + rep5 + "}\n" +
         "  %kr = reshape(%ke) {shape=" + rep4 + "}\n" +
         "  %v5 = reshape(%v) {shape=" + k5 + "}\n  %ve = expand(%v5) {shape=" + rep5 + "}\n" +
         "  %vr = reshape(%ve) {shape=" + rep4 + "}\n" +
         "  %a = sdpa(%q, %kr, %vr" + (mask.empty() ? "" : ", %m") + ") " + attrs + "\n  return (%a)\n}";
}

// The (first) sdpa node of g.
const Node* the_sdpa(const Graph& g) {
  for (const Node* n : g.nodes())
    if (n->op_name() == "sdpa") return n;
  return nullptr;
}

// Folds `text` and checks the mask the folded sdpa reads has `shape`, and the fast kernels agree.
void expect_mask_viewed(const std::string& text, const char* shape) {
  auto g = check_pass(text, then_dce<fold_gqa_sdpa>, Changed::yes, {}, 1e-5, 1e-6);
  EXPECT_EQ(shape_str(the_sdpa(*g)->input(3)->type.shape), shape);
  expect_fast_matches(text, *g, {}, 1e-4, 1e-5);
}

}  // namespace

TEST(PassFoldGqaSdpa, DecodeStepTakesTheGroupsHeadsAsRows) {
  // 8 query heads over 2 key/value heads, one query row, a float mask shared by the heads.
  const std::string text = gqa_graph("[2, 8, 1, 16]", "[2, 2, 11, 16]", "[2, 2, 1, 11, 16]", "[2, 2, 4, 11, 16]",
                                     "[2, 8, 11, 16]", "f32[2, 1, 1, 11]", "{has_mask=true}");
  auto g = check_pass(text, then_dce<fold_gqa_sdpa>, Changed::yes, {}, 1e-5, 1e-6);
  EXPECT_EQ(ops_of(*g), "reshape reshape reshape sdpa reshape");  // no expand left
  const Node* s = the_sdpa(*g);
  EXPECT_EQ(shape_str(s->input(0)->type.shape), "[2, 2, 4, 16]");
  EXPECT_EQ(shape_str(s->input(1)->type.shape), "[2, 2, 11, 16]");
  EXPECT_EQ(s->input(3), g->inputs()[3]);  // the mask as it is: it broadcasts over groups and rows
  expect_fast_matches(text, *g, {}, 1e-4, 1e-5);
}

TEST(PassFoldGqaSdpa, PerHeadMaskIsViewedByGroup) {
  expect_mask_viewed(gqa_graph("[1, 4, 1, 8]", "[1, 2, 5, 8]", "[1, 2, 1, 5, 8]", "[1, 2, 2, 5, 8]", "[1, 4, 5, 8]",
                               "bool[1, 4, 1, 5]", "{has_mask=true}"),
                     "[1, 2, 2, 5]");
}

TEST(PassFoldGqaSdpa, PrefillBroadcastsKeyValueOverTheRepeat) {
  for (const char* attrs : {"{is_causal=true}", "{scale=0.3}"}) {
    SCOPED_TRACE(attrs);
    const std::string text = gqa_graph("[1, 6, 7, 8]", "[1, 2, 9, 8]", "[1, 2, 1, 9, 8]", "[1, 2, 3, 9, 8]",
                                       "[1, 6, 9, 8]", "", attrs);
    auto g = check_pass(text, then_dce<fold_gqa_sdpa>, Changed::yes, {}, 1e-5, 1e-6);
    const Node* s = the_sdpa(*g);
    EXPECT_EQ(shape_str(s->input(0)->type.shape), "[1, 2, 3, 7, 8]");
    EXPECT_EQ(shape_str(s->input(1)->type.shape), "[1, 2, 1, 9, 8]");
    EXPECT_EQ(s->input(1)->producer->input(0), g->inputs()[1]);  // a view of k itself
    expect_fast_matches(text, *g, {}, 1e-4, 1e-5);
  }
  // A causal decode step (is_causal with one row: only key 0) stays unfolded into rows.
  const std::string one_row = gqa_graph("[1, 4, 1, 8]", "[1, 2, 3, 8]", "[1, 2, 1, 3, 8]", "[1, 2, 2, 3, 8]",
                                        "[1, 4, 3, 8]", "", "{is_causal=true}");
  auto g = check_pass(one_row, then_dce<fold_gqa_sdpa>, Changed::yes, {}, 1e-5, 1e-6);
  EXPECT_EQ(shape_str(the_sdpa(*g)->input(0)->type.shape), "[1, 2, 2, 1, 8]");
}

TEST(PassFoldGqaSdpa, LogSumExpIsReshapedBackToTheHeads) {
  // A training forward's sdpa with its log-sum-exp [B, H, L]: the folded node's [B, G, R, L]
  // (prefill) or [B, G, R] (one row) is viewed back; the values match on both kernel sets.
  for (const char* rows : {"7", "1"}) {
    SCOPED_TRACE(std::string("L = ") + rows);
    std::string text = gqa_graph(std::string("[1, 6, ") + rows + ", 8]", "[1, 2, 9, 8]", "[1, 2, 1, 9, 8]",
                                 "[1, 2, 3, 9, 8]", "[1, 6, 9, 8]", "", "{with_lse=true}");
    const std::string ret = "  return (%a)";
    text.replace(text.find(ret), ret.size(), "  return (%a, %lse)");
    text.replace(text.find("%a = sdpa"), 9, "%a, %lse = sdpa");
    auto g = check_pass(text, then_dce<fold_gqa_sdpa>, Changed::yes, {}, 1e-5, 1e-6);
    EXPECT_EQ(shape_str(g->outputs()[1]->type.shape), std::string("[1, 6, ") + rows + "]");
    EXPECT_EQ(g->outputs()[1]->producer->input(0), the_sdpa(*g)->output(1));
    expect_fast_matches(text, *g, {}, 1e-4, 1e-5);
  }
}

TEST(PassFoldGqaSdpa, PrefillMaskSharedByHeadsGainsADim) {
  expect_mask_viewed(gqa_graph("[2, 4, 3, 8]", "[2, 1, 6, 8]", "[2, 1, 1, 6, 8]", "[2, 1, 4, 6, 8]", "[2, 4, 6, 8]",
                               "f32[2, 1, 3, 6]", "{has_mask=true}"),
                     "[2, 1, 1, 3, 6]");
}

TEST(PassFoldGqaSdpa, SymbolicCacheLength) {
  // The dynamic cache's decode graph: S is a symbol.
  const std::string text = gqa_graph("[1, 4, 1, 8]", "[1, 2, s0, 8]", "[1, 2, 1, s0, 8]", "[1, 2, 2, s0, 8]",
                                     "[1, 4, s0, 8]", "f32[1, 1, 1, s0]", "{has_mask=true}");
  auto g = check_pass(text, then_dce<fold_gqa_sdpa>, Changed::yes, {{"s0", 13}}, 1e-5, 1e-6);
  EXPECT_EQ(shape_str(the_sdpa(*g)->input(1)->type.shape), "[1, 2, s0, 8]");
  expect_fast_matches(text, *g, {{"s0", 13}}, 1e-4, 1e-5);
}

TEST(PassFoldGqaSdpa, KeyAndValueLengthsNamedApart) {
  // Dynamo may give the k and v caches' lengths different symbols; the reshapes to the repeated
  // heads say they are one size (a batched decode step of a dynamic cache).
  const char* text = R"(graph(%q: f32[2, 4, 1, 8], %k: f32[2, 2, s0, 8], %v: f32[2, 2, s1, 8], %m: f32[2, 1, 1, s0]) {
  %k5 = reshape(%k) {shape=[2, 2, 1, s0, 8]}
  %ke = expand(%k5) {shape=[2, 2, 2, -1, 8]}
  %kr = reshape(%ke) {shape=[2, 4, s0, 8]}
  %v5 = reshape(%v) {shape=[2, 2, 1, s1, 8]}
  %ve = expand(%v5) {shape=[2, 2, 2, -1, 8]}
  %vr = reshape(%ve) {shape=[2, 4, s0, 8]}
  %a = sdpa(%q, %kr, %vr, %m) {has_mask=true}
  return (%a)
})";
  auto g = check_pass(text, then_dce<fold_gqa_sdpa>, Changed::yes, {{"s0", 6}, {"s1", 6}}, 1e-5, 1e-6);
  EXPECT_EQ(shape_str(the_sdpa(*g)->input(2)->type.shape), "[2, 2, s0, 8]");
  expect_fast_matches(text, *g, {{"s0", 6}, {"s1", 6}}, 1e-4, 1e-5);
}

TEST(PassFoldGqaSdpa, OtherRepeatsStay) {
  // v repeated by another factor than k; a repeat of the batch dim.
  check_pass(R"(graph(%q: f32[1, 4, 1, 8], %k: f32[1, 2, 3, 8], %v: f32[1, 1, 3, 8]) {
  %k5 = reshape(%k) {shape=[1, 2, 1, 3, 8]}
  %ke = expand(%k5) {shape=[1, 2, 2, 3, 8]}
  %kr = reshape(%ke) {shape=[1, 4, 3, 8]}
  %v5 = reshape(%v) {shape=[1, 1, 1, 3, 8]}
  %ve = expand(%v5) {shape=[1, 1, 4, 3, 8]}
  %vr = reshape(%ve) {shape=[1, 4, 3, 8]}
  %a = sdpa(%q, %kr, %vr)
  return (%a)
})", fold_gqa_sdpa, Changed::no);
  check_pass(gqa_graph("[2, 2, 1, 8]", "[1, 2, 3, 8]", "[1, 1, 2, 3, 8]", "[1, 2, 2, 3, 8]", "[2, 2, 3, 8]", "", ""),
             fold_gqa_sdpa, Changed::no);
}
