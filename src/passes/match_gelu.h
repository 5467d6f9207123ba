// Pass: match_gelu. Recognises the tanh form of GELU written out in elementwise ops (GPT-2's
// "gelu_new", HF NewGELUActivation, which AOTAutograd hands over as eight ops):
//   0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x^3)))   ->   gelu(x) {approximate="tanh"}
// so it runs as one vector kernel or, after fuse_epilogue, as the matmul's post-op instead of a
// fused elementwise chain of pow and tanh. Operands of mul/add match in either order; the
// constants are scalars (one element) within 1e-6 relative of the formula's. Intermediate
// values with other users stay (dce drops the rest). f32 only.
#pragma once
#include "ir/graph.h"

namespace updraft {

// Returns whether the graph changed.
bool match_gelu(Graph& g);

}  // namespace updraft
