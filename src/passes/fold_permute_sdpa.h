// Pass: fold_permute_sdpa. A transformer's attention splits a projection [.., S, H * E] into
// heads by a view [.., S, H, E] and a transpose to [.., H, S, E] before sdpa, and transposes the
// result back before the output projection. Each transpose is a permute, which the engine
// copies: four copies of a layer's activations per attention (Swin-T: 48 of its 85 permute
// steps). The pass folds a float32 sdpa's q, k, v and result permutes into its `seq_first`
// attribute (SdpaLayout, src/ir/ops/params.h): sdpa then reads the permute's input and writes
// the layout its readers wanted, as strided views, and the copies are never made.
// Folded: a permute that swaps dims -3 and -2 and keeps the others in place (transpose(1, 2) of
// a 4-d [B, S, H, E]); for the result, only when every reader of it is such a permute (they
// then read sdpa's result directly) and it is not a graph output. Not folded: other dtypes (the
// f64 kernel reads dense operands), permutes that move other dims, an operand already in
// seq_first. A with_lse log-sum-exp keeps its [.., H, L] shape in any layout. A permute with other readers stays for them (dce drops it when none are left).
// Run after fold_gqa_sdpa, which views q, k and v by their [.., H, S, E] shapes.
#pragma once
#include "ir/graph.h"

namespace updraft {

// Returns whether the graph changed.
bool fold_permute_sdpa(Graph& g);

}  // namespace updraft
