// The compile pipeline: a plain list of passes, run in order (see pipeline.cpp).
#pragma once
#include <string>
#include <vector>

#include "ir/graph.h"
#include "passes/options.h"

namespace updraft {

// Runs verify -> canonicalise -> match gelu -> dce -> cse -> fold constants -> fold conv+bn -> fold pads into convs -> fuse
// epilogues -> fuse elementwise chains -> block conv layouts -> dce -> verify. opts.channel_block
// must be resolved (>= 0) by the caller. Passes named in opts.disable_passes are skipped (and
// logged as skipped). Returns one record per pass.
std::vector<PassRecord> run_pipeline(Graph& g, const CompileOptions& opts);

// The distinct names of the pipeline's passes, in pipeline order (derived from its list): what
// CompileOptions::disable_passes and fault_pass may name.
const std::vector<std::string>& pipeline_pass_names();

// Passes that cannot be disabled: "verify" checks, it does not rewrite (skipping it would only
// hide a broken graph from the planner).
bool pass_is_mandatory(const std::string& name);

}  // namespace updraft
