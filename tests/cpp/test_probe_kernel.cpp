// probe_fast_kernel: the partitioner's question "would this node run on a fast kernel?" is
// answered by the CPU factory itself, at made-up sizes for symbols.
#include <gtest/gtest.h>

#include "ir/text.h"
#include "kernels/kernel.h"

using namespace updraft;

namespace {
const Node& last_node(const Graph& g) { return *g.nodes().back(); }
}  // namespace

TEST(ProbeFastKernel, NamesTheKernelAFactoryBuilds) {
  auto g = parse_graph(R"(graph(%x: f32[64, 33]) {
  %0 = add(%x, %x)
  return (%0)
})");
  auto name = probe_fast_kernel(last_node(*g), 8);
  ASSERT_TRUE(name.has_value());
  EXPECT_EQ(name->rfind("cpu_f32_add", 0), 0u) << *name;
}

TEST(ProbeFastKernel, BindsSymbolsOfShapesAndAttributes) {
  auto g = parse_graph(R"(graph(%x: f32[s0, 16]) {
  %0 = reshape(%x) {shape=[s0, 4, 4]}
  %1 = softmax(%0) {dim=-1}
  return (%1)
})");
  for (const Node* n : g->nodes()) EXPECT_TRUE(probe_fast_kernel(*n, 8).has_value()) << n->op_name();
}

TEST(ProbeFastKernel, NoneWhenOnlyTheReferenceKernelRuns) {
  // A dtype the CPU reduction factory declines (argmax over integers): the reference loop
  // would run it.
  auto g = parse_graph(R"(graph(%x: i64[64, 64]) {
  %0 = argmax(%x) {dim=1}
  return (%0)
})");
  EXPECT_FALSE(probe_fast_kernel(last_node(*g), 8).has_value());
}

TEST(ProbeFastKernel, ComputeOpsAreNotProbed) {
  auto g = parse_graph(R"(graph(%x: f32[4, 8], %w: f32[16, 8]) {
  %0 = linear(%x, %w)
  return (%0)
})");
  EXPECT_EQ(probe_fast_kernel(last_node(*g), 8).value_or(""), "linear:not probed");
}

TEST(ProbeFastKernel, PoolingIsProbed) {
  // f32 max pooling runs on oneDNN; f64 pooling has only the reference loop.
  auto f32 = parse_graph(R"(graph(%x: f32[1, 8, 16, 16]) {
  %0 = max_pool2d(%x) {kernel=[3, 3], stride=[2, 2], padding=[1, 1]}
  return (%0)
})");
  EXPECT_TRUE(probe_fast_kernel(last_node(*f32), 8).has_value());
  auto f64 = parse_graph(R"(graph(%x: f64[1, 8, 16, 16]) {
  %0 = max_pool2d(%x) {kernel=[3, 3], stride=[2, 2], padding=[1, 1]}
  return (%0)
})");
  EXPECT_FALSE(probe_fast_kernel(last_node(*f64), 8).has_value());
}
