// dce: removes exactly the nodes whose outputs reach no graph output.
#include <gtest/gtest.h>

#include "pass_test_util.h"
#include "passes/dce.h"

using namespace updraft;
using namespace updraft::testing;

TEST(PassDce, RemovesDeadChainKeepsLiveOnes) {
  auto g = check_pass(R"(graph(%x: f32[4, 6]) {
  %dead0 = exp(%x)
  %dead1 = neg(%dead0)        // uses only dead values
  %0 = relu(%x)
  %1 = tanh(%0)
  return (%1, %0)
})", dce, Changed::yes);
  EXPECT_EQ(ops_of(*g), "relu tanh");
}

TEST(PassDce, MultiOutputNodeStaysWhileOneOutputIsUsed) {
  auto g = check_pass(R"(graph(%x: f32[4, 6]) {
  %a, %b = split(%x) {dim=1, sizes=[2, 4]}
  %0 = neg(%b)
  return (%0)
})", dce, Changed::no);
  EXPECT_EQ(ops_of(*g), "split neg");
}

TEST(PassDce, NothingDeadMeansUnchanged) {
  auto g = check_pass(R"(graph(%x: f32[3]) {
  %0 = relu(%x)
  return (%0)
})", dce, Changed::no);
  EXPECT_EQ(g->num_nodes(), 1u);
}

TEST(PassDce, GraphReturningItsInputDropsEverything) {
  auto g = check_pass(R"(graph(%x: f32[3]) {
  %0 = relu(%x)
  %1 = neg(%0)
  return (%x)
})", dce, Changed::yes);
  EXPECT_EQ(g->num_nodes(), 0u);
}
