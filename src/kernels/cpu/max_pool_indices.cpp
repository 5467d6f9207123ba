// max_pool2d_indices and max_pool2d_backward, f32 and f64: the reference (one thread) and the
// CPU kernel (planes split between threads) run the same loops, kernels/max_pool_indices.h,
// which define the op as ATen's CPU kernel does. Strided graph inputs are packed first.
#include "kernels/cpu/reduce_common.h"
#include "kernels/cpu/strided_copy.h"
#include "kernels/kernel.h"
#include "kernels/max_pool_indices.h"

namespace updraft {
namespace {

KernelFactory pool_factory(Device d) {
  return [d](const KernelContext& ctx) -> std::unique_ptr<Kernel> {
    const DType dt = ctx.in_dtype(0);
    if (dt != DType::f32 && dt != DType::f64) return nullptr;
    const PoolWindow win = PoolWindow::of(ctx.node, true);
    const int threads = d == Device::ref ? 1 : cpu::threads_for(numel_of(ctx.in_shapes[0]), ctx.num_threads);
    const std::string name = std::string(d == Device::ref ? "ref_" : "cpu_") + dtype_name(dt) + "_max_pool2d_indices";
    return make_kernel(name, [=](const TensorView* in, TensorView* out) {
      cpu::Packed x(in[0], threads);
      if (dt == DType::f32) max_pool_indices<float>(x.view(), out[0], out[1], win, threads);
      else max_pool_indices<double>(x.view(), out[0], out[1], win, threads);
    });
  };
}

KernelFactory backward_factory(Device d) {
  return [d](const KernelContext& ctx) -> std::unique_ptr<Kernel> {
    const DType dt = ctx.in_dtype(0);
    if (dt != DType::f32 && dt != DType::f64) return nullptr;
    const int threads = d == Device::ref ? 1 : cpu::threads_for(numel_of(ctx.out_shapes[0]), ctx.num_threads);
    const std::string name = std::string(d == Device::ref ? "ref_" : "cpu_") + dtype_name(dt) + "_max_pool2d_backward";
    return make_kernel(name, [=](const TensorView* in, TensorView* out) {
      cpu::Packed dy(in[0], threads), idx(in[1], threads);
      if (dt == DType::f32) max_pool_backward<float>(dy.view(), idx.view(), out[0], threads);
      else max_pool_backward<double>(dy.view(), idx.view(), out[0], threads);
    });
  };
}

}  // namespace

void register_max_pool_indices_kernels(KernelRegistry& r) {
  for (Device d : {Device::ref, Device::cpu}) {
    r.add("max_pool2d_indices", d, pool_factory(d));
    r.add("max_pool2d_backward", d, backward_factory(d));
  }
}

}  // namespace updraft
