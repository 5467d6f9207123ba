// fold_dequant_linear: linear over an i8 constant widened and scaled per row (or a bf16 constant
// widened) becomes linear_wq over the compact constant; the rewritten graph agrees with the
// original on the reference kernels and on the fast ones, and keeps no f32 copy of the weight
// through the pipeline. The patterns it must leave alone stay.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>

#include "pass_test_util.h"
#include "passes/fold_dequant_linear.h"
#include "passes/pipeline.h"

using namespace updraft;
using namespace updraft::testing;

namespace {

// A linear over q (i8 [6, 40]) times a scale `scale_decl` (the line declaring %s) read as `s_use`.
std::string int8_graph(const std::string& scale_decl, const std::string& s_use, const std::string& x = "f32[3, 40]") {
  return "graph(%x: " + x + R"() {
  %q = constant i8[6, 40] random(seed=3, lo=-127, hi=128)
  %b = constant f32[6] random(seed=4)
  )" + scale_decl + R"(
  %0 = cast(%q) {dtype="f32"}
  %1 = mul(%0, )" + s_use + R"()
  %2 = linear(%x, %1, %b) {has_bias=true}
  return (%2)
})";
}

// bits[...] of `n` random bf16 values (bf16 constants take their bits in the text IR).
std::string bf16_bits(int n, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::string s = "bits[";
  for (int i = 0; i < n; ++i) {
    float v = u(rng);
    uint32_t b;
    std::memcpy(&b, &v, 4);
    char buf[16];
    std::snprintf(buf, sizeof buf, "0x%04x", b >> 16);
    s += (i ? ", " : "") + std::string(buf);
  }
  return s + "]";
}

Node* only_linear_wq(Graph& g) {
  Node* found = nullptr;
  for (Node* n : g.nodes())
    if (n->op_name() == "linear_wq") {
      EXPECT_EQ(found, nullptr) << "more than one linear_wq";
      found = n;
    }
  return found;
}

}  // namespace

TEST(PassFoldDequantLinear, PerRowScaleBecomesLinearWq) {
  const std::string text = int8_graph("%s = constant f32[6, 1] random(seed=5, lo=0.001, hi=0.02)", "%s");
  auto g = check_pass(text, fold_dequant_linear, Changed::yes, {}, 1e-5, 1e-6);
  Node* q = only_linear_wq(*g);
  ASSERT_NE(q, nullptr);
  EXPECT_EQ(q->input(1)->type.dtype, DType::i8);
  EXPECT_TRUE(q->attr("has_weight_scale").b());
  EXPECT_TRUE(q->attr("has_bias").b());
  EXPECT_EQ(q->input(2)->type.str(), "f32[6]");
  EXPECT_EQ(ops_of(*g), "reshape linear_wq");  // the cast and mul are gone (the pass drops them: no dce here)
  expect_fast_matches(text, *g, {}, 1e-5, 1e-6);
}

TEST(PassFoldDequantLinear, ScaleAsAReshapedVectorOrOneValue) {
  for (auto [decl, use] : std::vector<std::pair<std::string, std::string>>{
           {"%v = constant f32[6] random(seed=5, lo=0.001, hi=0.02)\n  %s = reshape(%v) {shape=[6, 1]}", "%s"},
           {"%s = constant f32[] [0.0125]", "%s"},
           {"%s = constant f32[1, 1] [0.0125]", "%s"}}) {
    SCOPED_TRACE(decl);
    const std::string text = int8_graph(decl, use);
    auto g = check_pass(text, then_dce<fold_dequant_linear>, Changed::yes, {}, 1e-5, 1e-6);
    ASSERT_NE(only_linear_wq(*g), nullptr);
    expect_fast_matches(text, *g, {}, 1e-5, 1e-6);
  }
}

TEST(PassFoldDequantLinear, ScaleOnEitherSideOfTheMul) {
  std::string text = int8_graph("%s = constant f32[6, 1] random(seed=5, lo=0.001, hi=0.02)", "%s");
  text.replace(text.find("mul(%0, %s)"), std::strlen("mul(%0, %s)"), "mul(%s, %0)");
  auto g = check_pass(text, then_dce<fold_dequant_linear>, Changed::yes, {}, 1e-5, 1e-6);
  ASSERT_NE(only_linear_wq(*g), nullptr);
}

