// debug_outputs: every node output of a compiled graph, captured by the normal plan and kernels,
// equals what the reference interpreter computes for that node; blocked values come out plain;
// the compiled graph's own outputs are bit-identical to a normal run.
#include <gtest/gtest.h>

#include "core/error.h"
#include "ir/text.h"
#include "kernels/channel_block.h"
#include "pass_test_util.h"
#include "runtime/debug_outputs.h"
#include "runtime/interpreter.h"
#include "test_util.h"

using namespace updraft;
using namespace updraft::testing;

namespace {

// matmul + bias + gelu (an epilogue fusion), then elementwise ops the elementwise fusion
// merges, a reduction and a view, with two outputs; a symbolic batch.
const char* kMlp = R"(graph(%x: f32[s0, 16]) {
  %w = constant f32[16, 24] random(seed=1)
  %b = constant f32[24] random(seed=2)
  %s = constant f32[24] random(seed=3)
  %0 = matmul(%x, %w)
  %1 = add(%0, %b)
  %2 = gelu(%1)
  %3 = mul(%2, %s)
  %4 = tanh(%3)
  %5 = sub(%4, %2)
  %6 = sum(%5) {dims=[1]}
  %7 = reshape(%5) {shape=[-1]}
  return (%6, %7)
})";

// Convolutions the engine keeps channel-blocked (block 8), a residual, then a plain consumer.
const char* kConvs = R"(graph(%x: f32[2, 3, 10, 10]) {
  %w0 = constant f32[16, 3, 3, 3] random(seed=1)
  %w1 = constant f32[16, 16, 3, 3] random(seed=2)
  %b1 = constant f32[16] random(seed=3)
  %0 = conv2d(%x, %w0) {padding=[1, 1], activation="relu"}
  %1 = conv2d(%0, %w1, %b1, %0) {padding=[1, 1], has_bias=true, has_residual=true}
  %2 = mean(%1) {dims=[2, 3]}
  return (%2)
})";

struct Capture {
  std::vector<Tensor> outs;  // the debug executable's outputs
  DebugOutputs d;
};

Capture capture(const Executable& cg, const std::vector<Tensor>& inputs) {
  Capture c;
  c.d = debug_outputs(cg);
  std::vector<std::vector<int64_t>> shapes;
  std::vector<TensorView> in;
  for (const Tensor& t : inputs) {
    shapes.push_back(t.shape());
    in.push_back(t.view());
  }
  std::vector<std::vector<int64_t>> out_shapes = c.d.exe->prepare(shapes);
  std::vector<DType> dts = c.d.exe->output_dtypes();
  std::vector<TensorView> out;
  for (size_t k = 0; k < out_shapes.size(); ++k) c.outs.emplace_back(dts[k], out_shapes[k]);
  for (Tensor& t : c.outs) out.push_back(t.view());
  c.d.exe->run(in, out);
  return c;
}

std::vector<Tensor> run(Executable& cg, const std::vector<Tensor>& inputs) {
  std::vector<std::vector<int64_t>> shapes;
  std::vector<TensorView> in;
  for (const Tensor& t : inputs) {
    shapes.push_back(t.shape());
    in.push_back(t.view());
  }
  std::vector<std::vector<int64_t>> out_shapes = cg.prepare(shapes);
  std::vector<DType> dts = cg.output_dtypes();
  std::vector<Tensor> outs;
  std::vector<TensorView> out;
  for (size_t k = 0; k < out_shapes.size(); ++k) outs.emplace_back(dts[k], out_shapes[k]);
  for (Tensor& t : outs) out.push_back(t.view());
  cg.run(in, out);
  return outs;
}

// Every node output of the compiled graph by the reference interpreter, in node order, in the
// layout the node writes (blocked ones blocked).
std::vector<Tensor> reference_node_outputs(const Graph& compiled, const std::vector<Tensor>& inputs) {
  auto g = copy_graph(compiled);
  std::vector<Value*> all;
  for (Node* n : g->nodes())
    for (Value* v : n->outputs) all.push_back(v);
  g->set_outputs(all);
  return interpret(*g, inputs, Device::ref);
}

// The graph compiled with conv activations in nChw{block}c (the IR says so on any CPU; a
// block the CPU has no kernels for runs through reorders inside the conv kernel).
auto compile_blocked(const char* text, int block = 8) {
  CompileOptions opts;
  opts.channel_block = block;
  return Executable::compile(parse_graph(text), opts);
}

Tensor unblocked(const Tensor& t, int64_t block) {
  if (block == 0) return t;
  Tensor plain(t.dtype(), t.shape());
  channel_block_copy(t.data(), plain.data(), dtype_size(t.dtype()), t.shape().data(), block, 0);
  return plain;
}

