// Provenance (Node::origin, Value::origin): the front-end nodes each engine node computes survive
// the pass pipeline, so the debug tools (updraft/debug/) can map engine values back to aten nodes.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "ir/text.h"
#include "passes/options.h"
#include "passes/pipeline.h"

using namespace updraft;

namespace {

// Parses `text` and stamps every node as lowered from "a<i>" (i: its position), with its
// output holding that node's result, as the Python lowering does.
std::unique_ptr<Graph> stamped(const std::string& text) {
  auto g = parse_graph(text);
  int i = 0;
  for (Node* n : g->nodes()) {
    const std::string name = "a" + std::to_string(i++);
    n->origin = {name};
    for (Value* v : n->outputs) v->origin = name;
  }
  return g;
}

const Node* only_node_with_op(const Graph& g, const std::string& op) {
  const Node* found = nullptr;
  for (const Node* n : g.nodes())
    if (n->op_name() == op) {
      EXPECT_EQ(found, nullptr) << "two " << op << " nodes";
      found = n;
    }
  EXPECT_NE(found, nullptr) << "no " << op << " node";
  return found;
}

}  // namespace

TEST(Provenance, EpilogueFusionKeepsEveryOriginAndTheLastValue) {
  auto g = stamped(R"(graph(%x: f32[4, 16]) {
  %w = constant f32[8, 16] random(seed=1)
  %b = constant f32[8] random(seed=2)
  %0 = linear(%x, %w)
  %1 = add(%0, %b)
  %2 = gelu(%1)
  return (%2)
})");
  run_pipeline(*g, CompileOptions{});
  const Node* lin = only_node_with_op(*g, "linear");
  EXPECT_EQ(lin->origin, (std::vector<std::string>{"a0", "a1", "a2"}));
  EXPECT_EQ(lin->output()->origin, "a2");  // it now holds the gelu's result
}

TEST(Provenance, ElementwiseFusionNamesTheWholeChainInGraphOrder) {
  auto g = stamped(R"(graph(%x: f32[4, 16], %y: f32[4, 16]) {
  %0 = add(%x, %y)
  %1 = exp(%0)
  %2 = mul(%1, %x)
  return (%2)
})");
  run_pipeline(*g, CompileOptions{});
  const Node* f = only_node_with_op(*g, "fused_elementwise");
  EXPECT_EQ(f->origin, (std::vector<std::string>{"a0", "a1", "a2"}));
  EXPECT_EQ(f->output()->origin, "a2");
}

TEST(Provenance, ConvBatchNormFoldNamesBoth) {
  auto g = stamped(R"(graph(%x: f32[1, 3, 8, 8]) {
  %w = constant f32[4, 3, 3, 3] random(seed=1)
  %m = constant f32[4] random(seed=2)
  %v = constant f32[4] full(1.0)
  %0 = conv2d(%x, %w) {padding=[1, 1]}
  %1 = batch_norm(%0, %m, %v) {eps=0.00001, has_bias=false, has_weight=false}
  return (%1)
})");
  CompileOptions opts;
  opts.channel_block = 0;
  run_pipeline(*g, opts);
  const Node* conv = only_node_with_op(*g, "conv2d");
  EXPECT_EQ(conv->origin, (std::vector<std::string>{"a0", "a1"}));
  EXPECT_EQ(conv->output()->origin, "a1");
}

TEST(Provenance, PrintedAsCommentsThatParseBack) {
  auto g = stamped(R"(graph(%x: f32[4, 16]) {
  %0 = relu(%x)
  %1 = neg(%0)
  return (%0, %1)
})");
  PrintOptions opts;
  opts.origins = true;
  const std::string text = print_graph(*g, opts);
  EXPECT_NE(text.find("relu(%x) : f32[4, 16]  // from: a0"), std::string::npos) << text;
  auto back = parse_graph(text);
  EXPECT_EQ(print_graph(*back), print_graph(*g));
  const std::vector<std::string> lines = print_node_lines(*g, opts);
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[1], "%1 = neg(%0) : f32[4, 16]  // from: a1");
  EXPECT_EQ(print_graph(*g).find("// from"), std::string::npos);  // off by default
}

TEST(Provenance, CseKeepsBothNames) {
  auto g = stamped(R"(graph(%x: f32[4, 16]) {
  %0 = tanh(%x)
  %1 = tanh(%x)
  %2 = add(%0, %1)
  return (%2)
})");
  CompileOptions opts;
  opts.fuse = false;
  run_pipeline(*g, opts);
  const Node* t = only_node_with_op(*g, "tanh");
  EXPECT_EQ(t->origin, (std::vector<std::string>{"a0", "a1"}));
}

TEST(Provenance, ChannelBlockedResultsNameTheirPlainCopy) {
  auto g = stamped(R"(graph(%x: f32[1, 16, 8, 8]) {
  %w1 = constant f32[16, 16, 3, 3] random(seed=1)
  %w2 = constant f32[16, 16, 3, 3] random(seed=2)
  %0 = conv2d(%x, %w1) {padding=[1, 1]}
  %1 = conv2d(%0, %w2) {padding=[1, 1]}
  %2 = neg(%1)
  return (%2, %0)
})");
  CompileOptions opts;
  opts.channel_block = 8;
  opts.fuse = false;
  run_pipeline(*g, opts);
  int blocked = 0;
  for (const Node* n : g->nodes()) {
    if (n->op_name() == "conv2d" && n->attr("dst_block").i() != 0) {
      ++blocked;
      EXPECT_EQ(n->output()->origin, "");  // nChw8c bytes are not the aten tensor
    }
    if (n->op_name() == "channel_block" && n->attr("to_block").i() == 0)
      EXPECT_TRUE(n->output()->origin == "a0" || n->output()->origin == "a1") << n->output()->origin;
  }
  EXPECT_EQ(blocked, 2);
}
