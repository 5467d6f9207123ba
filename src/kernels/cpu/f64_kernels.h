// The f64 compute kernels (Device::cpu) on the engine's own GEMM: their factories, and what
// they share. registry.cpp sends an op's f64 nodes here and its f32 nodes to oneDNN.
#pragma once
#include <memory>

#include "core/tensor.h"
#include "kernels/cpu/gemm_f64.h"
#include "kernels/kernel.h"

namespace updraft::cpu::f64 {

// Where an epilogue's bias and residual are among a node's inputs (-1: absent).
struct EpilogueInputs {
  int bias = -1, residual = -1;
};
// The epilogue's activation from the node's attributes; `num_main` inputs precede the bias.
TileEpilogue epilogue_attrs(const KernelContext& ctx, int num_main, EpilogueInputs* ins);
// v's leading dims [0, ndim - 1) as one row index of stride *rs; false when they do not fold.
bool fold_rows(const TensorView& v, int64_t* rs);
size_t gemm_scratch_bytes(const MicroKernel& uk, int threads);

std::unique_ptr<Kernel> create_linear(const KernelContext& ctx);  // matmul_f64.cpp
std::unique_ptr<Kernel> create_matmul(const KernelContext& ctx);
std::unique_ptr<Kernel> create_conv2d(const KernelContext& ctx);  // conv_f64.cpp
std::unique_ptr<Kernel> create_sdpa(const KernelContext& ctx);    // sdpa_f64.cpp

}  // namespace updraft::cpu::f64
