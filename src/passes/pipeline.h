// The compile pipeline: a plain list of passes, run in order (see pipeline.cpp).
#pragma once
#include <vector>

#include "ir/graph.h"
#include "runtime/executable.h"

namespace updraft {

// Runs verify -> canonicalise -> match gelu -> dce -> cse -> fold constants -> fold conv+bn -> fold pads into convs -> fuse
// epilogues -> fuse elementwise chains -> block conv layouts -> dce -> verify. opts.channel_block
// must be resolved (>= 0) by the caller. Returns one record per pass.
std::vector<PassRecord> run_pipeline(Graph& g, const CompileOptions& opts);

}  // namespace updraft
