// verify: accepts well-formed graphs, and names the node and the broken invariant otherwise.
#include <gtest/gtest.h>

#include "core/error.h"
#include "ir/text.h"
#include "passes/verify.h"

using namespace updraft;

namespace {

std::string verify_error(Graph& g) {
  try {
    verify(g);
  } catch (const Error& e) {
    EXPECT_EQ(e.component(), "verify");
    return e.what();
  }
  ADD_FAILURE() << "verify accepted:\n" << print_graph(g);
  return "";
}

const char* kChain = R"(graph(%x: f32[s0, 4]) {
  %c = constant f32[4] [1.0, 2.0, 3.0, 4.0]
  %0 = add(%x, %c)
  %1 = relu(%0)
  return (%1)
})";

}  // namespace

TEST(PassVerify, AcceptsWellFormedGraphAndChangesNothing) {
  auto g = parse_graph(kChain);
  std::string before = print_graph(*g);
  EXPECT_FALSE(verify(*g));
  EXPECT_EQ(print_graph(*g), before);
}

TEST(PassVerify, UseBeforeDefinition) {
  auto g = parse_graph(kChain);
  Node* add = g->nodes()[0];
  g->set_insert_point(add);  // a neg of the add's output, placed before the add
  Node* neg = g->add_node("neg", {add->output()});
  g->set_insert_point(nullptr);
  g->set_outputs({neg->output()});
  std::string e = verify_error(*g);
  EXPECT_NE(e.find("node #2 (neg): input 0"), std::string::npos) << e;
  EXPECT_NE(e.find("is produced later by node #0 (add)"), std::string::npos) << e;
}

TEST(PassVerify, StaleOutputType) {
  auto g = parse_graph(kChain);
  g->nodes()[1]->output()->type.dtype = DType::f64;
  std::string e = verify_error(*g);
  EXPECT_NE(e.find("node #1 (relu): output 0 is typed f64[s0, 4] but the op table infers f32[s0, 4]"), std::string::npos)
      << e;
}

TEST(PassVerify, NodeNoLongerTypeChecks) {
  auto g = parse_graph(kChain);
  g->inputs()[0]->type.shape = {Dim(3), Dim(5)};  // no longer broadcasts with f32[4]
  std::string e = verify_error(*g);
  EXPECT_NE(e.find("node #0 (add) no longer type-checks: [add]"), std::string::npos) << e;
}

TEST(PassVerify, DanglingInputAndOutput) {
  auto g = parse_graph(kChain);
  Node* relu = g->nodes()[1];
  Node* extra = g->add_node("neg", {g->inputs()[0]});
  Value* gone = extra->output();
  g->remove_node(extra);
  relu->inputs[0] = gone;
  std::string e = verify_error(*g);
  EXPECT_NE(e.find("node #1 (relu): input 0"), std::string::npos) << e;
  EXPECT_NE(e.find("has no producer in the graph"), std::string::npos) << e;

  auto g2 = parse_graph(kChain);
  Node* extra2 = g2->add_node("neg", {g2->inputs()[0]});
  Value* gone2 = extra2->output();
  g2->remove_node(extra2);
  g2->set_outputs({gone2});
  EXPECT_NE(verify_error(*g2).find("graph output 0"), std::string::npos);
}

TEST(PassVerify, ConstantPayloadMustMatchType) {
  auto g = parse_graph(kChain);
  Value* c = g->nodes()[0]->input(1);
  c->constant = Tensor(DType::f32, {2, 2});  // type still says f32[4]
  std::string e = verify_error(*g);
  EXPECT_NE(e.find("holds f32[2, 2] but its type says f32[4]"), std::string::npos) << e;
}
