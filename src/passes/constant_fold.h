// Pass: constant_fold. Evaluates nodes whose inputs are all constants with the engine's own kernels and replaces them with constants (size-bounded, so it never inflates the model).
#pragma once
#include "ir/graph.h"

namespace updraft {

// Returns whether the graph changed.
bool constant_fold(Graph& g);

}  // namespace updraft
