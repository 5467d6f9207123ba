// The fast linear_wq kernel (docs/quantization.md): y = act(x @ (w * scale)^T + bias + residual)
// with an i8 or bf16 weight [N, K] read in place (no prepacked copy: the stored low-precision
// weight is the only copy the engine holds), widened to f32 in registers, f32 accumulation.
//
// Work split: the N rows of w in blocks of kBlockRows, the blocks spread over the threads (each
// thread a contiguous range, so each weight byte is read by one thread, once per call). Inside a
// block, for every group of up to 4 rows of x, the dot tiles (linear_wq_tiles.h) run over the
// block's rows of w; the block (kBlockRows x K, at most ~45 KB as i8 at K = 2816) stays in L1/L2
// between groups. With more than kWidenAbove rows of x (prefill) the block is widened to f32
// once into the thread's scratch and the f32 tiles run on it, so the widening is paid once per
// block rather than once per group of 4 rows. Then the epilogue over the block's outputs:
// per-row scale, bias, residual, activation (its elementwise formula, ew_ref).
//
// Threads: the per-kernel rule (threads.h) on max(flops, weight bytes * kFlopsPerByte), decided
// at each call from its M, so one kernel serves every shape of a compile (decode and prefill).
#include <omp.h>

#include <algorithm>
#include <string>

#include "core/error.h"
#include "ir/ops/params.h"
#include "kernels/cpu/linear_wq_tiles.h"
#include "kernels/cpu/threads.h"
#include "kernels/elementwise_ops.h"
#include "kernels/kernel.h"

namespace updraft {

namespace {

constexpr int64_t kBlockRows = 16;  // rows of w per block: a multiple of every tile's NT
constexpr int64_t kWidenAbove = 4;  // more rows of x than this: widen the block to f32 first

class LinearWqKernel final : public Kernel {
 public:
  LinearWqKernel(const KernelContext& ctx)
      : ep_(Epilogue::of(ctx.node, ctx.node.attr("has_weight_scale").b() ? 3 : 2)),
        scaled_(ctx.node.attr("has_weight_scale").b()),
        wdtype_(ctx.in_dtype(1)),
        tiles_(cpu::wq::dot_tiles(use_avx512(ctx.options))),
        budget_(ctx.thread_budget()),
        max_threads_(ctx.num_threads > 0 ? ctx.num_threads : omp_get_max_threads()),
        K_(ctx.in_shapes[1][1]) {}

  void run(const TensorView* in, TensorView* out, void* scratch) const override {
    const TensorView &x = in[0], &w = in[1];
    TensorView& y = out[0];
    const int64_t N = w.sizes[0], K = K_, M = K ? x.numel() / K : 0;
    if (y.numel() == 0) return;
    UPDRAFT_CHECK(x.is_contiguous() && w.is_contiguous(), "linear_wq", "x and w must be contiguous here; the plan packs strided inputs");
    const double wbytes = static_cast<double>(N) * K * dtype_size(wdtype_);
    int nt = cpu::threads_for_gemm(2.0 * M * N * K, wbytes, budget_);
    nt = std::max(1, std::min(nt, max_threads_));
    const int64_t blocks = (N + kBlockRows - 1) / kBlockRows;
    nt = static_cast<int>(std::min<int64_t>(nt, blocks));
    const bool widen = M > kWidenAbove;
    cpu::parallel_for(nt, nt, [&](int64_t t) {
      const int64_t b0 = blocks * t / nt, b1 = blocks * (t + 1) / nt;
      float* wbuf = widen ? static_cast<float*>(scratch) + t * kBlockRows * K : nullptr;
      for (int64_t b = b0; b < b1; ++b) run_block(in, y, M, N, K, b * kBlockRows, std::min(N, (b + 1) * kBlockRows), wbuf);
    });
  }

  size_t scratch_bytes() const override {
    return static_cast<size_t>(max_threads_) * kBlockRows * static_cast<size_t>(K_) * sizeof(float);
  }
  std::string name() const override {
    return std::string("cpu_linear_wq_") + (wdtype_ == DType::i8 ? "i8" : "bf16") + "_" + tiles_.isa;
  }
  // Every size is read from the views at each call (M decides threads and widening there).
  bool runs_shapes_of(const KernelContext&) const override { return true; }

 private:
  void run_block(const TensorView* in, TensorView& y, int64_t M, int64_t N, int64_t K, int64_t n0, int64_t n1,
                 float* wbuf) const {
    const float* x = in[0].ptr<const float>();
    const size_t esize = dtype_size(wdtype_);
    const void* w = static_cast<const char*>(in[1].data) + static_cast<size_t>(n0) * K * esize;
    float* yb = y.ptr<float>() + n0;
    const int64_t nb = n1 - n0;
    if (wbuf) {
      (wdtype_ == DType::i8 ? tiles_.widen_i8 : tiles_.widen_bf16)(w, nb * K, wbuf);
      tiles_.f32(x, M, K, wbuf, nb, K, K, yb, N);
    } else {
      (wdtype_ == DType::i8 ? tiles_.i8 : tiles_.bf16)(x, M, K, w, nb, K, K, yb, N);
    }
    const float* scale = scaled_ ? in[2].ptr<const float>() + n0 : nullptr;
    const float* bias = ep_.has_bias ? in[ep_.bias_input].ptr<const float>() + n0 : nullptr;
    const float* res = ep_.has_residual ? in[ep_.residual_input].ptr<const float>() + n0 : nullptr;
    if (!scale && !bias && !res && !ep_.act) return;
    for (int64_t m = 0; m < M; ++m) {
      float* row = yb + m * N;
      for (int64_t j = 0; j < nb; ++j) {
        float v = row[j];
        if (scale) v *= scale[j];
        if (bias) v += bias[j];
        if (res) v += res[m * N + j];
        if (ep_.act) v = ew_ref<float>(*ep_.act, v, static_cast<float>(ep_.alpha), static_cast<float>(ep_.beta));
        row[j] = v;
      }
    }
  }

  Epilogue ep_;
  bool scaled_;
  DType wdtype_;
  const cpu::wq::DotTiles& tiles_;
  cpu::ThreadBudget budget_;
  int max_threads_;
  int64_t K_;
};

}  // namespace

void register_cpu_quantized_kernels(KernelRegistry& r) {
  r.add("linear_wq", Device::cpu, [](const KernelContext& ctx) -> std::unique_ptr<Kernel> {
    if (ctx.in_dtype(0) != DType::f32 || ctx.out_dtype(0) != DType::f32) return nullptr;
    if (ctx.in_dtype(1) != DType::i8 && ctx.in_dtype(1) != DType::bf16) return nullptr;
    return std::make_unique<LinearWqKernel>(ctx);
  });
}

}  // namespace updraft
