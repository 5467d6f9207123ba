// Pass: fold_gqa_sdpa. Grouped-query attention (G key/value heads shared by R query heads each)
// reaches the engine as sdpa over k and v repeated to all H = G * R heads:
//   %k = reshape(expand(%x, [.., G, R, S, E]), [.., H, S, E])   with %x: [.., G, 1, S, E]
// (transformers' repeat_kv), and the expand is materialised: on every decode step it copies
// each layer's whole KV cache R times. The pass makes sdpa read %x itself:
// - one query row (L == 1, a decode step) and no is_causal: the R query heads of a group
//   become R rows of one attention over that group's k and v, q [.., G, R, E]; the kernel
//   then packs each group's k once instead of R times;
// - otherwise: q is viewed as [.., G, R, L, E] and k, v as [.., G, 1, S, E], which sdpa
//   broadcasts over R.
// A mask that is the same for every head (head dim 1 or absent) or one per head (head dim H)
// is viewed to match; the result is reshaped back to [.., H, L, Ev] (and a with_lse
// log-sum-exp to [.., H, L]). Only reshapes are added (views, no copies).
// Not folded: k and v repeated by different factors or from different batch shapes, a repeat
// that is not of dim -3 of a 5-d view, a per-head mask with another head count, a repeat read
// by other nodes too (the expand stays for them; sdpa still stops reading it).
#pragma once
#include "ir/graph.h"

namespace updraft {

// Returns whether the graph changed.
bool fold_gqa_sdpa(Graph& g);

}  // namespace updraft
