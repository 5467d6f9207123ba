// Channel-blocked conv layouts: the block_conv_layout pass on text IR (outputs before and after
// agree on the reference kernels, and the blocked graph on the fast kernels agrees with the
// plain graph on the reference), the conv kernel with blocked src/dst/residual against the
// reference, and the channel_block reorder kernel.
#include <gtest/gtest.h>

#include <cstring>

#include "kernel_test_util.h"
#include "kernels/channel_block.h"
#include "kernels/kernel.h"
#include "pass_test_util.h"
#include "passes/block_conv_layout.h"
#include "runtime/executable.h"

using namespace updraft;
using namespace updraft::testing;

namespace {

bool block16(Graph& g) { return block_conv_layout(g, 16); }
bool block8(Graph& g) { return block_conv_layout(g, 8); }
bool channels_last(Graph& g) { return block_conv_layout(g, kChannelsLast); }

// The rewritten graph on the fast kernels against the original (plain) one on the reference.
void expect_fast_matches_plain(const char* text, const Graph& rewritten, double tol = 1e-4) {
  auto plain = parse_graph(text);
  auto inputs = random_inputs(*plain);
  expect_same_outputs(interpret(*plain, inputs, Device::ref), interpret(rewritten, inputs, Device::cpu), tol, tol);
}

int count_op(const Graph& g, const std::string& op) {
  int c = 0;
  for (const Node* n : g.nodes()) c += n->op_name() == op;
  return c;
}

// A ResNet-style stem and bottleneck: image conv, 1x1 / 3x3 / 1x1 convs with relu, a fused
// residual, then a global mean (a plain consumer) and a second use of a blocked value.
const char* kBottleneck = R"(graph(%x: f32[2, 3, 12, 12]) {
  %w0 = constant f32[32, 3, 3, 3] random(seed=1)
  %w1 = constant f32[16, 32, 1, 1] random(seed=2)
  %w2 = constant f32[16, 16, 3, 3] random(seed=3)
  %w3 = constant f32[32, 16, 1, 1] random(seed=4)
  %b3 = constant f32[32] random(seed=5)
  %0 = conv2d(%x, %w0) {padding=[1, 1], stride=[2, 2], activation="relu"}
  %1 = conv2d(%0, %w1) {activation="relu"}
  %2 = conv2d(%1, %w2) {padding=[1, 1], activation="relu"}
  %3 = conv2d(%2, %w3, %b3, %0) {has_bias=true, has_residual=true, activation="relu"}
  %4 = mean(%3) {dims=[2, 3]}
  return (%4, %3)
})";

}  // namespace

TEST(PassBlockConvLayout, BottleneckStaysBlockedUntilThePlainConsumers) {
  auto g = check_pass(kBottleneck, block16, Changed::yes, {}, 1e-4, 1e-4);
  // The global mean reads the blocked bytes as [2, 2, 6, 6, 16] (its result is plain); one
  // reorder back to plain for the graph output.
  EXPECT_EQ(ops_of(*g), "conv2d conv2d conv2d conv2d reshape mean reshape channel_block");
  for (const Node* n : g->nodes()) {
    if (n->op_name() != "conv2d") continue;
    EXPECT_EQ(n->attr("dst_block").i(), 16);
    EXPECT_EQ(n->attr("src_block").i(), n->input(0)->type.shape[1].value() < 16 ? 0 : 16);
  }
  // The blocked graph on the fast kernels against the plain graph on the reference.
  expect_fast_matches_plain(kBottleneck, *g);
}

TEST(PassBlockConvLayout, BlockEight) {
  auto g = check_pass(kBottleneck, block8, Changed::yes, {}, 1e-4, 1e-4);
  EXPECT_EQ(count_op(*g, "channel_block"), 1);
}

TEST(PassBlockConvLayout, ChannelsThatDoNotDivideStayPlain) {
  // 12 channels divide by neither 16 nor 8: neither conv can read or write them blocked.
  auto g = check_pass(R"(graph(%x: f32[1, 12, 8, 8]) {
  %w0 = constant f32[32, 12, 1, 1] random(seed=1)
  %w1 = constant f32[12, 32, 1, 1] random(seed=2)
  %0 = conv2d(%x, %w0)
  %1 = conv2d(%0, %w1)
  return (%1)
})", block16, Changed::no);
  EXPECT_EQ(ops_of(*g), "conv2d conv2d");
}