// `text` compiled in layout `layout` (block_conv_layout) and captured on `in`: the one captured
// reshape to `type` (the pass's view of a value it keeps in a layout) says it is stored in
// `block`, and holds the plain graph's node `node` result.
void expect_view_captured_plain(const char* text, int layout, const std::vector<Tensor>& in, size_t node,
                                const std::string& type, int64_t block, double rtol) {
  auto cg = compile_blocked(text, layout);
  const Graph& g = cg->graph();
  Capture c = capture(*cg, in);
  auto plain = parse_graph(text);
  plain->set_outputs({plain->nodes()[node]->output(0)});
  const Tensor want = interpret(*plain, in, Device::ref)[0];
  std::vector<Node*> nodes = g.nodes();
  int found = 0;
  for (size_t k = 0; k < c.d.captured.size(); ++k) {
    const CapturedOutput& cap = c.d.captured[k];
    const Node* n = nodes.at(cap.node);
    if (n->op_name() != "reshape" || n->output(0)->type.str() != type) continue;
    ++found;
    EXPECT_EQ(cap.block, block);
    EXPECT_TRUE(all_close(c.outs[1 + k].view(), want.view(), rtol, 1e-5));
  }
  EXPECT_EQ(found, 1) << print_graph(g);
}

}  // namespace

TEST(DebugOutputs, EveryNodeOutputOfAFusedGraphMatchesTheInterpreter) {
  auto cg = Executable::compile(parse_graph(kMlp), CompileOptions{});
  const Graph& g = cg->graph();
  // The passes fused: fewer nodes than the 8 written, so captures are of fused nodes.
  ASSERT_LT(g.num_nodes(), 8u) << print_graph(g);
  Tensor x = random_tensor(DType::f32, {5, 16}, 7);
  Capture c = capture(*cg, {x});
  size_t n_values = 0;
  for (const Node* n : g.nodes()) n_values += n->outputs.size();
  ASSERT_EQ(c.d.num_outputs, 2u);
  ASSERT_EQ(c.d.captured.size(), n_values);
  ASSERT_EQ(c.outs.size(), 2 + n_values);

  // The compiled graph's own outputs: bit-identical to a normal call (same plan kinds, same kernels).
  std::vector<Tensor> normal = run(*cg, {x});
  EXPECT_TRUE(same_bits(c.outs[0], normal[0]));
  EXPECT_TRUE(same_bits(c.outs[1], normal[1]));

  // Each capture against the reference kernels' value for the same node.
  std::vector<Tensor> ref = reference_node_outputs(g, {x});
  std::vector<Node*> nodes = g.nodes();
  for (size_t k = 0; k < c.d.captured.size(); ++k) {
    const CapturedOutput& cap = c.d.captured[k];
    const Node* n = nodes.at(cap.node);
    EXPECT_EQ(n->outputs.at(cap.output)->id, cap.value);
    EXPECT_EQ(cap.block, 0);
    const Tensor& got = c.outs[2 + k];
    EXPECT_EQ(got.shape(), ref[k].shape()) << n->op_name();
    EXPECT_TRUE(all_close(got.view(), ref[k].view(), 1e-4, 1e-5)) << "node " << cap.node << " " << n->op_name();
  }
  // The last capture is the reshape, whose value the graph's second output is.
  EXPECT_TRUE(same_bits(c.outs.back(), normal[1]));

  // And the fused graph's outputs against the unoptimised graph on the reference kernels.
  auto plain = parse_graph(kMlp);
  std::vector<Tensor> want = interpret(*plain, {x}, Device::ref);
  EXPECT_TRUE(all_close(c.outs[0].view(), want[0].view(), 1e-4, 1e-4));
  EXPECT_TRUE(all_close(c.outs[1].view(), want[1].view(), 1e-4, 1e-4));
}

TEST(DebugOutputs, BlockedConvOutputsAreCapturedPlain) {
  auto cg = compile_blocked(kConvs);
  const Graph& g = cg->graph();
  Tensor x = random_tensor(DType::f32, {2, 3, 10, 10}, 3);
  Capture c = capture(*cg, {x});
  std::vector<Tensor> ref = reference_node_outputs(g, {x});
  std::vector<Node*> nodes = g.nodes();
  int blocked = 0;
  for (size_t k = 0; k < c.d.captured.size(); ++k) {
    const CapturedOutput& cap = c.d.captured[k];
    blocked += cap.block != 0;
    Tensor want = unblocked(ref[k], cap.block);
    EXPECT_TRUE(all_close(c.outs[1 + k].view(), want.view(), 1e-4, 1e-4))
        << "node " << cap.node << " " << nodes.at(cap.node)->op_name() << " block " << cap.block;
  }
  EXPECT_GE(blocked, 2) << print_graph(g);  // both convs write nChw8c
  // The first conv's capture is plain NCHW: its relu'd values equal the plain graph's conv.
  auto plain = parse_graph(kConvs);
  auto pg = copy_graph(*plain);
  pg->set_outputs({pg->nodes()[0]->output(0)});
  std::vector<Tensor> conv0 = interpret(*pg, {x}, Device::ref);
  for (size_t k = 0; k < c.d.captured.size(); ++k)
    if (nodes[c.d.captured[k].node]->op_name() == "conv2d") {
      EXPECT_TRUE(all_close(c.outs[1 + k].view(), conv0[0].view(), 1e-4, 1e-4));
      break;
    }
}

