// Pass: quantize_activations (docs/quantization.md, "int8 activations"). Runs only when
// CompileOptions::activation_dtype is int8, after quantize_weights. Every linear_wq over an i8
// weight (weight_dtype="int8", the model's own int8 layers through aten._weight_int8pack_mm,
// or a dequantising module that fold_dequant_linear rewrote) with f32 x and K <= kQuantizeXMaxK,
// and every one over an int4 weight (weight_dtype="int4"), gets quantize_x = true: its kernel
// quantises each row of x to int8 at every call (symmetric, one scale per row) and multiplies it
// by the integer weight with exact int32 sums (per group of 32 for int4; VNNI where the CPU has
// it), instead of widening the weight to f32. Results move from eager's by the rounding of x
// as well as of w (measured in docs/quantization.md).
//
// What it does not do: it converts no weight (an f32 or bf16 linear stays as it is, and
// activation_dtype without int8 or int4 weights changes nothing), and it quantises no other op's input
// (attention, norms, matmul of two activations, convolutions stay f32).
#pragma once
#include "ir/graph.h"

namespace updraft {

// Returns whether the graph changed.
bool quantize_activations(Graph& g);

}  // namespace updraft