TEST(PassBlockConvLayout, ChannelsOfEightUseTheHalfBlock) {
  // MobileNetV2's 24-channel bottlenecks with block 16: those convs run in nChw8c, with 16 <-> 8
  // reorders between them and their 16-blocked neighbours.
  const char* text = R"(graph(%x: f32[1, 32, 8, 8]) {
  %w0 = constant f32[24, 32, 3, 3] random(seed=1)
  %w1 = constant f32[32, 24, 3, 3] random(seed=2)
  %w2 = constant f32[32, 32, 3, 3] random(seed=3)
  %0 = conv2d(%x, %w0) {padding=[1, 1]}
  %1 = conv2d(%0, %w1) {padding=[1, 1]}
  %2 = conv2d(%1, %w2) {padding=[1, 1]}
  return (%2)
})";
  // Three chained 3x3 convs sum ~300 products a step: f32 order differences reach 3e-4.
  auto g = check_pass(text, block16, Changed::yes, {}, 1e-3, 1e-3);
  EXPECT_EQ(ops_of(*g), "channel_block conv2d conv2d channel_block conv2d channel_block");
  EXPECT_EQ(g->nodes()[1]->attr("dst_block").i(), 8);
  EXPECT_EQ(g->nodes()[2]->attr("src_block").i(), 8);
  EXPECT_EQ(g->nodes()[4]->attr("src_block").i(), 16);
  expect_fast_matches_plain(text, *g, 1e-3);
}

TEST(PassBlockConvLayout, PlainNeighboursGetReorders) {
  // %0 is blocked and read by an add (plain) and by a conv of 16 -> 20 channels (plain), so
  // one plain copy serves both; the graph input with 16 channels is reordered once for %0.
  auto g = check_pass(R"(graph(%x: f32[1, 16, 6, 6]) {
  %w0 = constant f32[16, 16, 3, 3] random(seed=1)
  %w1 = constant f32[20, 16, 1, 1] random(seed=2)
  %0 = conv2d(%x, %w0) {padding=[1, 1]}
  %1 = add(%0, %x)
  %2 = conv2d(%0, %w1)
  return (%1, %2)
})", block16, Changed::yes, {}, 1e-4, 1e-4);
  EXPECT_EQ(ops_of(*g), "channel_block conv2d channel_block add conv2d");
  const Node* second = g->nodes()[4];
  EXPECT_EQ(second->attr("src_block").i(), 0);
  EXPECT_EQ(second->attr("dst_block").i(), 0);
}

TEST(PassBlockConvLayout, GroupedConvWithSmallGroupsStaysPlain) {
  auto g = check_pass(R"(graph(%x: f32[1, 32, 6, 6]) {
  %w = constant f32[32, 4, 3, 3] random(seed=1)
  %0 = conv2d(%x, %w) {padding=[1, 1], groups=8}
  return (%0)
})", block16, Changed::no);
  EXPECT_EQ(ops_of(*g), "conv2d");
}

TEST(PassBlockConvLayout, DepthwiseIsBlocked) {
  auto g = check_pass(R"(graph(%x: f32[1, 32, 6, 6]) {
  %w0 = constant f32[32, 32, 1, 1] random(seed=1)
  %w1 = constant f32[32, 1, 3, 3] random(seed=2)
  %0 = conv2d(%x, %w0)
  %1 = conv2d(%0, %w1) {padding=[1, 1], groups=32}
  return (%1)
})", block16, Changed::yes, {}, 1e-4, 1e-4);
  EXPECT_EQ(ops_of(*g), "channel_block conv2d conv2d channel_block");
}

// A squeeze-excite block as MobileNetV3 has it: a global mean of a blocked conv output, two 1x1
// convs on [N, C, 1, 1] and the gate scaling the blocked value, feeding the next conv.
const char* kSqueezeExcite = R"(graph(%x: f32[2, 16, 6, 6]) {
  %w0 = constant f32[32, 16, 3, 3] random(seed=1)
  %w1 = constant f32[8, 32, 1, 1] random(seed=2)
  %w2 = constant f32[32, 8, 1, 1] random(seed=3)
  %w3 = constant f32[16, 32, 3, 3] random(seed=4)
  %0 = conv2d(%x, %w0) {padding=[1, 1], activation="relu"}
  %1 = mean(%0) {dims=[3, 2], keepdim=true}
  %2 = conv2d(%1, %w1) {activation="relu"}
  %3 = conv2d(%2, %w2)
  %4 = fused_elementwise(%3, %0) {program="f32: hardsigmoid $0; mul $1 %0"}
  %5 = conv2d(%4, %w3) {padding=[1, 1]}
  return (%5)
})";

