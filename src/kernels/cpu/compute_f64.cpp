// The f64 compute kernels' registration (f64_kernels.h). oneDNN 3.2 has no f64 on the CPU, so
// an f64 conv2d / linear / matmul / sdpa runs on the engine's own GEMM (the f64 norms are the
// norm family's, cpu/norm_f64.cpp); f64 pooling runs on the reference kernels (a small share of
// a model's time).
// registry.cpp routes each op's nodes here or to oneDNN / the f32 kernels by dtype.
#include "kernels/cpu/f64_kernels.h"
#include "kernels/kernel.h"

namespace updraft {

void register_cpu_f64_compute_kernels(KernelRegistry& r) {
  r.add("conv2d", Device::cpu, cpu::f64::create_conv2d);
  r.add("linear", Device::cpu, cpu::f64::create_linear);
  r.add("matmul", Device::cpu, cpu::f64::create_matmul);
  r.add("sdpa", Device::cpu, cpu::f64::create_sdpa);
  // Declining sends the node to the reference kernel (KernelRegistry::create).
  for (const char* op : {"max_pool2d", "avg_pool2d", "adaptive_avg_pool2d"})
    r.add(op, Device::cpu, [](const KernelContext&) -> std::unique_ptr<Kernel> { return nullptr; });
}

}  // namespace updraft
