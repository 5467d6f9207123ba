// f64 sdpa: softmax(q k^T * scale + mask) v, as two GEMMs (gemm_f64.h) around a softmax.
//
// Per batch element (the broadcast batch dims of q, k, v): scores [L, S] = q k^T in the
// thread's scratch (k read transposed through its strides, no copy), then per row: times the
// scale, causal (key s > query l gets -inf) or mask (bool: false adds -inf; f64: added), minus
// the row max, exp, and the row sum; then y = p v, each row divided by its sum. A row whose
// scores are all -inf (every key masked) is shifted by 0, so its weights are exp(-inf) = 0 and
// its output is 0, as PyTorch's CPU sdpa gives (and the reference kernel); with_lse writes each
// row's log-sum-exp (0 for such a row, as torch's flash kernel). A NaN score is left
// out of the max (std::max keeps the first operand) and propagates through its exp, as in the
// reference.
//
// Threads: batch elements over the threads (each GEMM on one thread) when there are enough of
// them, else one element at a time with the GEMMs threaded.
#include <cmath>
#include <limits>
#include <string>

#include "core/error.h"
#include "ir/ops/params.h"
#include "kernels/cpu/f64_kernels.h"
#include "kernels/cpu/strided_copy.h"
#include "kernels/cpu/threads.h"

namespace updraft::cpu::f64 {

namespace {

int64_t round8(int64_t n) { return (n + 7) / 8 * 8; }

class SdpaF64Kernel final : public Kernel {
 public:
  void run(const TensorView* in, TensorView* out, void* scratch) const override;
  size_t scratch_bytes() const override {
    return static_cast<size_t>(threads_) * (round8(L_ * S_) + gemm_scratch_doubles(*uk_)) * sizeof(double);
  }
  std::string name() const override { return name_; }
  static std::unique_ptr<Kernel> create(const KernelContext& ctx);

