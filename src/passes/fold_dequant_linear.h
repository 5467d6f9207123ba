// Pass: fold_dequant_linear. A linear whose weight is a constant stored compactly and widened in
// the graph becomes linear_wq over the compact form, which the kernel widens as it streams it:
//   linear(x, mul(cast(q i8 const [N, K]), s)) -> linear_wq(x, q, s as [N], ...)  (int8, per row)
//   linear(x, cast(w bf16 const [N, K]))       -> linear_wq(x, w, ...)            (bf16)
// where s is a constant f32 scale per row ([N, 1], or reshape of [N]) or for the whole weight
// (one element). The bf16 layers of `updraft.quantize_weights` lower to the second form, and any
// module that keeps int8 weights with a per-channel scale and dequantises them in forward to the
// first (quantize_weights' own int8 layers call aten._weight_int8pack_mm, which the front end
// lowers to linear_wq directly). It runs before constant_fold, which would otherwise fold a bf16
// widening into an f32 copy twice the size of the weight the user chose to store compactly (an
// int8 one, 4x, is over the folder's growth bound and would stay a cast at every call). The
// rewritten linear keeps its bias and takes its other epilogues from fuse_epilogue, as linear does.
//
// What it does not do: a per-column scale (per input channel), a zero point (u8, asymmetric),
// a scaled bf16 weight, a runtime scale, a non-f32 x, matmul nodes, conv2d or embeddings: these
// keep their casts, which constant_fold folds within its size bound like any constant subgraph.
// The cast and mul it replaces stay for their other users; otherwise it drops them itself, before
// constant_fold could fold them for nobody. Nothing is quantised here: the values are the user's
// (CompileOptions::weight_dtype quantises f32 weights).
#pragma once
#include "ir/graph.h"

namespace updraft {

// Returns whether the graph changed.
bool fold_dequant_linear(Graph& g);

}  // namespace updraft
