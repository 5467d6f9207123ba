// Pass: canonicalize. Rewrites that simplify without changing results: drop identity reshapes/copies/casts, merge reshape and permute chains, linear of a transposed non-constant 2-d weight -> matmul of the weight (constant weights are left to constant_fold), absorb expand into broadcasting elementwise consumers, drop x * 1, x / 1 and where with a literal condition.
#pragma once
#include "ir/graph.h"

namespace updraft {

// Returns whether the graph changed.
bool canonicalize(Graph& g);

}  // namespace updraft
