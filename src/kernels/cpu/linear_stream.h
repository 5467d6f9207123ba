// The streaming f32 linear: y = act(x @ w^T + bias + residual) for a few rows of x (a decode
// step's M = batch), reading the constant weight [N, K] in place, once per call, split by rows
// of w over the threads (the linear_wq kernel with f32 weights, linear_wq.cpp).
//
// Why: at M <= 4 a linear only has to stream its weight; oneDNN's f32 gemm for such M on an
// AVX2 CPU ("gemm:jit") reads a prepacked copy and, measured in docs/BENCHMARKS.md ("Decode
// linears"), does not reach the bandwidth two cores give. Reading the user's weight in place
// also means the decode graph keeps no packed copy of its own.
//
// What it does not do: symbolic batch dims (a batch may grow past the limit; the runtime-M
// oneDNN kernel serves those), non-constant weights (oneDNN's gemm), other dtypes, and more
// than kStreamMaxRows rows, where re-reading each weight block per 4 rows of x loses to a
// blocked gemm. create_linear (onednn/matmul.cpp) asks this first.
#pragma once
#include <cstdint>
#include <memory>

#include "kernels/kernel.h"

namespace updraft::cpu {

constexpr int64_t kStreamMaxRows = 4;          // rows of x: the dot tiles' widest group
constexpr int64_t kStreamMinK = 64;            // shorter rows: the lane reductions dominate
constexpr int64_t kStreamMinWeight = 1 << 16;  // smaller weights sit in cache: no stream to win

// The kernel for a `linear` node that fits (above), else nullptr.
std::unique_ptr<Kernel> make_stream_linear_f32(const KernelContext& ctx);

}  // namespace updraft::cpu
