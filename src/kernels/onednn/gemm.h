// oneDNN's linear and matmul kernels by themselves (onednn/matmul.cpp), even where the
// registry's factory takes the streaming kernel (cpu/linear_stream.h) instead: for benchmarks
// that compare the two (benchmarks/cpp/kernel_throughput.cpp).
#pragma once
#include <memory>

#include "kernels/kernel.h"

namespace updraft::onednn {

std::unique_ptr<Kernel> create_onednn_linear(const KernelContext& ctx);
std::unique_ptr<Kernel> create_onednn_matmul(const KernelContext& ctx);

}  // namespace updraft::onednn
