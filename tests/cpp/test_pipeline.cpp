// run_pipeline: the pass list runs in order, honours CompileOptions and keeps results equal.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "kernels/kernel.h"
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
  EXPECT_EQ(names(log), (std::vector<std::string>{"verify", "canonicalize", "match_gelu", "dce", "cse", "fold_dequant_linear", "constant_fold", "canonicalize",
                                                  "fold_conv_bn", "fold_pad_conv", "fold_gqa_sdpa", "fold_permute_sdpa", "fold_transpose_matmul", "fuse_epilogue", "fuse_elementwise", "dce", "verify"}));
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

// An optimizer's lerp(m, g, w) on a constant w decomposes to where(|w| >= 0.5, ...): its
// condition is a literal only once constant_fold has run, and the second canonicalize then
// drops the where; the fused program left holds no where for every element.
TEST(Pipeline, WhereOnAFoldedConditionIsDropped) {
  auto g = parse_graph(R"(graph(%m: f32[64], %g: f32[64]) {
  %w = constant f32[] [0.1]
  %half = constant f32[] [0.5]
  %0 = abs(%w)
  %1 = ge(%0, %half)
  %2 = where(%1, %g, %m)
  %3 = sub(%g, %m)
  %4 = mul(%3, %w)
  %5 = add(%4, %2)
  return (%5)
})");
  auto inputs = random_inputs(*g, {});
  auto before = interpret(*g, inputs, Device::ref);
  run_pipeline(*g, CompileOptions{});
  ASSERT_EQ(g->num_nodes(), 1u) << print_graph(*g);
  EXPECT_EQ(g->nodes()[0]->attr("program").s().find("where"), std::string::npos) << print_graph(*g);
  auto after = interpret(*g, inputs, Device::cpu);
  expect_same_outputs(before, after, 1e-6, 1e-6);
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

// ---- bisect switches: disable_passes, fault_pass, KernelOptions::fault_op ----

namespace {

double max_abs_diff(const std::vector<Tensor>& a, const std::vector<Tensor>& b) {
  double worst = 0;
  for (size_t k = 0; k < a.size(); ++k) {
    const float* x = static_cast<const float*>(a[k].data());
    const float* y = static_cast<const float*>(b[k].data());
    for (int64_t i = 0; i < a[k].numel(); ++i) worst = std::max(worst, std::abs(double(x[i]) - double(y[i])));
  }
  return worst;
}

}  // namespace

TEST(PipelineBisect, PassNamesAreThePipelinesOwnInOrder) {
  auto g = parse_graph(kBlock);
  CompileOptions opts;
  opts.channel_block = 8;  // every optional pass runs
  opts.weight_dtype = WeightDType::int8;
  opts.activation_dtype = ActivationDType::int8;
  auto log = run_pipeline(*g, opts);
  std::vector<std::string> distinct;
  for (const PassRecord& p : log)
    if (std::find(distinct.begin(), distinct.end(), p.name) == distinct.end()) distinct.push_back(p.name);
  EXPECT_EQ(pipeline_pass_names(), distinct);
  EXPECT_TRUE(pass_is_mandatory("verify"));
  EXPECT_FALSE(pass_is_mandatory("canonicalize"));
}

TEST(PipelineBisect, DisabledPassIsSkippedAndLogged) {
  auto g = parse_graph(kBlock);
  auto inputs = random_inputs(*g, {{"s0", 2}});
  auto before = interpret(*g, inputs, Device::ref);
  CompileOptions opts;
  opts.disable_passes = {"fuse_epilogue", "dce"};
  auto log = run_pipeline(*g, opts);
  int skipped = 0;
  for (const PassRecord& p : log) {
    const bool off = p.name == "fuse_epilogue" || p.name == "dce";
    EXPECT_EQ(p.skipped, off) << p.name;
    if (off) EXPECT_FALSE(p.changed) << p.name;
    skipped += p.skipped;
  }
  EXPECT_EQ(skipped, 3);  // dce runs twice
  for (const Node* n : g->nodes()) EXPECT_FALSE(n->op_name() == "conv2d" && n->has_attr("activation") &&
                                                n->attr("activation").s() == "relu") << print_graph(*g);
  expect_same_outputs(before, interpret(*g, inputs, Device::cpu), 1e-4, 1e-4);
}

TEST(PipelineBisect, MandatoryAndUnknownPassesAreRefused) {
  for (const char* name : {"verify", "no_such_pass"}) {
    auto g = parse_graph(kBlock);
    CompileOptions opts;
    opts.disable_passes = {name};
    try {
      run_pipeline(*g, opts);
      ADD_FAILURE() << "disable_passes accepted " << name;
    } catch (const Error& e) {
      EXPECT_EQ(e.component(), "passes");
      EXPECT_NE(std::string(e.what()).find(name), std::string::npos) << e.what();
    }
  }
}

TEST(PipelineBisect, PassFaultChangesResultsOnlyWhenThePassChangesTheGraph) {
  for (const char* pass : {"fold_conv_bn", "fuse_epilogue", "constant_fold", "canonicalize"}) {
    auto g = parse_graph(kBlock);
    auto inputs = random_inputs(*g, {{"s0", 2}});
    auto before = interpret(*g, inputs, Device::ref);
    CompileOptions opts;
    opts.fault_pass = pass;
    run_pipeline(*g, opts);
    EXPECT_GT(max_abs_diff(before, interpret(*g, inputs, Device::cpu)), 0.1) << pass << "\n" << print_graph(*g);
  }
  // match_gelu finds no gelu here: it changes nothing, so its fault does nothing either.
  auto g = parse_graph(kBlock);
  auto inputs = random_inputs(*g, {{"s0", 2}});
  auto before = interpret(*g, inputs, Device::ref);
  CompileOptions opts;
  opts.fault_pass = "match_gelu";
  run_pipeline(*g, opts);
  expect_same_outputs(before, interpret(*g, inputs, Device::cpu), 1e-4, 1e-4);
}

TEST(PipelineBisect, KernelFaultAddsOneToElementZeroOfThatOpOnly) {
  auto g = parse_graph(R"(graph(%x: f32[2, 3], %y: f32[2, 3]) {
  %0 = add(%x, %y)
  %1 = mul(%x, %y)
  return (%0, %1)
})");
  auto inputs = random_inputs(*g);
  std::vector<TensorView> views = {inputs[0].view(), inputs[1].view()};
  KernelOptions faulty;
  faulty.fault_op = "add";
  for (Node* n : g->nodes()) {
    auto good = run_node(*n, views, Device::cpu, nullptr, 1, KernelOptions{});
    auto bad = run_node(*n, views, Device::cpu, nullptr, 1, faulty);
    const float* a = static_cast<const float*>(good[0].data());
    const float* b = static_cast<const float*>(bad[0].data());
    for (int i = 0; i < 6; ++i)
      EXPECT_FLOAT_EQ(b[i], a[i] + ((n->op_name() == "add" && i == 0) ? 1.0f : 0.0f)) << n->op_name() << " " << i;
  }
}
