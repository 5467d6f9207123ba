// Pass: fold_dequant_linear. A linear whose weight is a constant stored compactly and widened in
// the graph becomes linear_wq over the compact form, which the kernel widens as it streams it:
//   linear(x, mul(cast(q i8 const [N, K]), s)) -> linear_wq(x, q, s as [N], ...)  (int8, per row)
//   linear(x, cast(w bf16 const [N, K]))       -> linear_wq(x, w, ...)            (bf16)
// where s is a constant f32 scale per row ([N, 1], or reshape of [N]) or for the whole weight
// (one element). This is what a model quantised by `updraft.quantize_weights` (or any module
// that keeps int8 weights and a per-channel scale, dequantising in forward) lowers to. It runs
// before constant_fold, which would otherwise fold the widening into an f32 copy 4x (2x) the
// size of the weight the user chose to store compactly; the rewritten linear keeps its bias and
// takes its other epilogues from fuse_epilogue, as linear does.
//
// What it does not do: a per-column scale (per input channel), a zero point (u8, asymmetric),
// a scaled bf16 weight, a non-f32 x, matmul nodes, conv2d or embeddings: these keep their
// casts, which constant_fold folds like any constant subgraph (one f32 copy in the engine). The
// cast and mul stay for their other users; dce drops them otherwise. Nothing is quantised here:
// the values are the user's (CompileOptions::weight_dtype quantises f32 weights).
#pragma once
#include "ir/graph.h"

namespace updraft {

// Returns whether the graph changed.
bool fold_dequant_linear(Graph& g);

}  // namespace updraft