TEST(PassFoldDequantLinear, Bf16WeightWidened) {
  const std::string text = R"(graph(%x: f32[s0, 16]) {
  %w = constant bf16[5, 16] )" + bf16_bits(80, 7) + R"(
  %0 = cast(%w) {dtype="f32"}
  %1 = linear(%x, %0)
  return (%1)
})";
  auto g = check_pass(text, fold_dequant_linear, Changed::yes, {{"s0", 4}}, 1e-5, 1e-6);
  Node* q = only_linear_wq(*g);
  ASSERT_NE(q, nullptr);
  EXPECT_EQ(q->input(1)->type.dtype, DType::bf16);
  EXPECT_EQ(ops_of(*g), "linear_wq");  // the cast is gone before constant_fold could widen it for nobody
  EXPECT_FALSE(q->attr("has_weight_scale").b());
  expect_fast_matches(text, *g, {{"s0", 4}}, 1e-5, 1e-6);
}

// A scale per column (per input channel) is not what linear_wq applies; neither is a scale that
// is computed at run time, nor an x of another dtype. Each keeps its linear.
TEST(PassFoldDequantLinear, OtherScalesAndInputsStay) {
  for (auto [decl, use] : std::vector<std::pair<std::string, std::string>>{
           {"%s = constant f32[1, 40] random(seed=5, lo=0.001, hi=0.02)", "%s"},
           {"%s = constant f32[40] random(seed=5, lo=0.001, hi=0.02)", "%s"},
           {"%s = constant f32[6, 40] random(seed=5, lo=0.001, hi=0.02)", "%s"},
           {"%t = constant f32[6, 1] random(seed=5)\n  %s = exp(%t)", "%s"}}) {
    SCOPED_TRACE(decl);
    check_pass(int8_graph(decl, use), fold_dequant_linear, Changed::no);
  }
  const char* scale_from_input = R"(graph(%x: f32[3, 40], %s: f32[6, 1]) {
  %q = constant i8[6, 40] random(seed=3, lo=-127, hi=128)
  %0 = cast(%q) {dtype="f32"}
  %1 = mul(%0, %s)
  %2 = linear(%x, %1)
  return (%2)
})";
  check_pass(scale_from_input, fold_dequant_linear, Changed::no);
  const char* f64 = R"(graph(%x: f64[3, 40]) {
  %q = constant i8[6, 40] random(seed=3, lo=-127, hi=128)
  %0 = cast(%q) {dtype="f64"}
  %1 = linear(%x, %0)
  return (%1)
})";
  check_pass(f64, fold_dequant_linear, Changed::no);
}

// The dequantised weight also read by another node: that node keeps it (constant_fold makes
// its copy), the linear reads the compact form.
TEST(PassFoldDequantLinear, WidenedWeightWithAnotherUserStaysForIt) {
  const char* text = R"(graph(%x: f32[3, 40]) {
  %q = constant i8[6, 40] random(seed=3, lo=-127, hi=128)
  %s = constant f32[6, 1] random(seed=5, lo=0.001, hi=0.02)
  %0 = cast(%q) {dtype="f32"}
  %1 = mul(%0, %s)
  %2 = linear(%x, %1)
  %3 = sum(%1) {dims=[1]}
  return (%2, %3)
})";
  auto g = check_pass(text, then_dce<fold_dequant_linear>, Changed::yes, {}, 1e-5, 1e-5);
  EXPECT_EQ(ops_of(*g), "cast mul reshape linear_wq sum");
}

// Through the whole pipeline: the weight stays i8 (constant_fold does not widen it), the bias and
// a following activation are linear_wq's epilogue, and no f32 [6, 40] constant is left.
TEST(PassFoldDequantLinear, PipelineKeepsTheCompactWeightAndFusesTheEpilogue) {
  std::string text = int8_graph("%s = constant f32[6, 1] random(seed=5, lo=0.001, hi=0.02)", "%s");
  text.replace(text.find("  return (%2)"), std::strlen("  return (%2)"), "  %3 = relu(%2)\n  return (%3)");
  auto original = parse_graph(text);
  auto g = parse_graph(text);
  run_pipeline(*g, CompileOptions{});
  Node* q = only_linear_wq(*g);
  ASSERT_NE(q, nullptr);
  EXPECT_EQ(q->attr("activation").s(), "relu");
  EXPECT_EQ(ops_of(*g), "linear_wq");
  for (size_t id = 0; id < g->num_values(); ++id) {
    const Value* v = g->value(static_cast<int>(id));
    if (v->is_constant() && g->use_count(v) > 0)
      EXPECT_FALSE(v->type.dtype == DType::f32 && v->rank() == 2) << "an f32 copy of the weight: " << v->type.str();
  }
  auto inputs = random_inputs(*original);
  expect_same_outputs(interpret(*original, inputs, Device::ref), interpret(*g, inputs, Device::cpu), 1e-5, 1e-6);
}
