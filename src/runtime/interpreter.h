// Interpreter: runs a Graph node by node with run_node, allocating every intermediate. Slow
// and simple on purpose: it is the oracle that pass tests compare against ("run the graph
// before and after a pass and compare outputs") and has no planner or arena.
//
//   auto g = parse_graph(text);
//   std::vector<Tensor> before = interpret(*g, {x}, Device::ref);
//   fuse_epilogue(*g);
//   std::vector<Tensor> after = interpret(*g, {x}, Device::ref);
//
// Symbolic graphs work: symbols are bound from the inputs' shapes by bind_input_shapes
// (runtime/bind_inputs.h), the same function and checks as the execution plan's.
#pragma once
#include <vector>

#include "core/tensor.h"
#include "ir/graph.h"
#include "kernels/kernel.h"

namespace updraft {

// Returns one tensor per graph output. Throws Error("interpret", ...) when the inputs do not
// match the graph's input types; kernel errors propagate unchanged.
std::vector<Tensor> interpret(const Graph& g, const std::vector<Tensor>& inputs, Device d);

}  // namespace updraft