TEST(PassBlockConvLayout, SqueezeExciteVectorsNeedNoReorders) {
  // The mean and the gate read the blocked %0 as [2, 2, 6, 6, 16]; the [2, 32, 1, 1] values
  // pass from the mean into an 8-blocked conv, on to another and into the gate as
  // [2, 2, 1, 1, 16] with no copies (one pixel: the same bytes in every layout). The gate's
  // result stays blocked for %5: reorders only at the graph's edges.
  auto g = check_pass(kSqueezeExcite, block16, Changed::yes, {}, 1e-4, 1e-4);
  EXPECT_EQ(ops_of(*g),
            "channel_block conv2d reshape mean reshape conv2d conv2d reshape reshape fused_elementwise reshape conv2d "
            "channel_block");
  const auto nodes = g->nodes();
  EXPECT_EQ(nodes[5]->input(0), nodes[4]->output(0));  // the mean's result, as it is
  EXPECT_EQ(nodes[5]->attr("src_block").i(), 8);
  EXPECT_EQ(nodes[7]->input(0), nodes[6]->output(0));  // the conv's [2, 32, 1, 1], viewed
  EXPECT_EQ(nodes[9]->output(0)->type.str(), "f32[2, 2, 6, 6, 16]");
  EXPECT_EQ(nodes[11]->attr("src_block").i(), 16);
  expect_fast_matches_plain(kSqueezeExcite, *g);
}

TEST(PassBlockConvLayout, ElementwiseBetweenConvsRunsBlocked) {
  // hardswish, a residual add and a per-channel scale between blocked convs: no reorders. The
  // [1, 1, 6, 6] spatial mask is read as [1, 1, 6, 6, 1]. The add whose only consumer is the
  // graph output and whose inputs are plain stays plain (blocked would cost a reorder more).
  const char* ordered = R"(graph(%x: f32[1, 16, 6, 6], %m: f32[1, 1, 6, 6], %s: f32[32, 1, 1], %y: f32[1, 32, 6, 6]) {
  %w0 = constant f32[32, 16, 3, 3] random(seed=1)
  %w1 = constant f32[32, 32, 3, 3] random(seed=2)
  %0 = conv2d(%x, %w0) {padding=[1, 1]}
  %1 = hardswish(%0)
  %2 = fused_elementwise(%1, %0, %m, %s) {program="f32: add $0 $1; mul %0 $2; mul %1 $3"}
  %3 = conv2d(%2, %w1) {padding=[1, 1]}
  %4 = relu(%y)
  %5 = add(%y, %4)
  return (%3, %5)
})";
  auto g = check_pass(ordered, block16, Changed::yes, {}, 1e-4, 1e-4);
  EXPECT_EQ(ops_of(*g),
            "channel_block conv2d reshape hardswish reshape reshape reshape reshape reshape fused_elementwise reshape "
            "conv2d relu add channel_block");
  for (const Node* n : g->nodes())
    if (n->op_name() == "fused_elementwise") {
      EXPECT_EQ(n->input(2)->type.str(), "f32[1, 1, 6, 6, 1]");
      EXPECT_EQ(n->input(3)->type.str(), "f32[1, 2, 1, 1, 16]");
    }
  expect_fast_matches_plain(ordered, *g);
}

TEST(PassBlockConvLayout, ChannelsLastKeepsEveryConvInNhwc) {
  // Channels-last: each value's block is its own channel count; the image is copied to NHWC
  // (block 3) for the stem; the global mean reads [2, 1, 6, 6, 32]; one copy back to plain for
  // the graph output.
  auto g = check_pass(kBottleneck, channels_last, Changed::yes, {}, 1e-4, 1e-4);
  EXPECT_EQ(ops_of(*g), "channel_block conv2d conv2d conv2d conv2d reshape mean reshape channel_block");
  for (const Node* n : g->nodes()) {
    if (n->op_name() == "conv2d") {
      EXPECT_EQ(n->attr("src_block").i(), n->input(0)->type.shape[1].value());
      EXPECT_EQ(n->attr("dst_block").i(), n->output(0)->type.shape[1].value());
    }
    if (n->op_name() == "mean") EXPECT_EQ(n->input(0)->type.str(), "f32[2, 1, 6, 6, 32]");
  }
  expect_fast_matches_plain(kBottleneck, *g);
}

