// fold_permute_sdpa: the transposes that split heads out of q, k, v ([B, S, H, E] ->
// [B, H, S, E]) and merge the result back become sdpa's seq_first, with the same outputs on the
// reference kernels (check_pass: the reference reads the swapped views) and on the fast kernels.
#include <gtest/gtest.h>

#include "core/error.h"
#include "pass_test_util.h"
#include "passes/fold_permute_sdpa.h"

using namespace updraft;
using namespace updraft::testing;

namespace {

// q, k, v inputs [B, S, H, E] transposed to heads-first, sdpa, the result transposed back and
// merged to [B, L, H * Ev] (a BERT or ViT attention); `mask`: an input declaration or "".
std::string attention(const std::string& q, const std::string& kv, const std::string& merged, const std::string& mask,
                      const std::string& attrs, const std::string& dtype = "f32") {
  std::string in = "%q: " + dtype + q + ", %k: " + dtype + kv + ", %v: " + dtype + kv + (mask.empty() ? "" : ", %m: " + mask);
  return "graph(" + in + ") {\n" +
         "  %qt = permute(%q) {dims=[0, 2, 1, 3]}\n  %kt = permute(%k) {dims=[0, 2, 1, 3]}\n" +
         "  %vt = permute(%v) {dims=[0, 2, 1, 3]}\n" +
         "  %a = sdpa(%qt, %kt, %vt" + (mask.empty() ? "" : ", %m") + ") " + attrs + "\n" +
         "  %at = permute(%a) {dims=[0, 2, 1, 3]}\n  %y = reshape(%at) {shape=" + merged + "}\n  return (%y)\n}";
}

const Node* the_sdpa(const Graph& g) {
  for (const Node* n : g.nodes())
    if (n->op_name() == "sdpa") return n;
  return nullptr;
}

}  // namespace

TEST(PassFoldPermuteSdpa, HeadTransposesBecomeStridedViews) {
  for (const char* attrs : {"", "{is_causal=true}", "{scale=0.3}"}) {
    SCOPED_TRACE(attrs);
    const std::string text = attention("[2, 7, 3, 16]", "[2, 9, 3, 16]", "[2, 7, 48]", "", attrs);
    auto g = check_pass(text, then_dce<fold_permute_sdpa>, Changed::yes, {}, 1e-5, 1e-6);
    EXPECT_EQ(ops_of(*g), "sdpa reshape");  // no permute left
    const Node* s = the_sdpa(*g);
    EXPECT_EQ(s->attr("seq_first").ints(), (std::vector<int64_t>{0, 1, 2, 3}));
    EXPECT_EQ(s->input(0), g->inputs()[0]);
    EXPECT_EQ(shape_str(s->output()->type.shape), "[2, 7, 3, 16]");
    expect_fast_matches(text, *g, {}, 1e-4, 1e-5);
  }
  // A float mask over the scores [B, H, L, S] stays as it is; Ev differs from E.
  const std::string masked = attention("[1, 5, 2, 8]", "[1, 6, 2, 8]", "[1, 5, 16]", "f32[1, 2, 5, 6]", "{has_mask=true}");
  auto g = check_pass(masked, then_dce<fold_permute_sdpa>, Changed::yes, {}, 1e-5, 1e-6);
  EXPECT_EQ(the_sdpa(*g)->input(3), g->inputs()[3]);
  expect_fast_matches(masked, *g, {}, 1e-4, 1e-5);
}

TEST(PassFoldPermuteSdpa, ResultReadAsItIsKeepsItsLayout) {
  // The result is also returned heads-first: only the inputs fold; the back-transpose stays.
  const std::string text = R"(graph(%q: f32[2, 4, 2, 8], %k: f32[2, 4, 2, 8], %v: f32[2, 4, 2, 8]) {
  %qt = permute(%q) {dims=[0, 2, 1, 3]}
  %kt = permute(%k) {dims=[0, 2, 1, 3]}
  %vt = permute(%v) {dims=[0, 2, 1, 3]}
  %a = sdpa(%qt, %kt, %vt)
  %at = permute(%a) {dims=[0, 2, 1, 3]}
  return (%at, %a)
})";
  auto g = check_pass(text, then_dce<fold_permute_sdpa>, Changed::yes, {}, 1e-5, 1e-6);
  EXPECT_EQ(ops_of(*g), "sdpa permute");
  EXPECT_EQ(the_sdpa(*g)->attr("seq_first").ints(), (std::vector<int64_t>{0, 1, 2}));
  expect_fast_matches(text, *g, {}, 1e-4, 1e-5);
}

