// Pass: cse. Merges nodes with the same op, inputs and attributes (and identical small constants).
#pragma once
#include "ir/graph.h"

namespace updraft {

// Returns whether the graph changed.
bool cse(Graph& g);

}  // namespace updraft
