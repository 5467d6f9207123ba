// f64 linear and matmul on the engine's own GEMM (gemm_f64.h), with the fused epilogue.
//
//  - linear: C[M, N] = x[M, K] w^T; x's leading dims fold into M when their strides allow it
//    (any dense x, and a 2-d x of any strides); w is read as B(k, n) = w[n, k]. A constant
//    weight is packed into the micro-kernel's panels once, here in the factory.
//  - matmul: torch.matmul; 1-d operands become [1, K] / [K, 1] (a stride-0 dim), batch dims
//    broadcast through stride 0. When b has no batch dims and a's leading dims fold into M, the
//    problem is one GEMM as for linear (and a constant 2-d b is packed once). transpose_a /
//    transpose_b read that operand's last two dims swapped (its strides swapped: no copy).
// Strided operands are read through their strides while packing: no staging copy. A strided x
// whose leading dims do not fold, and a strided residual, are copied dense first (cpu::Packed;
// only graph inputs arrive strided).
//
// Shape-generic: run() reads every size from the views; the thread count is fixed from the
// work of the shapes the kernel was built for, and the scratch depends only on that count.
#include <algorithm>
#include <optional>
#include <string>

#include "core/error.h"
#include "ir/ops/params.h"
#include "kernels/cpu/f64_kernels.h"
#include "kernels/cpu/gemm_f64.h"
#include "kernels/cpu/strided_copy.h"
#include "kernels/cpu/threads.h"

namespace updraft::cpu::f64 {

TileEpilogue epilogue_attrs(const KernelContext& ctx, int num_main, EpilogueInputs* ins) {
  TileEpilogue ep;
  ep.attrs = Epilogue::of(ctx.node, num_main);
  ins->bias = ep.attrs.bias_input;
  ins->residual = ep.attrs.residual_input;
  return ep;
}

bool fold_rows(const TensorView& v, int64_t* rs) {
  // The leading dims [0, ndim - 1) as one row index: each non-unit dim's stride must be the
  // next inner non-unit dim's stride times its size.
  *rs = 0;
  int64_t expect = -1;
  for (int d = v.ndim - 2; d >= 0; --d) {
    if (v.sizes[d] == 1) continue;
    if (expect < 0) *rs = v.strides[d];
    else if (v.strides[d] != expect) return false;
    expect = v.strides[d] * v.sizes[d];
  }
  return true;
}

size_t gemm_scratch_bytes(const MicroKernel& uk, int threads) {
  return static_cast<size_t>(threads) * gemm_scratch_doubles(uk) * sizeof(double);
}

namespace {

int64_t numel(const std::vector<int64_t>& s) {
  int64_t n = 1;
  for (int64_t x : s) n *= x;
  return n;
}

class GemmF64Kernel final : public Kernel {
 public:
  void run(const TensorView* in, TensorView* out, void* scratch) const override {
    ScopedThreads scoped(threads_);
    const TensorView& y = out[0];
    Problem p;
    p.c = y.ptr<double>();
    p.ep = ep_;
    if (ins_.bias >= 0) {
      p.ep.bias = in[ins_.bias].ptr<const double>();
      p.ep.bias_stride = in[ins_.bias].strides[0];
    }
    std::optional<Packed> res_copy, a_copy;
    if (ins_.residual >= 0) {
      const TensorView* r = &in[ins_.residual];
      if (!r->is_contiguous()) r = &res_copy.emplace(*r, 1).view();
      p.ep.res = r->ptr<const double>();
    }
    if (linear_) setup_linear(in, y, p, a_copy);
    else setup_matmul(in, y, p, a_copy);
    if (p.ep.res) p.ep.res_rs = p.ldc, p.ep.res_cs = 1;
    gemm(*uk_, p, threads_, static_cast<double*>(scratch));
  }
  size_t scratch_bytes() const override { return gemm_scratch_bytes(*uk_, threads_); }
  std::string name() const override { return name_; }
  bool runs_shapes_of(const KernelContext& ctx) const override { return true; }

  static std::unique_ptr<Kernel> create(const KernelContext& ctx, bool linear);

 private:
  const MicroKernel* uk_ = nullptr;
  bool linear_ = true, ta_ = false, tb_ = false;
  int threads_ = 1;
  TileEpilogue ep_;
  EpilogueInputs ins_;
  std::optional<PackedMatrix> b_packed_;  // the constant weight (linear) or 2-d b (matmul)
  std::string name_;

  void setup_linear(const TensorView* in, const TensorView& y, Problem& p, std::optional<Packed>& a_copy) const {
    const TensorView* x = &in[0];
    const TensorView& w = in[1];
    p.N = w.sizes[0];
    p.K = w.sizes[1];
    p.M = p.K ? x->numel() / p.K : numel_rows(*x);
    int64_t rs = 0;
    if (!fold_rows(*x, &rs)) {
      x = &a_copy.emplace(*x, 1).view();
      rs = p.K;
    }
    p.a = {x->ptr<const double>(), rs, x->ndim ? x->strides[x->ndim - 1] : 1};
    if (b_packed_) p.b_packed = &*b_packed_;
    else p.b = {w.ptr<const double>(), w.strides[1], w.strides[0]};
    p.ldc = p.N;
  }

