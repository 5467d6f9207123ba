// run_pipeline: the pass list runs in order, honours CompileOptions and keeps results equal.
#include <gtest/gtest.h>

#include "core/error.h"
#include "pass_test_util.h"
#include "passes/pipeline.h"

using namespace updraft;
using namespace updraft::testing;

namespace {

// A small conv block: conv -> bn -> relu, a residual add, then a constant subgraph that folds
// (scale = 2 * c) and a redundant identity reshape.
const char* kBlock = R"(graph(%x: f32[s0, 4, 6, 6]) {
  %w = constant f32[4, 4, 3, 3] random(seed=1)
  %mean = constant f32[4] random(seed=3)
  %var = constant f32[4] random(seed=4, lo=0.5, hi=2.0)
  %gamma = constant f32[4] random(seed=5)
  %beta = constant f32[4] random(seed=6)
  %c = constant f32[1, 4, 1, 1] random(seed=7)
  %two = constant f32[] [2.0]
  %r = reshape(%x) {shape=[-1, 4, 6, 6]}
  %0 = conv2d(%r, %w) {padding=[1, 1]}
  %1 = batch_norm(%0, %mean, %var, %gamma, %beta)
  %2 = add(%1, %x)
  %3 = relu(%2)
  %scale = mul(%c, %two)
  %4 = mul(%3, %scale)
  return (%4)
})";

std::vector<std::string> names(const std::vector<PassRecord>& rs) {
  std::vector<std::string> r;
  for (const PassRecord& p : rs) r.push_back(p.name);
  return r;
}

}  // namespace

TEST(Pipeline, FullPipelineFusesAndKeepsResults) {
  auto g = parse_graph(kBlock);
  auto inputs = random_inputs(*g, {{"s0", 2}});
  auto before = interpret(*g, inputs, Device::ref);
  auto log = run_pipeline(*g, CompileOptions{});
  EXPECT_EQ(names(log), (std::vector<std::string>{"verify", "canonicalize", "match_gelu", "dce", "cse", "constant_fold", "fold_conv_bn",
                                                  "fold_pad_conv", "fuse_epilogue", "fuse_elementwise", "dce", "verify"}));
  // conv + bn + residual + relu became one conv; the constant scale folded; reshape went.
  ASSERT_GE(g->num_nodes(), 2u) << print_graph(*g);
  Node* conv = g->nodes()[0];
  EXPECT_EQ(conv->op_name(), "conv2d") << print_graph(*g);
  EXPECT_TRUE(conv->attr("has_bias").b());
  EXPECT_TRUE(conv->attr("has_residual").b());
  EXPECT_EQ(conv->attr("activation").s(), "relu");
  EXPECT_EQ(conv->input(0), g->inputs()[0]);
  EXPECT_EQ(g->num_nodes(), 2u) << print_graph(*g);  // the conv and the scale (mul or fused)
  for (const Node* n : g->nodes())
    for (const Value* v : n->inputs) EXPECT_TRUE(v->is_constant() || v->is_input || v->producer) << print_graph(*g);
  auto after = interpret(*g, inputs, Device::cpu);
  expect_same_outputs(before, after, 1e-4, 1e-4);
  for (const PassRecord& p : log) EXPECT_TRUE(p.ir_after.empty());
}

TEST(Pipeline, OptionsSkipPasses) {
  auto g = parse_graph(kBlock);
  CompileOptions opts;
  opts.fold_constants = false;
  opts.fuse = false;
  auto log = run_pipeline(*g, opts);
  EXPECT_EQ(names(log), (std::vector<std::string>{"verify", "canonicalize", "dce", "cse", "dce", "verify"}));
  EXPECT_EQ(ops_of(*g), "conv2d batch_norm add relu mul mul");
}

TEST(Pipeline, DebugTwoRecordsIrAfterEachPass) {
  auto g = parse_graph(kBlock);
  CompileOptions opts;
  opts.debug = 2;
  auto log = run_pipeline(*g, opts);
  ASSERT_FALSE(log.empty());
  for (const PassRecord& p : log) {
    EXPECT_EQ(p.ir_after.rfind("graph(", 0), 0u) << p.name;
    EXPECT_GE(p.ms, 0.0);
  }
  EXPECT_TRUE(log[1].changed);  // canonicalize dropped the reshape
  EXPECT_EQ(log.back().ir_after, print_graph(*g));
}

TEST(Pipeline, BrokenGraphIsRejectedUpFront) {
  auto g = parse_graph(kBlock);
  g->nodes()[2]->output()->type.dtype = DType::f64;  // the batch_norm's output
  try {
    run_pipeline(*g, CompileOptions{});
    ADD_FAILURE() << "pipeline accepted a mistyped graph";
  } catch (const Error& e) {
    EXPECT_EQ(e.component(), "verify");
  }
}
