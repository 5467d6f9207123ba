// Fast CPU kernels for the compute ops (Device::cpu): oneDNN primitives for conv2d, linear,
// matmul and pooling (sdpa's kernel is the engine's own: kernels/cpu/attention.cpp). One file
// per op family; the shared rules
// (engine, user scratchpad, epilogue post-ops, strided inputs) are in onednn_util.h.
#include "kernels/kernel.h"
#include "kernels/onednn/onednn_util.h"

namespace updraft {

void register_onednn_compute_kernels(KernelRegistry& r) {
  onednn::register_conv(r);
  onednn::register_conv_backward(r);
  onednn::register_matmul(r);
  onednn::register_pool(r);
  onednn::register_layout(r);
  onednn::register_grouped_mm(r);
}

}  // namespace updraft
