// The f32 linear that reads its constant weight in place (the linear_wq kernel with f32
// weights, linear_wq.cpp): y = act(x @ w^T + bias + residual) for a symbolic count of rows of
// x, or up to kInPlaceMaxRows static ones (any count with prepack_weights off). A decode step's
// few rows (M <= kStreamMaxRows) stream the weight once at full bandwidth, split over the
// threads; more rows (a prompt) take the broadcast tiles (linear_wq_tiles.h, bcast_dot): x
// transposed once per call, the weight's rows read as stored.
// The same for matmul with a constant 2-d weight stored [K, N] (x @ W: GPT-2's Conv1D), for a
// few static rows only, vectorised over N instead of K, with the weight's rows split over the
// threads (each reads its contiguous block as a few long streams, linear_wq_tiles.h) and their
// partial sums added at the end.
//
// Why: at M <= 4 a linear only has to stream its weight; oneDNN's f32 gemm for such M on an
// AVX2 CPU ("gemm:jit") reads a prepacked copy and, measured in docs/BENCHMARKS.md ("the
// streaming f32 linear for decode"), does not reach the bandwidth two cores give. For more rows
// oneDNN's fast gemm (brgemm) reads a packed copy of the weight, which beside the user's
// parameters doubled an f32 model's weights in memory; the broadcast tiles run level with it
// from the weight as stored at a prompt's tens of rows (docs/BENCHMARKS.md, "Issue 20: prefill
// from the weight's own rows").
//
// What it does not do: more than kInPlaceMaxRows static rows while prepack_weights is on,
// non-constant weights (oneDNN's gemm), other dtypes, batched matmuls,
// small weights (below kStreamMinWeight elements or kStreamMinVector long rows: they sit in
// cache, a packed copy is small), and [K, N] weights with more than
// kStreamMaxRows or symbolic rows. create_linear and create_matmul (onednn/matmul.cpp) ask this
// first.
#pragma once
#include <cstdint>
#include <memory>

#include "kernels/kernel.h"

namespace updraft::cpu {

constexpr int64_t kStreamMaxRows = 4;          // rows of x: the dot tiles' widest group
constexpr int64_t kStreamMinVector = 64;       // the vectorised dim (K, or N for [K, N]): shorter
                                               // and the lane reductions or tails dominate
constexpr int64_t kStreamMinWeight = 1 << 16;  // smaller weights sit in cache: no stream to win
// A linear with more static rows than this takes oneDNN's gemm on its packed copy while
// prepack_weights is on: the broadcast tiles run level with it at 32 rows (the 1B Llama's prompt)
// but BERT-base (128 rows) and ViT-B/16 (197) ran 5-15% slower whole, the gap in the MLP linear
// whose exact GELU our epilogue runs after the tiles where oneDNN fuses it (docs/BENCHMARKS.md,
// "Issue 20: prefill from the weight's own rows"). Symbolic rows (a prompt of any length) and
// prepack_weights=False read the weight in place at every count.
constexpr int64_t kInPlaceMaxRows = 64;

// The kernel for a `linear` or `matmul` node that fits (above), else nullptr.
std::unique_ptr<Kernel> make_inplace_f32(const KernelContext& ctx);

// A `matmul` of two computed operands with up to kStreamMaxRows static rows and symbolic sizes
// (a decode step's q k^T and p v written as matmuls, over a growing KV cache): the same dot
// tiles per batch matrix, every size read from the views, so range plans keep such a graph
// (matmul_rows.cpp); nullptr when the node does not fit.
std::unique_ptr<Kernel> make_matmul_rows_f32(const KernelContext& ctx);

}  // namespace updraft::cpu