TEST(PassBlockConvLayout, ChannelsLastTakesAnyChannelCountAndGroups) {
  // What the blocked layouts leave plain (12 and 24 channels, groups of 4 channels) and a
  // squeeze-excite gate all run channels-last, with copies only at the graph's edges.
  const char* text = R"(graph(%x: f32[1, 12, 8, 8]) {
  %w0 = constant f32[24, 12, 3, 3] random(seed=1)
  %w1 = constant f32[24, 4, 3, 3] random(seed=2)
  %w2 = constant f32[24, 1, 3, 3] random(seed=3)
  %w3 = constant f32[12, 24, 1, 1] random(seed=4)
  %0 = conv2d(%x, %w0) {padding=[1, 1], activation="relu"}
  %1 = conv2d(%0, %w1) {padding=[1, 1], groups=6}
  %2 = conv2d(%1, %w2) {padding=[1, 1], groups=24}
  %3 = mean(%2) {dims=[2, 3], keepdim=true}
  %4 = fused_elementwise(%3, %2) {program="f32: sigmoid $0; mul $1 %0"}
  %5 = conv2d(%4, %w3)
  return (%5)
})";
  auto g = check_pass(text, channels_last, Changed::yes, {}, 1e-4, 1e-4);
  EXPECT_EQ(ops_of(*g),
            "channel_block conv2d conv2d conv2d reshape mean reshape reshape reshape fused_elementwise reshape conv2d "
            "channel_block");
  for (const Node* n : g->nodes())
    if (n->op_name() == "fused_elementwise") EXPECT_EQ(n->input(1)->type.str(), "f32[1, 1, 8, 8, 24]");
  expect_fast_matches_plain(text, *g);
}

TEST(PassBlockConvLayout, PoolsBetweenConvsKeepTheLayout) {
  // ResNet's stem: conv, max pool, conv, with no copies around the pool, in both kinds of
  // layout. %3's input %2 has a plain copy (for the add) before the pool reads it, so that pool
  // reads the copy and stays plain.
  const char* text = R"(graph(%x: f32[1, 3, 16, 16]) {
  %w0 = constant f32[16, 3, 3, 3] random(seed=1)
  %w1 = constant f32[32, 16, 1, 1] random(seed=2)
  %0 = conv2d(%x, %w0) {padding=[1, 1], stride=[2, 2], activation="relu"}
  %1 = max_pool2d(%0) {kernel=[3, 3], stride=[2, 2], padding=[1, 1]}
  %2 = conv2d(%1, %w1)
  %3 = add(%2, %2)
  %4 = avg_pool2d(%2) {kernel=[2, 2], stride=[2, 2]}
  return (%3, %4)
})";
  for (const bool nhwc : {false, true}) {
    SCOPED_TRACE(nhwc ? "channels-last" : "block 16");
    auto g = check_pass(text, nhwc ? channels_last : block16, Changed::yes, {}, 1e-4, 1e-4);
    EXPECT_EQ(ops_of(*g), std::string(nhwc ? "channel_block " : "") + "conv2d max_pool2d conv2d channel_block add avg_pool2d");
    for (const Node* n : g->nodes()) {
      if (n->op_name() == "max_pool2d") EXPECT_EQ(n->attr("block").i(), 16);
      if (n->op_name() == "avg_pool2d") EXPECT_EQ(n->attr("block").i(), 0);
    }
    expect_fast_matches_plain(text, *g);
  }
}

// A ConvNeXt block: depthwise conv, permute to [N, H, W, C], layer norm over C, permute back,
// the residual add, the next conv.
const char* kConvNextBlock = R"(graph(%x: f32[1, 24, 5, 6], %g: f32[24], %b: f32[24]) {
  %w0 = constant f32[24, 1, 7, 7] random(seed=1)
  %w1 = constant f32[24, 24, 1, 1] random(seed=2)
  %0 = conv2d(%x, %w0) {padding=[3, 3], groups=24}
  %1 = permute(%0) {dims=[0, -2, -1, 1]}
  %2 = layer_norm(%1, %g, %b) {normalized_ndim=1, has_weight=true, has_bias=true}
  %3 = permute(%2) {dims=[0, 3, 1, 2]}
  %4 = add(%3, %x)
  %5 = conv2d(%4, %w1)
  %6 = permute(%0) {dims=[0, 3, 2, 1]}
  return (%5, %6)
})";

