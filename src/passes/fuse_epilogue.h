// Pass: fuse_epilogue. Fuses bias add, activation and residual add that follow conv2d/linear/linear_wq/matmul into the op's epilogue attributes (oneDNN post-ops).
#pragma once
#include "ir/graph.h"

namespace updraft {

// Returns whether the graph changed.
bool fuse_epilogue(Graph& g);

}  // namespace updraft