// An elementwise op between blocked convs runs on the blocked bytes (block_conv_layout's 5-d
// views); the reshape back to [N, C, H, W] holds blocked bytes and is captured plain.
TEST(DebugOutputs, ElementwiseOnBlockedValuesIsCapturedPlain) {
  const char* text = R"(graph(%x: f32[2, 16, 6, 6]) {
  %w0 = constant f32[16, 16, 3, 3] random(seed=1)
  %w1 = constant f32[16, 16, 3, 3] random(seed=2)
  %0 = conv2d(%x, %w0) {padding=[1, 1]}
  %1 = mul(%0, %0)
  %2 = conv2d(%1, %w1) {padding=[1, 1]}
  return (%2)
})";
  expect_view_captured_plain(text, 8, {random_tensor(DType::f32, {2, 16, 6, 6}, 4)}, 1, "f32[2, 16, 6, 6]", 8, 1e-5);
}

// ConvNeXt's permute back to NCHW, kept channels-last as a view of the layer norm's
// [N, H, W, C] bytes (block_conv_layout): captured as the plain permute result.
TEST(DebugOutputs, PermuteKeptChannelsLastIsCapturedPlain) {
  const char* text = R"(graph(%x: f32[1, 24, 5, 6], %g: f32[24], %b: f32[24]) {
  %w0 = constant f32[24, 1, 7, 7] random(seed=1)
  %w1 = constant f32[24, 24, 1, 1] random(seed=2)
  %0 = conv2d(%x, %w0) {padding=[3, 3], groups=24}
  %1 = permute(%0) {dims=[0, 2, 3, 1]}
  %2 = layer_norm(%1, %g, %b) {normalized_ndim=1, has_weight=true, has_bias=true}
  %3 = permute(%2) {dims=[0, 3, 1, 2]}
  %4 = conv2d(%3, %w1)
  return (%4)
})";
  const std::vector<Tensor> in = {random_tensor(DType::f32, {1, 24, 5, 6}, 4), random_tensor(DType::f32, {24}, 5),
                                  random_tensor(DType::f32, {24}, 6)};
  expect_view_captured_plain(text, kChannelsLast, in, 3, "f32[1, 24, 5, 6]", 24, 1e-5);
}

// A squeeze-excite gate as MobileNetV3 has it at 480 channels: the per-channel vector comes from
// an 8-blocked conv (its input has 24 channels), the activation it scales from a 16-blocked one.
// The gate's result is 16-blocked, whatever block its vector's conv wrote.
TEST(DebugOutputs, GateOverMixedBlocksIsCapturedInItsOwnBlock) {
  const char* text = R"(graph(%x: f32[1, 32, 6, 6]) {
  %w0 = constant f32[32, 32, 3, 3] random(seed=1)
  %w1 = constant f32[24, 32, 1, 1] random(seed=2)
  %w2 = constant f32[32, 24, 1, 1] random(seed=3)
  %w3 = constant f32[32, 32, 3, 3] random(seed=4)
  %0 = conv2d(%x, %w0) {padding=[1, 1]}
  %1 = mean(%0) {dims=[2, 3], keepdim=true}
  %2 = conv2d(%1, %w1)
  %3 = conv2d(%2, %w2)
  %4 = mul(%3, %0)
  %5 = conv2d(%4, %w3) {padding=[1, 1]}
  return (%5)
})";
  expect_view_captured_plain(text, 16, {random_tensor(DType::f32, {1, 32, 6, 6}, 5)}, 4, "f32[1, 32, 6, 6]", 16, 1e-4);
}

TEST(DebugOutputs, CopyGraphSharesConstantsAndPrintsTheSame) {
  auto g = parse_graph(kMlp);
  int k = 0;
  for (Node* n : g->nodes()) {  // as the lowering stamps them: one front-end node per node
    std::string name = "a" + std::to_string(k++);
    n->origin = {name};
    for (Value* v : n->outputs) v->origin = name;
  }
  auto cg = Executable::compile(std::move(g), CompileOptions{});
  auto copy = copy_graph(cg->graph());
  EXPECT_EQ(print_graph(*copy), print_graph(cg->graph()));
  std::vector<Value*> a = cg->graph().constants(), b = copy->constants();
  ASSERT_EQ(a.size(), b.size());
  ASSERT_FALSE(a.empty());
  for (size_t k = 0; k < a.size(); ++k) EXPECT_EQ(a[k]->constant->data(), b[k]->constant->data());
  // Provenance (a comment in the text) is carried over by position.
  PrintOptions with_origins;
  with_origins.origins = true;
  EXPECT_EQ(print_graph(*copy, with_origins), print_graph(cg->graph(), with_origins));
  EXPECT_NE(print_graph(*copy, with_origins).find("// from: a0, a1"), std::string::npos);  // a fused node's
}
