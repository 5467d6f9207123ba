// Pass: canonicalize. Rewrites that simplify without changing results: drop identity reshapes/copies/casts, merge reshape chains, absorb expand into broadcasting elementwise consumers.
#pragma once
#include "ir/graph.h"

namespace updraft {

// Returns whether the graph changed.
bool canonicalize(Graph& g);

}  // namespace updraft