 private:
  const MicroKernel* uk_ = nullptr;
  int threads_ = 1;
  bool causal_ = false, has_mask_ = false, with_lse_ = false;
  double scale_ = 0;
  int64_t L_ = 0, S_ = 0;
  std::string name_;
};

// Strides of `v`'s dims aligned to the right of an `nd`-dim shape (0 where v has no such dim
// or it has size 1: broadcast).
void aligned_strides(const TensorView& v, int nd, int64_t* out) {
  for (int d = 0; d < nd; ++d) {
    const int dv = d - (nd - v.ndim);
    out[d] = dv >= 0 && v.sizes[dv] != 1 ? v.strides[dv] : 0;
  }
}

void SdpaF64Kernel::run(const TensorView* in, TensorView* out, void* scratch) const {
  ScopedThreads scoped(threads_);
  const TensorView &q = in[0], &k = in[1], &v = in[2], &y = out[0];
  const int nb = y.ndim - 2;
  const int64_t L = q.sizes[q.ndim - 2], E = q.sizes[q.ndim - 1], S = k.sizes[k.ndim - 2], Ev = v.sizes[v.ndim - 1];
  const double scale = scale_ != 0 ? scale_ : 1.0 / std::sqrt(static_cast<double>(E));
  int64_t batches = 1;
  for (int d = 0; d < nb; ++d) batches *= y.sizes[d];
  // Batch strides of q, k, v over the output's batch dims; the mask's over [batch.., L, S].
  int64_t qs[kMaxDims + 2], ks[kMaxDims + 2], vs[kMaxDims + 2], ms[kMaxDims + 2] = {};
  TensorView qb = q, kb = k, vb = v;
  qb.ndim -= 2, kb.ndim -= 2, vb.ndim -= 2;
  aligned_strides(qb, nb, qs);
  aligned_strides(kb, nb, ks);
  aligned_strides(vb, nb, vs);
  const TensorView* mask = has_mask_ ? &in[3] : nullptr;
  if (mask) aligned_strides(*mask, nb + 2, ms);
  const bool bool_mask = mask && mask->dtype == DType::boolean;
  double* lse = with_lse_ ? out[1].ptr<double>() : nullptr;  // [batch..., L], dense
  const int64_t per = round8(L * S) + gemm_scratch_doubles(*uk_);
  constexpr double kNegInf = -std::numeric_limits<double>::infinity();

  auto one = [&](int64_t b, int slot, int gemm_threads) {
    double* sc = static_cast<double*>(scratch) + slot * per;
    double* gs = sc + round8(L * S);
    int64_t qo = 0, ko = 0, vo = 0, mo = 0, rem = b;
    for (int d = nb - 1; d >= 0; --d) {
      const int64_t idx = rem % y.sizes[d];
      rem /= y.sizes[d];
      qo += idx * qs[d], ko += idx * ks[d], vo += idx * vs[d], mo += idx * ms[d];
    }
    Problem p;
    p.M = L, p.N = S, p.K = E;
    p.a = {q.ptr<const double>() + qo, q.strides[q.ndim - 2], q.strides[q.ndim - 1]};
    p.b = {k.ptr<const double>() + ko, k.strides[k.ndim - 1], k.strides[k.ndim - 2]};
    p.c = sc, p.ldc = S;
    gemm(*uk_, p, gemm_threads, gs);
    for (int64_t l = 0; l < L; ++l) {
      double* row = sc + l * S;
      double mx = kNegInf;
      for (int64_t s = 0; s < S; ++s) {
        double a = row[s] * scale;
        if (causal_ && s > l) a = kNegInf;
        if (mask) {
          const int64_t off = mo + l * ms[nb] + s * ms[nb + 1];
          if (bool_mask) {
            if (!mask->ptr<const bool>()[off]) a += kNegInf;
          } else {
            a += mask->ptr<const double>()[off];
          }
        }
        row[s] = a;
        mx = std::max(mx, a);
      }
      if (mx == kNegInf) mx = 0;
      double sum = 0;
      for (int64_t s = 0; s < S; ++s) sum += (row[s] = std::exp(row[s] - mx));
      if (lse) lse[b * L + l] = sum == 0 ? 0.0 : mx + std::log(sum);  // 0: every key masked, as torch
    }
    Problem pv;
    pv.M = L, pv.N = Ev, pv.K = S;
    pv.a = {sc, S, 1};
    pv.b = {v.ptr<const double>() + vo, v.strides[v.ndim - 2], v.strides[v.ndim - 1]};
    double* yo = y.ptr<double>() + b * L * Ev;
    pv.c = yo, pv.ldc = Ev;
    gemm(*uk_, pv, gemm_threads, gs);
    for (int64_t l = 0; l < L; ++l) {
      const double* row = sc + l * S;
      double sum = 0;
      for (int64_t s = 0; s < S; ++s) sum += row[s];
      if (sum == 0) continue;
      for (int64_t e = 0; e < Ev; ++e) yo[l * Ev + e] /= sum;
    }
  };
  if (batches >= threads_ && threads_ > 1) {
    parallel_for(batches, threads_, [&](int64_t b) { one(b, omp_get_thread_num(), 1); });
  } else {
    for (int64_t b = 0; b < batches; ++b) one(b, 0, threads_);
  }
}

std::unique_ptr<Kernel> SdpaF64Kernel::create(const KernelContext& ctx) {
  // seq_first operands (fold_permute_sdpa folds f32 attention only): the reference kernel.
  if (SdpaLayout::of(ctx.attr("seq_first").ints()).any()) return nullptr;
  auto k = std::make_unique<SdpaF64Kernel>();
  k->uk_ = &pick_micro(ctx.options);
  k->causal_ = ctx.attr("is_causal").b();
  k->has_mask_ = ctx.attr("has_mask").b();
  k->with_lse_ = ctx.attr("with_lse").b();
  k->scale_ = ctx.attr("scale").f();
  const auto &qs = ctx.in_shapes[0], &ks = ctx.in_shapes[1], &vs = ctx.in_shapes[2], &ys = ctx.out_shapes[0];
  k->L_ = qs[qs.size() - 2];
  k->S_ = ks[ks.size() - 2];
  double batches = 1;
  for (size_t d = 0; d + 2 < ys.size(); ++d) batches *= static_cast<double>(ys[d]);
  const double flops = 2.0 * batches * k->L_ * k->S_ * (qs.back() + vs.back());
  k->threads_ = threads_for_work(flops, ctx.thread_budget());
  k->name_ = std::string("cpu_f64_sdpa:") + k->uk_->isa + (k->threads_ == 1 ? ":1thread" : "");
  return k;
}

}  // namespace

std::unique_ptr<Kernel> create_sdpa(const KernelContext& ctx) { return SdpaF64Kernel::create(ctx); }

}  // namespace updraft::cpu::f64
