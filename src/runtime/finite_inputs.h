// finite_inputs: which nodes read only values that are finite whenever the graph's inputs are,
// so that their kernels may run a form that differs from PyTorch only on NaN (oneDNN's relu
// and clip post-ops turn NaN into the bound; PyTorch keeps it).
//
// What it does: a forward walk that calls a value finite-given-the-inputs when it is
//  - a graph input of an integer or bool dtype, or an f32 input (the plan scans those per call),
//  - a constant whose elements are all finite,
//  - the output of a node that keeps finite values finite (listed in finite_inputs.cpp: views
//    and copies, conv / linear / matmul / pools, sums, means over static non-empty dims,
//    softmax, layer and RMS norms with eps > 0,
//    and elementwise ops and programs whose every op is in the list and whose immediates are
//    finite) when all its inputs are.
// It marks the conv2d, linear and matmul nodes whose epilogue activation the engine applies
// after oneDNN (relu, clamp: ir/elementwise_ops.def, engine_epi) and whose inputs are all
// finite-given-the-inputs, and lists the f32 graph inputs those nodes depend on. Plan::execute
// scans these inputs each call and tells the kernels (call_inputs_finite, kernels/kernel.h):
// on a call with a NaN or an infinity among them, every marked kernel runs its exact form.
//
// What it does not do: prove that nothing overflows. A finite value can round to +-inf when it
// passes FLT_MAX (a sum of products near 1e38), and inf - inf is NaN; eager's NaN there may be
// the bound in the fused form. The engine already differs from eager in such sums (it
// accumulates in f32 where eager may not; docs/decisions.md, "Edge values follow eager
// PyTorch"). Ops that give NaN or inf from finite operands without overflowing (log, div, sqrt,
// pow, var, norms with eps 0, a mean over an empty dim, batch_norm's arbitrary running var) are
// not in the list, so nodes past them are not marked.
#pragma once
#include <vector>

#include "ir/graph.h"

namespace updraft {

struct FiniteInputs {
  std::vector<char> node;   // by Node::id: 1 when the node's kernel gets KernelContext::finite_inputs
  std::vector<int> inputs;  // positions in Graph::inputs() of the f32 inputs to scan per call
  bool marks(const Node& n) const { return n.id >= 0 && static_cast<size_t>(n.id) < node.size() && node[n.id]; }
  bool any() const;
};

FiniteInputs prove_finite_inputs(const Graph& g);

}  // namespace updraft
