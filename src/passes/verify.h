// Pass: verify. Checks graph invariants (topological order, types match the op table, outputs defined); throws Error("verify", ...). Returns false (it never changes the graph).
#pragma once
#include "ir/graph.h"

namespace updraft {

// Returns whether the graph changed.
bool verify(Graph& g);

}  // namespace updraft