TEST(PassFoldPermuteSdpa, LogSumExpFollowsTheFoldedNode) {
  // A training forward: the log-sum-exp is returned beside the result; the inputs fold and the
  // log-sum-exp's reader moves to the folded sdpa.
  const std::string text = R"(graph(%q: f32[2, 5, 3, 8], %k: f32[2, 6, 3, 8], %v: f32[2, 6, 3, 8]) {
  %qt = permute(%q) {dims=[0, 2, 1, 3]}
  %kt = permute(%k) {dims=[0, 2, 1, 3]}
  %vt = permute(%v) {dims=[0, 2, 1, 3]}
  %a, %lse = sdpa(%qt, %kt, %vt) {with_lse=true}
  %at = permute(%a) {dims=[0, 2, 1, 3]}
  %y = reshape(%at) {shape=[2, 5, 24]}
  return (%y, %lse)
})";
  auto g = check_pass(text, then_dce<fold_permute_sdpa>, Changed::yes, {}, 1e-5, 1e-6);
  EXPECT_EQ(ops_of(*g), "sdpa reshape");
  EXPECT_EQ(g->outputs()[1], the_sdpa(*g)->output(1));
  expect_fast_matches(text, *g, {}, 1e-4, 1e-5);
}

TEST(PassFoldPermuteSdpa, SymbolicSequenceLengths) {
  // A prompt of any length: s0 queries over s1 keys.
  const std::string text = attention("[1, s0, 4, 8]", "[1, s1, 4, 8]", "[1, s0, 32]", "", "");
  auto g = check_pass(text, then_dce<fold_permute_sdpa>, Changed::yes, {{"s0", 5}, {"s1", 11}}, 1e-5, 1e-6);
  EXPECT_EQ(ops_of(*g), "sdpa reshape");
  expect_fast_matches(text, *g, {{"s0", 5}, {"s1", 11}}, 1e-4, 1e-5);
}

TEST(PassFoldPermuteSdpa, LeavesOtherPermutesAndDtypes) {
  // Moving E (dims [0, 2, 3, 1]) is not a head split; f64 attention keeps its dense operands.
  check_pass(R"(graph(%q: f32[1, 2, 4, 4], %k: f32[1, 2, 4, 4], %v: f32[1, 2, 4, 4]) {
  %qt = permute(%q) {dims=[0, 1, 3, 2]}
  %a = sdpa(%qt, %k, %v)
  return (%a)
})",
             fold_permute_sdpa, Changed::no);
  check_pass(attention("[1, 3, 2, 4]", "[1, 3, 2, 4]", "[1, 3, 8]", "", "", "f64"), fold_permute_sdpa, Changed::no);
}

TEST(PassFoldPermuteSdpa, SeqFirstNeedsAHeadsDim) {
  Graph g;
  Value* q = g.add_input("q", {DType::f32, {5, 16}});
  Value* k = g.add_input("k", {DType::f32, {7, 16}});
  EXPECT_THROW(g.add_node("sdpa", {q, k, k}, {{"seq_first", Attr(std::vector<int64_t>{0})}}), Error);
  Value* q3 = g.add_input("q3", {DType::f32, {5, 2, 16}});
  EXPECT_THROW(g.add_node("sdpa", {q3, k, k}, {{"seq_first", Attr(std::vector<int64_t>{4})}}), Error);
  EXPECT_THROW(g.add_node("sdpa", {q3, k, k}, {{"seq_first", Attr(std::vector<int64_t>{0, 0})}}), Error);
}
