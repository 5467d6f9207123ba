// Pass: fold_transpose_matmul. A permute that swaps the last two dims of a float32 matmul
// operand (and keeps every other dim in place) becomes the matmul's transpose_a / transpose_b:
// the kernel reads the permute's input with swapped strides, so the transposed copy is never
// made. Training graphs are full of them: a linear layer's weight gradient is x^T dy, and an
// attention's backward multiplies by transposed q, k and probabilities; hand-written attention
// (q @ k.transpose(-2, -1)) has one in the forward too. Not folded: permutes that move a batch
// dim, matmuls of other dtypes (their kernels read dense operands), and linear (its weight is
// already read transposed; canonicalize turns linear(x, permute(w)) into matmul). The permute
// stays for its other users (dce drops it when none are left).
#pragma once
#include "ir/graph.h"

namespace updraft {

// Returns whether the graph changed.
bool fold_transpose_matmul(Graph& g);

}  // namespace updraft
