// The streaming f32 linear: y = act(x @ w^T + bias + residual) for a few rows of x (a decode
// step's M = batch), reading the constant weight in place, once per call, split over the
// threads (the linear_wq kernel with f32 weights, linear_wq.cpp). The same for matmul with a
// constant 2-d weight stored [K, N] (x @ W: GPT-2's Conv1D), vectorised over N instead of K,
// with the weight's rows split over the threads (each reads its contiguous block as a few long
// streams, linear_wq_tiles.h) and their partial sums added at the end.
//
// Why: at M <= 4 a linear only has to stream its weight; oneDNN's f32 gemm for such M on an
// AVX2 CPU ("gemm:jit") reads a prepacked copy and, measured in docs/BENCHMARKS.md ("the
// streaming f32 linear for decode"), does not reach the bandwidth two cores give. Reading the
// user's weight in place also means the decode graph keeps no packed copy of its own.
//
// What it does not do: symbolic batch dims (a batch may grow past the limit; the runtime-M
// oneDNN kernel serves those), non-constant weights (oneDNN's gemm), other dtypes, batched
// matmuls, and more than kStreamMaxRows rows, where re-reading each weight block per 4 rows of
// x loses to a blocked gemm. create_linear and create_matmul (onednn/matmul.cpp) ask this first.
#pragma once
#include <cstdint>
#include <memory>

#include "kernels/kernel.h"

namespace updraft::cpu {

constexpr int64_t kStreamMaxRows = 4;          // rows of x: the dot tiles' widest group
constexpr int64_t kStreamMinVector = 64;       // the vectorised dim (K, or N for [K, N]): shorter
                                               // and the lane reductions or tails dominate
constexpr int64_t kStreamMinWeight = 1 << 16;  // smaller weights sit in cache: no stream to win

// The kernel for a `linear` or `matmul` node that fits (above), else nullptr.
std::unique_ptr<Kernel> make_stream_f32(const KernelContext& ctx);

// A `matmul` of two computed operands with up to kStreamMaxRows static rows and symbolic sizes
// (a decode step's q k^T and p v written as matmuls, over a growing KV cache): the same dot
// tiles per batch matrix, every size read from the views, so range plans keep such a graph
// (matmul_rows.cpp); nullptr when the node does not fit.
std::unique_ptr<Kernel> make_matmul_rows_f32(const KernelContext& ctx);

}  // namespace updraft::cpu