TEST(PassBlockConvLayout, ChannelsLastPermutesAreViews) {
  // Channels-last: the conv's bytes are the permute's [N, H, W, C] (a reshape), and the layer
  // norm's [N, H, W, C] bytes are the permute back in channels-last (a reshape through
  // [1, 1, 5, 6, 24]); the add runs on the views and the next conv reads its result as it is.
  // Copies: the input to NHWC (shared by the add), the output to plain, and the plain copy a
  // permute to another order (%6) reads.
  auto g = check_pass(kConvNextBlock, channels_last, Changed::yes, {}, 1e-4, 1e-4);
  EXPECT_EQ(ops_of(*g),
            "channel_block conv2d reshape layer_norm reshape reshape reshape reshape add reshape conv2d channel_block "
            "permute channel_block");
  EXPECT_EQ(g->nodes()[2]->input(0), g->nodes()[1]->output(0));
  EXPECT_EQ(g->nodes()[4]->output(0)->type.str(), "f32[1, 1, 5, 6, 24]");
  expect_fast_matches_plain(kConvNextBlock, *g);
  // In nChw8c the bytes are not NHWC: the permutes stay.
  auto blocked = check_pass(kConvNextBlock, block8, Changed::yes, {}, 1e-4, 1e-4);
  EXPECT_EQ(count_op(*blocked, "permute"), 3);
}

TEST(PassBlockConvLayout, PermuteBackStaysWhereOnlyPlainOpsReadIt) {
  // A permute of a plain [N, H, W, C] to NCHW read only by a plain op (a flatten) and a graph
  // output: kept channels-last it would only trade the permute for a reorder, so it stays.
  const char* text = R"(graph(%x: f32[1, 24, 5, 6], %y: f32[1, 5, 6, 24]) {
  %w = constant f32[24, 24, 3, 3] random(seed=1)
  %0 = conv2d(%x, %w) {padding=[1, 1]}
  %1 = permute(%y) {dims=[0, 3, 1, 2]}
  %2 = reshape(%1) {shape=[1, 720]}
  return (%0, %1, %2)
})";
  auto g = check_pass(text, channels_last, Changed::yes, {}, 1e-4, 1e-4);
  EXPECT_EQ(count_op(*g, "permute"), 1);
  EXPECT_EQ(count_op(*g, "channel_block"), 2);  // the conv's input and output only
}

TEST(PassBlockConvLayout, PointwiseConvsBetweenPlainValuesStayPlain) {
  // A training forward graph's shape: every conv's result is saved (a graph output, plain), so
  // a blocked 1x1 conv would pay a reorder at each edge for no faster kernel. The 1x1 convs
  // stay plain; the 3x3 conv runs blocked with a copy either side (the second serves both its
  // graph output and the last conv).
  const char* text = R"(graph(%x: f32[1, 16, 6, 6]) {
  %w0 = constant f32[32, 16, 1, 1] random(seed=1)
  %w1 = constant f32[32, 32, 3, 3] random(seed=2)
  %w2 = constant f32[16, 32, 1, 1] random(seed=3)
  %0 = conv2d(%x, %w0)
  %1 = conv2d(%0, %w1) {padding=[1, 1]}
  %2 = conv2d(%1, %w2)
  return (%0, %1, %2)
})";
  for (const bool nhwc : {false, true}) {
    SCOPED_TRACE(nhwc ? "channels-last" : "block 16");
    auto g = check_pass(text, nhwc ? channels_last : block16, Changed::yes, {}, 1e-4, 1e-4);
    EXPECT_EQ(ops_of(*g), "conv2d channel_block conv2d channel_block conv2d");
    const auto nodes = g->nodes();
    EXPECT_FALSE(nodes[0]->attrs.count("dst_block"));
    EXPECT_NE(nodes[2]->attr("dst_block").i(), 0);
    EXPECT_FALSE(nodes[4]->attrs.count("src_block"));
    expect_fast_matches_plain(text, *g);
  }
}