  static int64_t numel_rows(const TensorView& x) {
    int64_t m = 1;
    for (int d = 0; d + 1 < x.ndim; ++d) m *= x.sizes[d];
    return m;
  }

  void setup_matmul(const TensorView* in, const TensorView& y, Problem& p, std::optional<Packed>& a_copy) const {
    TensorView a = in[0], b = in[1];
    if (ta_) a = last_two_swapped(a);
    if (tb_) b = last_two_swapped(b);
    const bool a1 = a.ndim == 1, b1 = b.ndim == 1;
    // Promote 1-d operands: a [K] -> [1, K], b [K] -> [K, 1], the new dim of stride 0.
    if (a1) a.sizes[1] = a.sizes[0], a.strides[1] = a.strides[0], a.sizes[0] = 1, a.strides[0] = 0, a.ndim = 2;
    if (b1) b.sizes[1] = 1, b.strides[1] = 0, b.ndim = 2;
    p.M = a.sizes[a.ndim - 2];
    p.K = a.sizes[a.ndim - 1];
    p.N = b.sizes[b.ndim - 1];
    p.ldc = p.N;
    int64_t rs = 0;
    if (b.ndim == 2 && a.ndim > 2 && fold_rows(a, &rs)) {  // one GEMM over a's rows
      p.M = numel_rows(a);
      p.a = {a.ptr<const double>(), rs, a.strides[a.ndim - 1]};
      if (b_packed_) p.b_packed = &*b_packed_;
      else p.b = {b.ptr<const double>(), b.strides[0], b.strides[1]};
      return;
    }
    p.a = {a.ptr<const double>(), a.strides[a.ndim - 2], a.strides[a.ndim - 1]};
    if (b_packed_) p.b_packed = &*b_packed_;
    else p.b = {b.ptr<const double>(), b.strides[b.ndim - 2], b.strides[b.ndim - 1]};
    const int nb = std::max(a.ndim, b.ndim) - 2;
    UPDRAFT_CHECK(nb <= 8, "kernels", "f64 matmul: more than 8 batch dims");
    p.batch.nd = nb;
    int64_t c_stride = p.M * p.N;
    for (int d = nb - 1; d >= 0; --d) {
      const int da = d - (nb - (a.ndim - 2)), db = d - (nb - (b.ndim - 2));
      const int64_t sa = da >= 0 ? a.sizes[da] : 1, sb = db >= 0 ? b.sizes[db] : 1;
      p.batch.size[d] = std::max(sa, sb);
      p.batch.a[d] = sa == 1 ? 0 : a.strides[da];
      p.batch.b[d] = sb == 1 ? 0 : b.strides[db];
      p.batch.c[d] = p.batch.res[d] = c_stride;
      c_stride *= p.batch.size[d];
    }
    (void)a_copy;
  }
};

std::unique_ptr<Kernel> GemmF64Kernel::create(const KernelContext& ctx, bool linear) {
  auto k = std::make_unique<GemmF64Kernel>();
  k->uk_ = &pick_micro(ctx.options);
  k->linear_ = linear;
  k->ep_ = epilogue_attrs(ctx, 2, &k->ins_);
  k->ta_ = !linear && ctx.attr("transpose_a").b();
  k->tb_ = !linear && ctx.attr("transpose_b").b();
  const auto &xs = ctx.in_shapes[0], &ws = ctx.in_shapes[1];
  const int64_t K = linear ? ws[1] : k->ta_ ? xs[xs.size() - 2] : xs.back();
  const int64_t c = numel(ctx.out_shapes[0]);
  k->threads_ = threads_for_gemm(2.0 * c * K, 8.0 * (numel(xs) + numel(ws) + c), ctx.thread_budget());
  const Tensor* w = ctx.const_inputs[1];
  // Pack the constant once: linear's [N, K] weight as B = w^T, or matmul's 2-d b as it is.
  if (w && linear) k->b_packed_ = pack_whole(*k->uk_, false, ws[1], ws[0], {w->ptr<const double>(), 1, ws[1]});
  if (w && !linear && ws.size() == 2)  // b(k, n): w[k, n], or w[n, k] with transpose_b
    k->b_packed_ = k->tb_ ? pack_whole(*k->uk_, false, ws[1], ws[0], {w->ptr<const double>(), 1, ws[1]})
                          : pack_whole(*k->uk_, false, ws[0], ws[1], {w->ptr<const double>(), ws[1], 1});
  k->name_ = std::string("cpu_f64_") + (linear ? "linear" : "matmul") + ":" + k->uk_->isa +
             (k->b_packed_ ? ":prepacked" : "") + (k->threads_ == 1 ? ":1thread" : "");
  return k;
}

}  // namespace

std::unique_ptr<Kernel> create_linear(const KernelContext& ctx) { return GemmF64Kernel::create(ctx, true); }
std::unique_ptr<Kernel> create_matmul(const KernelContext& ctx) { return GemmF64Kernel::create(ctx, false); }

}  // namespace updraft::cpu::f64
