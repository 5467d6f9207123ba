// f64 conv2d, plain NCHW only (src_block = dst_block = 0; block_conv_layout leaves f64 convs
// plain), with groups, stride, padding / padding_end, dilation, the weight scale and the fused
// epilogue.
//
// Per image n and group g the convolution is one GEMM (gemm_f64.h):
//   y[n, g] [Og, OH*OW] = w[g] [Og, Cg*kh*kw] x col [Cg*kh*kw, OH*OW]
// with the output channels as GEMM rows (so the bias is per row and y is written in NCHW
// directly). col is x itself for a 1x1, stride-1, unpadded conv whose rows are dense, and an
// im2col copy in scratch otherwise (zeros where the window reads padding). A constant weight
// is packed once per group here in the factory, with the weight scale applied as it is packed
// (w[o] * s[o] rounded once to f64, as the reference does).
//
// Depthwise-like convs (one input channel per group: Cg = 1) are a GEMM with K = kh*kw, too
// short to fill the micro-kernel; they run as a direct loop instead, each output plane summed
// over the window in the reference's (ky, kx) order, the inner loop along the output row.
//
// Threads: images x groups (or images x channels, depthwise) split over the threads when there
// are enough of them; otherwise one (n, g) at a time with the GEMM itself threaded.
#include <algorithm>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "core/error.h"
#include "kernels/cpu/f64_kernels.h"
#include "kernels/cpu/strided_copy.h"
#include "kernels/cpu/threads.h"

namespace updraft::cpu::f64 {

namespace {

int64_t round8(int64_t n) { return (n + 7) / 8 * 8; }

class ConvF64Kernel final : public Kernel {
 public:
  void run(const TensorView* in, TensorView* out, void* scratch) const override;
  size_t scratch_bytes() const override {
    return static_cast<size_t>(threads_) * (col_doubles_ + (direct_ ? 0 : gemm_scratch_doubles(*uk_))) * sizeof(double);
  }
  std::string name() const override { return name_; }
  static std::unique_ptr<Kernel> create(const KernelContext& ctx);

 private:
  const MicroKernel* uk_ = nullptr;
  int threads_ = 1;
  int64_t g_ = 1, O_ = 0, Cg_ = 0, kh_ = 0, kw_ = 0, Og_ = 0, CK_ = 0;
  int64_t sh_ = 1, sw_ = 1, ph_ = 0, pw_ = 0, dh_ = 1, dw_ = 1;
  bool scaled_ = false, direct_ = false, one_by_one_ = false;
  int64_t col_doubles_ = 0;  // per thread
  TileEpilogue ep_;
  EpilogueInputs ins_;
  std::vector<PackedMatrix> w_packed_;  // per group, when the weight (and scale) are constants
  std::optional<Tensor> w_keep_;        // the scaled constant weight, for the direct path
  std::string name_;

