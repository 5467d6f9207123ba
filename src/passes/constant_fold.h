// Pass: constant_fold. Evaluates nodes whose inputs are all constants with the engine's own kernels and replaces them with constants (size-bounded, so it never inflates the model).
#pragma once
#include "ir/graph.h"

namespace updraft {

// Returns whether the graph changed.
bool constant_fold(Graph& g);

// Folds one node whose inputs are all constants into constants (recording the fold, see
// Graph::record_fold). `always`: skip the size heuristics (a pass that rewrites weights, such
// as fold_conv_bn, folds what it created). Returns false when the node cannot be folded.
bool fold_constant_node(Graph& g, Node* n, bool always = false);

// The values one node computes from these inputs, with the kernels constant folding uses
// (View ops copy the bytes), on one thread. Replaying a FoldRecord uses this too, so a refit
// computes bit-identical constants.
std::vector<Tensor> evaluate_constant_node(const Node& n, const std::vector<TensorView>& inputs);

}  // namespace updraft