TEST(PassBlockConvLayout, PointwiseConvsBetweenBlockedConvsStayBlocked) {
  // The same convs with nothing saved between them (an inference graph): blocked through.
  const char* text = R"(graph(%x: f32[1, 16, 6, 6]) {
  %w0 = constant f32[32, 16, 3, 3] random(seed=1)
  %w1 = constant f32[32, 32, 1, 1] random(seed=2)
  %w2 = constant f32[16, 32, 3, 3] random(seed=3)
  %0 = conv2d(%x, %w0) {padding=[1, 1]}
  %1 = conv2d(%0, %w1)
  %2 = conv2d(%1, %w2) {padding=[1, 1]}
  return (%2)
})";
  auto g = check_pass(text, channels_last, Changed::yes, {}, 1e-4, 1e-4);
  EXPECT_EQ(ops_of(*g), "channel_block conv2d conv2d conv2d channel_block");
  expect_fast_matches_plain(text, *g);
}

TEST(PassBlockConvLayout, BlockZeroIsANoOp) {
  auto g = parse_graph(kBottleneck);
  EXPECT_FALSE(block_conv_layout(*g, 0));
}

namespace {

struct ConvCase {
  int64_t N, C, H, W, O, k, stride, groups, src_block, dst_block;
  bool residual;
};

// conv2d on the fast kernels with the case's layouts against the reference; returns the kernel.
std::string expect_conv_matches_ref(const ConvCase& c) {
  SCOPED_TRACE("C" + std::to_string(c.C) + " O" + std::to_string(c.O) + " k" + std::to_string(c.k) + " groups " +
               std::to_string(c.groups) + " blocks " + std::to_string(c.src_block) + "->" + std::to_string(c.dst_block));
  const int64_t pad = c.k / 2, OH = (c.H + 2 * pad - c.k) / c.stride + 1, OW = (c.W + 2 * pad - c.k) / c.stride + 1;
  Attrs a = {{"stride", std::vector<int64_t>{c.stride, c.stride}},
             {"padding", std::vector<int64_t>{pad, pad}},
             {"groups", c.groups},
             {"src_block", c.src_block},
             {"dst_block", c.dst_block},
             {"has_bias", true},
             {"activation", std::string("relu")}};
  std::vector<Arg> args = {input(random_tensor(DType::f32, {c.N, c.C, c.H, c.W}, 1)),
                           constant(random_tensor(DType::f32, {c.O, c.C / c.groups, c.k, c.k}, 2)),
                           constant(random_tensor(DType::f32, {c.O}, 3))};
  if (c.residual) {
    a["has_residual"] = true;
    args.push_back(input(random_tensor(DType::f32, {c.N, c.O, OH, OW}, 4)));
  }
  std::string name = expect_matches_ref("conv2d", std::move(args), a);
  // The layouts exist to reach oneDNN's direct and brgemm kernels: never its reference loops.
  EXPECT_EQ(name.find(":ref:"), std::string::npos) << name;
  return name;
}

}  // namespace

TEST(ConvBlocked, KernelMatchesReference) {
  // Both blocks on every CPU (an AVX2 CPU runs the 16-blocked problems through the kernel's
  // other forms).
  for (int64_t b : {int64_t{16}, int64_t{8}}) {
    SCOPED_TRACE("block " + std::to_string(b));
    for (const ConvCase& c : {ConvCase{1, 3, 9, 9, 2 * b, 3, 2, 1, 0, b, false},          // image in, blocked out
                              ConvCase{2, b, 7, 7, 2 * b, 3, 1, 1, b, b, true},           // 3x3 with residual
                              ConvCase{1, 2 * b, 5, 5, b, 1, 1, 1, b, b, false},          // 1x1
                              ConvCase{1, 2 * b, 7, 7, 2 * b, 3, 2, 2 * b, b, b, false},  // depthwise
                              ConvCase{2, 2 * b, 6, 6, 2 * b, 1, 2, 1, b, b, true}})      // strided 1x1, residual
      expect_conv_matches_ref(c);
  }
}

