// Pass: quantize_weights (docs/quantization.md). Runs only when CompileOptions::weight_dtype is
// not f32. Each `linear` (what nn.Linear and x @ W.T lower to) whose weight is a constant f32
// [N, K] of at least kMinQuantizedWeight elements becomes `linear_wq` over the weight stored as
// i8 with a per-row (output channel) scale (int8: quantize_rows, symmetric, max|w| / 127), as
// int4 with a scale per group of 32 values of a row (int4: quantize_int4, symmetric, max|g| / 7;
// a weight whose K is not a multiple of 64 is stored int8 instead) or as bf16 (to_bf16),
// keeping its epilogue (bias, residual, activation) and origins. The new
// weight is folded at once through those ops (Graph::record_fold), so the compile cache refits
// it for another checkpoint; a weight that several linears share is converted once.
//
// What it does not do: smaller weights, non-constant weights, f64 linears, `matmul` nodes (a
// constant right operand of torch.matmul; nn.Linear never lowers to one), conv2d, embeddings
// and attention stay f32. It quantizes no activation. The f32 constant stays in the graph only
// while another node still reads it (an embedding tied to the output projection, say); dce
// drops it otherwise, so the engine holds no f32 copy of a converted weight.
#pragma once
#include <cstdint>

#include "ir/graph.h"
#include "passes/options.h"

namespace updraft {

// 64K elements (256 KB as f32): below it a weight fits in a core's L2 cache, reading it is not
// what a step waits for, and oneDNN's f32 kernel is the faster one.
constexpr int64_t kMinQuantizedWeight = int64_t{1} << 16;

// Returns whether the graph changed. `dtype` f32 changes nothing.
bool quantize_weights(Graph& g, WeightDType dtype);

// Replaces `linear` (x, w, [bias], [residual]) by linear_wq(x, w_low, [scale], [bias],
// [residual]) with its attributes and origins, placed where the linear was, and removes the
// linear. `scale` is null for a bf16 w_low. `pass` names the caller in the type check's
// message. Shared by quantize_weights and fold_dequant_linear (passes/fold_dequant_linear.h).
Node* replace_with_linear_wq(Graph& g, Node* linear, Value* w_low, Value* scale, const char* pass);

}  // namespace updraft
