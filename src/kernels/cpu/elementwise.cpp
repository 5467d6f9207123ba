// CPU kernel registration for the elementwise family. Each factory picks the f32 or f64
// program evaluator (elementwise_exec.cpp; f64 block ops in elementwise_f64.cpp), the
// integer/bool loops (elementwise_int.cpp) or declines, in which case the runtime runs the
// reference kernel and the plan dump says so (integer clamp).
#include "kernels/cpu/elementwise_internal.h"
#include "ir/op_table.h"
#include "kernels/elementwise_ops.h"

namespace updraft {

void register_cpu_elementwise_kernels(KernelRegistry& r) {
  auto factory = [](const KernelContext& ctx) -> std::unique_ptr<Kernel> {
    if (auto k = cpu_ew::make_f32_kernel(ctx)) return k;
    if (auto k = cpu_ew::make_f64_kernel(ctx)) return k;
    return cpu_ew::make_int_kernel(ctx);
  };
  for (const char* op : ew_kernel_node_ops()) r.add(op, Device::cpu, factory);
  r.add("cast", Device::cpu, cpu_ew::make_cast_kernel);
  r.add("fused_elementwise", Device::cpu, cpu_ew::make_fused_kernel);
}

}  // namespace updraft
