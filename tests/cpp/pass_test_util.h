// Helpers for pass tests: parse text IR, run a pass, and compare the graph's outputs before
// and after on the same random inputs (ONNX Runtime's TransformerTester idea).
//
//   auto g = check_pass(R"(graph(%x: f32[2, 3]) { ... })", fuse_epilogue, Changed::yes);
//   ASSERT_EQ(g->num_nodes(), 1u);
#pragma once
#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "ir/graph.h"
#include "ir/text.h"
#include "passes/dce.h"
#include "passes/verify.h"
#include "runtime/interpreter.h"
#include "test_util.h"

namespace updraft::testing {

enum class Changed { no, yes };

// Random inputs for g's input types, symbols bound by `syms`. Floats in [-2, 2).
inline std::vector<Tensor> random_inputs(const Graph& g, const SymBindings& syms = {}, uint32_t seed = 1) {
  std::vector<Tensor> r;
  for (const Value* v : g.inputs()) r.push_back(random_tensor(v->type.dtype, shape_eval(v->type.shape, syms), seed++));
  return r;
}

// Compares two output lists elementwise.
inline void expect_same_outputs(const std::vector<Tensor>& a, const std::vector<Tensor>& b, double rtol, double atol) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(all_close(a[i], b[i], rtol, atol)) << "output " << i;
}

// Parses `text`, runs `pass`, checks its return value, verifies the result and compares
// outputs before and after (reference kernels, so only the pass is under test).
inline std::unique_ptr<Graph> check_pass(const std::string& text, bool (*pass)(Graph&), Changed want,
                                         const SymBindings& syms = {}, double rtol = 1e-5, double atol = 1e-5) {
  auto g = parse_graph(text);
  auto inputs = random_inputs(*g, syms);
  auto before = interpret(*g, inputs, Device::ref);
  std::string ir_before = print_graph(*g);
  bool changed = pass(*g);
  EXPECT_EQ(changed, want == Changed::yes) << "before:\n" << ir_before << "after:\n" << print_graph(*g);
  if (!changed) EXPECT_EQ(print_graph(*g), ir_before) << "the pass said 'unchanged' but the IR differs";
  verify(*g);
  auto after = interpret(*g, inputs, Device::ref);
  expect_same_outputs(before, after, rtol, atol);
  return g;
}

// The rewritten graph on the fast kernels against the original `text` on the reference ones.
inline void expect_fast_matches(const std::string& text, const Graph& rewritten, const SymBindings& syms = {},
                                double rtol = 1e-4, double atol = 1e-4) {
  auto original = parse_graph(text);
  auto inputs = random_inputs(*original, syms);
  expect_same_outputs(interpret(*original, inputs, Device::ref), interpret(rewritten, inputs, Device::cpu), rtol, atol);
}

// `Pass`, then dce (the nodes it bypassed go, as the pipeline's next dce drops them); returns
// what `Pass` returned. For check_pass: check_pass(text, then_dce<cse>, Changed::yes).
template <bool (*Pass)(Graph&)>
bool then_dce(Graph& g) {
  bool changed = Pass(g);
  dce(g);
  return changed;
}

// The ops of g's nodes in order, space separated: "conv2d relu".
inline std::string ops_of(const Graph& g) {
  std::string s;
  for (const Node* n : g.nodes()) s += (s.empty() ? "" : " ") + n->op_name();
  return s;
}

}  // namespace updraft::testing
