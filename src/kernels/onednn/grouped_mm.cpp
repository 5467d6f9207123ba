// grouped_mm on oneDNN's sgemm: one row-major gemm call per group of rows (kernels/
// grouped_rows.h), each with that group's M, read from offs at run time. sgemm takes any M
// per call with no primitive to create, which suits group sizes that change every call (the
// tokens an expert receives); the cost is that the expert weights are not prepacked. The
// output is zeroed first (rows past the last offset stay 0, as in transformers' fallback).
// Strided operands are packed dense first (graph inputs only; intermediates are dense).
#include <cstring>

#include "kernels/cpu/strided_copy.h"
#include "kernels/grouped_rows.h"
#include "kernels/onednn/onednn_util.h"

namespace updraft::onednn {

namespace {

std::unique_ptr<Kernel> make_grouped_mm(const KernelContext& ctx) {
  if (ctx.in_dtype(0) != DType::f32) return nullptr;
  bool tw = ctx.node.attr("transposed_w").b();
  const cpu::ThreadBudget budget = ctx.thread_budget();
  const int requested = budget.requested;
  return make_generic_kernel("onednn_grouped_mm", [tw, requested, budget](const TensorView* in, TensorView* out) {
    UPDRAFT_CHECK(out[0].is_contiguous(), "grouped_mm", "the CPU kernel writes a contiguous output only");
    cpu::Packed xp(in[0], requested), wp(in[1], requested);
    const float* x = xp.ptr<float>();
    const float* w = wp.ptr<float>();
    float* y = out[0].ptr<float>();
    int64_t S = in[0].sizes[0], K = in[0].sizes[1], N = out[0].sizes[1];
    if (S > 0 && N > 0) std::memset(y, 0, sizeof(float) * S * N);
    if (K == 0) return;
    for_each_group(in[2], S, [&](int64_t e, int64_t lo, int64_t hi) {
      int64_t M = hi - lo;
      cpu::ScopedThreads threads(cpu::threads_for_gemm(2.0 * M * N * K, 4.0 * K * N, budget));
      const float* we = w + e * K * N;
      // Row-major: C[M, N] = A[M, K] B, B = w[e] [K, N] (ldb N) or w[e]^T stored [N, K] (ldb K).
      dnnl_status_t st = dnnl_sgemm('N', tw ? 'T' : 'N', M, N, K, 1.0f, x + lo * K, K, we, tw ? K : N, 0.0f,
                                    y + lo * N, N);
      UPDRAFT_CHECK(st == dnnl_success, "grouped_mm", "oneDNN sgemm failed (status " + std::to_string(st) + ")");
    });
  });
}

}  // namespace

void register_grouped_mm(KernelRegistry& r) { r.add("grouped_mm", Device::cpu, make_grouped_mm); }

}  // namespace updraft::onednn