TEST(ConvChannelsLast, KernelMatchesReference) {
  // Channels-last is block = the channel count, on each side: an NHWC image, channel counts
  // no block divides, a 5x5 depthwise, groups of 4 channels, residuals.
  for (const ConvCase& c : {ConvCase{1, 3, 19, 19, 16, 3, 2, 1, 3, 16, false},  // NHWC image in
                            ConvCase{2, 24, 9, 9, 72, 1, 1, 1, 24, 72, false},        // 1x1, odd channels
                            ConvCase{1, 72, 9, 9, 24, 1, 1, 1, 72, 24, true},         // 1x1 with residual
                            ConvCase{1, 72, 11, 11, 72, 5, 2, 72, 72, 72, false},     // depthwise 5x5
                            ConvCase{2, 32, 7, 7, 32, 3, 1, 8, 32, 32, true},         // groups of 4, residual
                            ConvCase{1, 40, 7, 7, 48, 3, 1, 1, 40, 48, true},         // 3x3 with residual
                            ConvCase{1, 64, 4, 4, 16, 1, 1, 1, 0, 16, false}}) {      // plain src
    const std::string name = expect_conv_matches_ref(c);
    // oneDNN serves NHWC in place (brgemm, depthwise, first-layer or gemm kernels): no copies.
    // A plain src with an NHWC dst has no kernel of its own and runs through the kernel's other
    // forms.
    if (c.src_block != 0) EXPECT_EQ(name.find("via_plain"), std::string::npos) << name;
  }
}

TEST(ChannelBlock, ReorderMatchesReference) {
  for (int64_t b : {8, 16}) {
    SCOPED_TRACE(b);
    expect_matches_ref("channel_block", {input(random_tensor(DType::f32, {2, 2 * b, 3, 5}, 1))},
                       {{"from_block", int64_t{0}}, {"to_block", b}});
    expect_matches_ref("channel_block", {input(random_tensor(DType::f32, {2, 2 * b, 3, 5}, 2))},
                       {{"from_block", b}, {"to_block", int64_t{0}}});
    // A strided graph input (last two dims swapped in memory) is read through its strides.
    expect_matches_ref("channel_block", {transposed_input(random_tensor(DType::f32, {1, b, 4, 6}, 3))},
                       {{"from_block", int64_t{0}}, {"to_block", b}});
  }
  // Channels-last (block = the channel count, 24 here) from and to plain and nChw8c.
  for (int64_t from : {0, 8, 24})
    for (int64_t to : {0, 8, 24})
      if (from != to && (from == 24 || to == 24))
        expect_matches_ref("channel_block", {input(random_tensor(DType::f32, {2, 24, 3, 5}, 4))},
                           {{"from_block", from}, {"to_block", to}});
}

TEST(ChannelBlock, RoundTripAndShapeErrors) {
  Tensor x = random_tensor(DType::f32, {1, 16, 2, 3}, 7);
  std::vector<char> blocked(x.nbytes()), back(x.nbytes());
  const int64_t shape[4] = {1, 16, 2, 3};
  channel_block_copy(x.data(), blocked.data(), 4, shape, 0, 8);
  // Element (0, 9, 1, 2) sits in block 1, lane 1.
  EXPECT_EQ(reinterpret_cast<const float*>(blocked.data())[((1 * 2 * 3) + 1 * 3 + 2) * 8 + 1],
            static_cast<const float*>(x.data())[(9 * 2 + 1) * 3 + 2]);
  channel_block_copy(blocked.data(), back.data(), 4, shape, 8, 0);
  EXPECT_EQ(std::memcmp(back.data(), x.data(), x.nbytes()), 0);
  Graph g;
  Value* v = g.add_input("x", {DType::f32, {1, 12, 4, 4}});
  EXPECT_THROW(g.add_node("channel_block", {v}, {{"from_block", int64_t{0}}, {"to_block", int64_t{8}}}), Error);
}

TEST(ConvLayoutOption, ExplicitLayoutsAreKeptAndAutoResolves) {
  // An explicit layout compiles as asked on any CPU (channels-last is negative, like auto's -1,
  // and must not be taken for it); -1 becomes this CPU's preference; others are refused.
  for (int layout : {0, 8, 16, kChannelsLast}) {
    CompileOptions opts;
    opts.channel_block = layout;
    EXPECT_EQ(Executable::compile(parse_graph(kBottleneck), opts)->options().channel_block, layout);
  }
  EXPECT_EQ(Executable::compile(parse_graph(kBottleneck), CompileOptions{})->options().channel_block,
            preferred_channel_block());
  CompileOptions bad;
  bad.channel_block = 4;
  EXPECT_THROW(Executable::compile(parse_graph(kBottleneck), bad), Error);
}
