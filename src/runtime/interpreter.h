// Interpreter: runs a Graph node by node with run_node, allocating every intermediate. Slow
// and simple on purpose: it is the oracle that pass tests compare against ("run the graph
// before and after a pass and compare outputs") and has no planner or arena.
//
//   auto g = parse_graph(text);
//   std::vector<Tensor> before = interpret(*g, {x}, Device::ref);
//   fuse_epilogue(*g);
//   std::vector<Tensor> after = interpret(*g, {x}, Device::ref);
//
// Symbolic graphs work: symbols are bound from the inputs' shapes (a dim written as a plain
// symbol binds it; static dims and expressions are checked against the binding).
#pragma once
#include <vector>

#include "core/tensor.h"
#include "ir/graph.h"
#include "kernels/kernel.h"

namespace updraft {

// Returns one tensor per graph output. Throws Error("interpret", ...) when the inputs do not
// match the graph's input types; kernel errors propagate unchanged.
std::vector<Tensor> interpret(const Graph& g, const std::vector<Tensor>& inputs, Device d);

// The symbol bindings `inputs` imply for `g` (same checks as interpret).
SymBindings bind_input_shapes(const Graph& g, const std::vector<std::vector<int64_t>>& input_shapes);

}  // namespace updraft