  void im2col(const double* x, const int64_t* xs, int64_t H, int64_t W, int64_t OH, int64_t OW, double* col) const;
  void direct_plane(const double* x, const int64_t* xs, int64_t H, int64_t W, const double* w, double* y, int64_t OH,
                    int64_t OW) const;
};

// col[(c * kh + ky) * kw + kx][oh * OW + ow] = x[c, oh*sh - ph + ky*dh, ow*sw - pw + kx*dw] (0 outside).
void ConvF64Kernel::im2col(const double* x, const int64_t* xs, int64_t H, int64_t W, int64_t OH, int64_t OW,
                           double* col) const {
  for (int64_t c = 0; c < Cg_; ++c)
    for (int64_t ky = 0; ky < kh_; ++ky)
      for (int64_t kx = 0; kx < kw_; ++kx) {
        double* row = col + ((c * kh_ + ky) * kw_ + kx) * OH * OW;
        // Output columns whose input column is inside [0, W): ow in [lo, hi).
        const int64_t off = kx * dw_ - pw_;
        int64_t lo = off >= 0 ? 0 : (-off + sw_ - 1) / sw_;
        int64_t hi = W - off <= 0 ? 0 : (W - off - 1) / sw_ + 1;
        lo = std::min(lo, OW), hi = std::min(std::max(hi, lo), OW);
        for (int64_t oh = 0; oh < OH; ++oh) {
          double* r = row + oh * OW;
          const int64_t ih = oh * sh_ - ph_ + ky * dh_;
          if (ih < 0 || ih >= H) {
            std::fill(r, r + OW, 0.0);
            continue;
          }
          const double* xr = x + c * xs[0] + ih * xs[1] + off * xs[2];
          std::fill(r, r + lo, 0.0);
          if (sw_ == 1 && xs[2] == 1) std::memcpy(r + lo, xr + lo, sizeof(double) * (hi - lo));
          else
            for (int64_t ow = lo; ow < hi; ++ow) r[ow] = xr[ow * sw_ * xs[2]];
          std::fill(r + hi, r + OW, 0.0);
        }
      }
}

// One output plane of a Cg = 1 conv: y[oh, ow] = sum_{ky, kx} w[ky, kx] x[ih, iw].
void ConvF64Kernel::direct_plane(const double* x, const int64_t* xs, int64_t H, int64_t W, const double* w, double* y,
                                 int64_t OH, int64_t OW) const {
  std::fill(y, y + OH * OW, 0.0);
  for (int64_t ky = 0; ky < kh_; ++ky)
    for (int64_t kx = 0; kx < kw_; ++kx) {
      const double wv = w[ky * kw_ + kx];
      const int64_t off = kx * dw_ - pw_;
      int64_t lo = off >= 0 ? 0 : (-off + sw_ - 1) / sw_;
      int64_t hi = W - off <= 0 ? 0 : (W - off - 1) / sw_ + 1;
      lo = std::min(lo, OW), hi = std::min(std::max(hi, lo), OW);
      for (int64_t oh = 0; oh < OH; ++oh) {
        const int64_t ih = oh * sh_ - ph_ + ky * dh_;
        if (ih < 0 || ih >= H) continue;
        const double* xr = x + ih * xs[1] + off * xs[2];
        double* yr = y + oh * OW;
        if (sw_ == 1 && xs[2] == 1)
          for (int64_t ow = lo; ow < hi; ++ow) yr[ow] += wv * xr[ow];
        else
          for (int64_t ow = lo; ow < hi; ++ow) yr[ow] += wv * xr[ow * sw_ * xs[2]];
      }
    }
}

void ConvF64Kernel::run(const TensorView* in, TensorView* out, void* scratch) const {
  ScopedThreads scoped(threads_);
  const TensorView& x = in[0];
  const TensorView& y = out[0];
  const int64_t N = x.sizes[0], H = x.sizes[2], W = x.sizes[3], OH = y.sizes[2], OW = y.sizes[3], OHW = OH * OW;
  const int64_t xs[3] = {x.strides[1], x.strides[2], x.strides[3]};
  double* yp = y.ptr<double>();
  TileEpilogue ep = ep_;
  ep.bias_per_row = true;  // GEMM rows are output channels
  if (ins_.bias >= 0) ep.bias = in[ins_.bias].ptr<const double>(), ep.bias_stride = in[ins_.bias].strides[0];
  std::optional<Packed> res_copy, w_copy;
  if (ins_.residual >= 0) {
    const TensorView* r = &in[ins_.residual];
    if (!r->is_contiguous()) r = &res_copy.emplace(*r, 1).view();
    ep.res = r->ptr<const double>();
    ep.res_rs = OHW, ep.res_cs = 1;
  }
  // The weight as read at run time (non-constant): dense [O, CK].
  const double* w = nullptr;
  const double* scale = scaled_ ? in[2].ptr<const double>() : nullptr;
  if (w_packed_.empty() && !w_keep_) {
    const TensorView* wv = &in[1];
    if (!wv->is_contiguous()) wv = &w_copy.emplace(*wv, 1).view();
    w = wv->ptr<const double>();
  }
  if (direct_) {
    const double* wd = w_keep_ ? w_keep_->ptr<const double>() : w;
    const bool scale_now = scaled_ && !w_keep_;
    parallel_for(N * O_, threads_, [&](int64_t item) {
      const int64_t n = item / O_, o = item % O_, c = o / Og_;
      double wbuf[64];
      const double* wo = wd + o * CK_;
      if (scale_now && CK_ <= 64) {
        for (int64_t t = 0; t < CK_; ++t) wbuf[t] = wo[t] * scale[o];
        wo = wbuf;
      }
      double* plane = yp + (n * O_ + o) * OHW;
      direct_plane(x.ptr<const double>() + n * x.strides[0] + c * x.strides[1], xs, H, W, wo, plane, OH, OW);
      if (!ep.empty()) {
        const double b = ep.bias ? ep.bias[o * ep.bias_stride] : 0.0;
        const double* r = ep.res ? ep.res + (n * O_ + o) * OHW : nullptr;
        for (int64_t j = 0; j < OHW; ++j) {
          double v = plane[j];
          if (ep.bias) v += b;
          if (r) v += r[j];
          plane[j] = activate(ep.attrs, v);
        }
      }
    });
    return;
  }
  const int64_t items = N * g_;
  const bool outer = items >= threads_;  // (n, g) over threads, each GEMM on one thread
  const int64_t gemm_per = gemm_scratch_doubles(*uk_);
  double* cols = static_cast<double*>(scratch);
  double* gemm_base = cols + threads_ * col_doubles_;
  auto one = [&](int64_t item, int slot, int gemm_threads) {
    const int64_t n = item / g_, g = item % g_;
    const double* xg = x.ptr<const double>() + n * x.strides[0] + g * Cg_ * x.strides[1];
    Problem p;
    p.M = Og_;
    p.N = OHW;
    p.K = CK_;
    if (one_by_one_ && x.strides[3] == 1 && (H == 1 || x.strides[2] == W)) {
      p.b = {xg, x.strides[1], 1};
    } else {
      double* col = cols + slot * col_doubles_;
      im2col(xg, xs, H, W, OH, OW, col);
      p.b = {col, OHW, 1};
    }
    if (!w_packed_.empty()) p.a_packed = &w_packed_[g];
    else {
      p.a = {w + g * Og_ * CK_, CK_, 1};
      if (scale) p.a_row_scale = scale + g * Og_;
    }
    p.c = yp + (n * O_ + g * Og_) * OHW;
    p.ldc = OHW;
    p.ep = ep;
    if (p.ep.bias) p.ep.bias += g * Og_ * p.ep.bias_stride;
    if (p.ep.res) p.ep.res += (n * O_ + g * Og_) * OHW;
    gemm(*uk_, p, gemm_threads, gemm_base + slot * gemm_per);
  };
  if (outer && threads_ > 1) {
    parallel_for(items, threads_, [&](int64_t item) { one(item, omp_get_thread_num(), 1); });
  } else {
    for (int64_t item = 0; item < items; ++item) one(item, 0, threads_);
  }
}

std::unique_ptr<Kernel> ConvF64Kernel::create(const KernelContext& ctx) {
  if (ctx.attr("src_block").i() != 0 || ctx.attr("dst_block").i() != 0) return nullptr;  // plain NCHW only
  auto k = std::make_unique<ConvF64Kernel>();
  k->uk_ = &pick_micro(ctx.options);
  auto st = spatial_pair(ctx.attr("stride")), pad = spatial_pair(ctx.attr("padding")),
       dil = spatial_pair(ctx.attr("dilation"));
  k->sh_ = st[0], k->sw_ = st[1], k->ph_ = pad[0], k->pw_ = pad[1], k->dh_ = dil[0], k->dw_ = dil[1];
  // padding_end only changes the output size (read from the output view); the window start
  // is set by the leading padding.
  k->g_ = ctx.attr("groups").i();
  const auto& ws = ctx.in_shapes[1];
  const auto& xs = ctx.in_shapes[0];
  const auto& ys = ctx.out_shapes[0];
  k->O_ = ws[0], k->Cg_ = ws[1], k->kh_ = ws[2], k->kw_ = ws[3];
  k->Og_ = k->O_ / k->g_;
  k->CK_ = k->Cg_ * k->kh_ * k->kw_;
  k->scaled_ = ctx.attr("has_weight_scale").b();
  k->ep_ = epilogue_attrs(ctx, k->scaled_ ? 3 : 2, &k->ins_);
  const int64_t OHW = ys[2] * ys[3];
  k->direct_ = k->Cg_ == 1 && k->g_ > 1 && k->CK_ <= 64;
  k->one_by_one_ = k->kh_ == 1 && k->kw_ == 1 && k->sh_ == 1 && k->sw_ == 1 && k->ph_ == 0 && k->pw_ == 0 &&
                   ys[2] == xs[2] && ys[3] == xs[3];
  const double flops = 2.0 * ys[0] * k->O_ * OHW * k->CK_;
  k->threads_ = threads_for_gemm(flops, 8.0 * (static_cast<double>(xs[0]) * xs[1] * xs[2] * xs[3] + ys[0] * k->O_ * OHW),
                                 ctx.thread_budget());
  // A 1x1 conv reads x in place unless x is a graph input, which may arrive with strided rows.
  const bool may_need_col = !k->one_by_one_ || ctx.node.inputs[0]->is_input;
  k->col_doubles_ = (k->direct_ || !may_need_col) ? 0 : round8(k->CK_ * OHW);
  const Tensor* w = ctx.const_inputs[1];
  const Tensor* sc = k->scaled_ ? ctx.const_inputs[2] : nullptr;
  if (w && (!k->scaled_ || sc)) {
    const double* wp = w->ptr<const double>();
    const double* sp = sc ? sc->ptr<const double>() : nullptr;
    if (k->direct_) {
      Tensor t(DType::f64, {k->O_, k->CK_});
      for (int64_t o = 0; o < k->O_; ++o)
        for (int64_t j = 0; j < k->CK_; ++j) t.ptr<double>()[o * k->CK_ + j] = sp ? wp[o * k->CK_ + j] * sp[o] : wp[o * k->CK_ + j];
      k->w_keep_ = std::move(t);
    } else {
      for (int64_t g = 0; g < k->g_; ++g)
        k->w_packed_.push_back(pack_whole(*k->uk_, true, k->Og_, k->CK_, {wp + g * k->Og_ * k->CK_, k->CK_, 1},
                                          sp ? sp + g * k->Og_ : nullptr));
    }
  }
  k->name_ = std::string("cpu_f64_conv2d:") + (k->direct_ ? "direct" : k->one_by_one_ ? "gemm_1x1" : "im2col_gemm") +
             ":" + k->uk_->isa + (k->w_packed_.empty() && !k->w_keep_ ? "" : ":prepacked") +
             (k->scaled_ ? ":scaled" : "") + (k->threads_ == 1 ? ":1thread" : "");
  return k;
}

}  // namespace

std::unique_ptr<Kernel> create_conv2d(const KernelContext& ctx) { return ConvF64Kernel::create(ctx); }

}  // namespace updraft::cpu::f64
