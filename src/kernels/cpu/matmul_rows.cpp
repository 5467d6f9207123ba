// matmul of two computed f32 operands with a few rows and symbolic sizes: a decode step's
// attention written as matmuls (q k^T, then p v: MPT, or any model that does not call sdpa) over
// a KV cache whose length grows by one per step. oneDNN's primitives are built for one size, so
// range plans refused such a graph ("its kernel ... is built for one size") and every step built
// a plan. This kernel reads every size from the views and runs linear_wq's dot tiles
// (linear_wq_tiles.h) per batch matrix: q k^T with k stored [N, K] (transpose_b, as
// fold_transpose_matmul leaves it) on the [N, K] tiles, p v with v stored [K, N] on the [K, N]
// tiles; batches are split over the threads.
//
// What it does not take: static shapes (oneDNN's, as before), M symbolic or above
// kStreamMaxRows (a prompt's rows: oneDNN's blocked gemm), transpose_a, constant operands (the
// streaming linear and oneDNN), epilogues, operands of different ranks.
#include <algorithm>
#include <string>

#include "core/error.h"
#include "ir/ops/params.h"
#include "kernels/cpu/linear_stream.h"
#include "kernels/cpu/linear_wq_tiles.h"
#include "kernels/cpu/strided_copy.h"
#include "kernels/cpu/threads.h"

namespace updraft::cpu {

namespace {

// Whether the kernel takes the node at ctx's shapes; the factory's rule and runs_shapes_of's.
bool rows_matmul_fits(const KernelContext& ctx) {
  const Node& n = ctx.node;
  if (n.op_name() != "matmul" || ctx.attr("transpose_a").b()) return false;
  if (ctx.in_dtype(0) != DType::f32 || ctx.in_dtype(1) != DType::f32 || ctx.out_dtype(0) != DType::f32) return false;
  if (ctx.const_inputs[0] || ctx.const_inputs[1] || n.inputs.size() != 2) return false;
  const Epilogue ep = Epilogue::of(n, 2);
  if (ep.has_bias || ep.has_residual || ep.act) return false;
  const auto &a = ctx.in_shapes[0], &b = ctx.in_shapes[1];
  const size_t r = a.size();
  if (r < 2 || b.size() != r || ctx.out_shapes[0].size() != r) return false;
  for (size_t d = 0; d + 2 < r; ++d)
    if (a[d] != b[d] && a[d] != 1 && b[d] != 1) return false;
  const Shape& ga = n.inputs[0]->type.shape;
  if (!ga[r - 2].is_static() || a[r - 2] < 1 || a[r - 2] > kStreamMaxRows) return false;
  bool symbolic = false;
  for (const Value* v : n.inputs)
    for (const Dim& d : v->type.shape) symbolic = symbolic || !d.is_static();
  return symbolic;
}

class RowsMatmulKernel final : public Kernel {
 public:
  explicit RowsMatmulKernel(const KernelContext& ctx)
      : tiles_(wq::dot_tiles(use_avx512(ctx.options))),
        tb_(ctx.attr("transpose_b").b()),
        budget_(ctx.thread_budget()),
        name_(std::string("cpu_matmul_rows_f32_") + tiles_.isa) {}

  void run(const TensorView* in, TensorView* out, void*) const override {
    const TensorView &a = in[0], &b = in[1];
    TensorView& c = out[0];
    if (c.numel() == 0) return;
    UPDRAFT_CHECK(a.is_contiguous() && b.is_contiguous(), "matmul",
                  "operands must be contiguous here; the plan packs strided inputs");
    const int r = c.ndim;
    const int64_t M = a.sizes[r - 2], K = a.sizes[r - 1], N = c.sizes[r - 1];
    const int64_t batches = c.numel() / (M * N);
    const double bytes = 4.0 * static_cast<double>(b.numel() + a.numel());
    const int nt = threads_for_gemm(2.0 * static_cast<double>(M * N) * K * batches, bytes, budget_);
    const int nb = r - 2;
    parallel_for(batches, nt, [&](int64_t i) {
      int64_t idx[kMaxDims];  // i over c's batch dims
      int64_t rem = i;
      for (int d = nb - 1; d >= 0; --d) idx[d] = rem % c.sizes[d], rem /= c.sizes[d];
      const float* ap = a.ptr<float>() + batch_offset(a, idx, nb);
      const float* bp = b.ptr<float>() + batch_offset(b, idx, nb);
      float* cp = c.ptr<float>() + i * M * N;
      if (K == 0) {
        std::fill(cp, cp + M * N, 0.f);
      } else if (tb_) {
        tiles_.f32(ap, M, K, bp, N, K, K, cp, N);  // b: [N, K] rows
      } else {
        tiles_.f32_kn(ap, M, K, bp, N, N, K, cp, N);  // b: [K, N] rows
      }
    });
  }
  std::string name() const override { return name_; }
  bool runs_shapes_of(const KernelContext& ctx) const override { return rows_matmul_fits(ctx); }

 private:
  const wq::DotTiles& tiles_;
  bool tb_;
  ThreadBudget budget_;
  std::string name_;
};

}  // namespace

std::unique_ptr<Kernel> make_matmul_rows_f32(const KernelContext& ctx) {
  if (!rows_matmul_fits(ctx)) return nullptr;
  return std::make_unique<RowsMatmulKernel>(ctx);
}

}  // namespace updraft::cpu
