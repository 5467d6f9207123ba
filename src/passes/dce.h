// Pass: dce. Removes nodes whose outputs reach no graph output.
#pragma once
#include "ir/graph.h"

namespace updraft {

// Returns whether the graph changed.
bool dce(Graph& g);

}  // namespace updraft
