// Pass: fuse_elementwise. Fuses chains of elementwise ops into one fused_elementwise node that makes a single pass over memory.
#pragma once
#include "ir/graph.h"

namespace updraft {

// Returns whether the graph changed.
bool fuse_elementwise(Graph& g);

}  // namespace updraft
