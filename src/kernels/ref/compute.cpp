// Reference kernels for the compute ops: plain loops, double accumulation, any input strides.
// They are the oracle the oneDNN kernels are tested against (tests/cpp/test_{conv,matmul,
// pool,attention}.cpp), so they follow PyTorch's definitions literally and favour clarity
// over speed. Outputs are contiguous (the Kernel contract).
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "core/error.h"
#include "ir/op_table.h"
#include "ir/ops/params.h"
#include "kernels/channel_block.h"
#include "kernels/elementwise_ops.h"
#include "kernels/grouped_rows.h"
#include "kernels/kernel.h"

namespace updraft {

namespace {

using Index = std::vector<int64_t>;

// Element at a multi-index (one entry per dim of v), as double; honours strides.
double at(const TensorView& v, const int64_t* idx) {
  int64_t off = 0;
  for (int d = 0; d < v.ndim; ++d) off += idx[d] * v.strides[d];
  switch (v.dtype) {
    case DType::f32: return static_cast<const float*>(v.data)[off];
    case DType::f64: return static_cast<const double*>(v.data)[off];
    case DType::boolean: return static_cast<const bool*>(v.data)[off] ? 1.0 : 0.0;
    default: throw Error("kernels", std::string("reference compute kernel got unsupported dtype ") + dtype_name(v.dtype));
  }
}

double at(const TensorView& v, std::initializer_list<int64_t> idx) { return at(v, idx.begin()); }

// Element of `v` at the trailing-aligned, broadcast position of `idx` (which indexes a shape
// of rank `rank` >= v.ndim): size-1 dims of v read index 0.
double at_broadcast(const TensorView& v, const int64_t* idx, int rank) {
  int64_t local[kMaxDims] = {};
  for (int d = 0; d < v.ndim; ++d) {
    int64_t i = idx[rank - v.ndim + d];
    local[d] = v.sizes[d] == 1 ? 0 : i;
  }
  return at(v, local);
}

void store(const TensorView& out, int64_t linear, double x) {
  switch (out.dtype) {
    case DType::f32: out.ptr<float>()[linear] = static_cast<float>(x); break;
    case DType::f64: out.ptr<double>()[linear] = x; break;
    default: throw Error("kernels", std::string("reference compute kernel cannot write ") + dtype_name(out.dtype));
  }
}

// Row-major unravel of `linear` into `idx` over `sizes`.
void unravel(int64_t linear, const int64_t* sizes, int rank, int64_t* idx) {
  for (int d = rank - 1; d >= 0; --d) {
    idx[d] = sizes[d] ? linear % sizes[d] : 0;
    linear = sizes[d] ? linear / sizes[d] : 0;
  }
}

// value + bias[channel] + residual[out_idx], then the activation by its elementwise formula
// (kernels/elementwise_ops.h: the reference gelu node and a fused gelu are one formula). The
// residual has the output's shape, so out_idx indexes it directly.
double apply_epilogue(const Epilogue& ep, double value, const TensorView* in, int64_t channel, const int64_t* out_idx) {
  if (ep.has_bias) value += at(in[ep.bias_input], {channel});
  if (ep.has_residual) value += at(in[ep.residual_input], out_idx);
  return ep.act ? ew_ref<double>(*ep.act, value, ep.alpha, ep.beta) : value;
}

// ---- conv2d -------------------------------------------------------------------------------

struct ConvParams {
  std::vector<int64_t> st, pad, dil;
  int64_t g = 1;
  Epilogue ep;
  int64_t src_block = 0, dst_block = 0;  // activation layouts (kernels/channel_block.h)
  bool weight_scale = false;             // input 2 scales w per output channel

  static ConvParams of(const Node& node) {
    const bool scaled = node.attr("has_weight_scale").b();
    return {spatial_pair(node.attr("stride")), spatial_pair(node.attr("padding")), spatial_pair(node.attr("dilation")),
            node.attr("groups").i(),
            Epilogue::of(node, scaled ? 3 : 2), node.attr("src_block").i(), node.attr("dst_block").i(), scaled};
  }
};

void ref_conv2d_plain(const TensorView* in, TensorView* out, const ConvParams& cp);
void ref_conv2d(const TensorView* in, TensorView* out, const ConvParams& cp);

// A scaled conv is the conv of the scaled weights: w'[o, ...] = w[o, ...] * s[o], rounded once
// to w's dtype (the double product of two floats is exact, so this is the f32 multiply), held
// in `buf`; the other inputs keep their order without the scale.
void ref_conv2d_scaled(const TensorView* in, TensorView* out, ConvParams cp) {
  const TensorView &w = in[1], &s = in[2];
  std::vector<char> buf(w.nbytes());
  TensorView ws = TensorView::contiguous(buf.data(), w.dtype, w.shape());
  int64_t idx[4] = {0, 0, 0, 0}, linear = 0;
  for (idx[0] = 0; idx[0] < w.sizes[0]; ++idx[0])
    for (idx[1] = 0; idx[1] < w.sizes[1]; ++idx[1])
      for (idx[2] = 0; idx[2] < w.sizes[2]; ++idx[2])
        for (idx[3] = 0; idx[3] < w.sizes[3]; ++idx[3]) store(ws, linear++, at(w, idx) * at(s, {idx[0]}));
  std::vector<TensorView> ins = {in[0], ws};
  const int rest = (cp.ep.has_bias ? 1 : 0) + (cp.ep.has_residual ? 1 : 0);
  for (int k = 0; k < rest; ++k) ins.push_back(in[3 + k]);
  if (cp.ep.has_bias) --cp.ep.bias_input;
  if (cp.ep.has_residual) --cp.ep.residual_input;
  cp.weight_scale = false;
  ref_conv2d(ins.data(), out, cp);
}

// A contiguous plain copy of a channel-blocked [N, C, H, W] view, held in `buf`.
TensorView unblocked(const TensorView& v, int64_t block, std::vector<char>& buf) {
  buf.resize(v.nbytes());
  channel_block_copy(v.data, buf.data(), dtype_size(v.dtype), v.sizes, block, 0);
  return TensorView::contiguous(buf.data(), v.dtype, v.shape());
}

// Runs plain(x, y) on plain copies of a channel-blocked x and y (block 0: on x and y as they
// are): a one-input op whose input and output share a layout (pooling).
template <typename F>
void on_plain_layout(const TensorView* in, TensorView* out, int64_t block, F plain) {
  if (block == 0) return plain(in, out);
  std::vector<char> xbuf, ybuf(out[0].nbytes());
  TensorView x = unblocked(in[0], block, xbuf);
  TensorView y = TensorView::contiguous(ybuf.data(), out[0].dtype, out[0].shape());
  plain(&x, &y);
  channel_block_copy(ybuf.data(), out[0].data, dtype_size(y.dtype), y.sizes, 0, block);
}

// Blocked activations: convert to plain, run the plain loops, block the result. Slow and
// obviously right, which is what the oracle is for.
void ref_conv2d(const TensorView* in, TensorView* out, const ConvParams& cp) {
  if (cp.weight_scale) return ref_conv2d_scaled(in, out, cp);
  if (cp.src_block == 0 && cp.dst_block == 0) return ref_conv2d_plain(in, out, cp);
  std::vector<TensorView> ins(in, in + 2 + (cp.ep.has_bias ? 1 : 0) + (cp.ep.has_residual ? 1 : 0));
  std::vector<char> xbuf, rbuf, ybuf;
  if (cp.src_block) ins[0] = unblocked(ins[0], cp.src_block, xbuf);
  if (cp.dst_block && cp.ep.has_residual) ins[cp.ep.residual_input] = unblocked(ins[cp.ep.residual_input], cp.dst_block, rbuf);
  TensorView y = out[0];
  if (cp.dst_block) {
    ybuf.resize(y.nbytes());
    y = TensorView::contiguous(ybuf.data(), y.dtype, y.shape());
  }
  ref_conv2d_plain(ins.data(), &y, cp);
  if (cp.dst_block) channel_block_copy(ybuf.data(), out[0].data, dtype_size(y.dtype), y.sizes, 0, cp.dst_block);
}

void ref_conv2d_plain(const TensorView* in, TensorView* out, const ConvParams& cp) {
  const auto &st = cp.st, &pad = cp.pad, &dil = cp.dil;
  const Epilogue& ep = cp.ep;
  int64_t g = cp.g;
  const TensorView &x = in[0], &w = in[1];
  const TensorView& y = out[0];
  int64_t N = y.sizes[0], O = y.sizes[1], OH = y.sizes[2], OW = y.sizes[3];
  int64_t H = x.sizes[2], W = x.sizes[3], Cg = w.sizes[1], KH = w.sizes[2], KW = w.sizes[3];
  int64_t Og = O / g;
  int64_t linear = 0;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t o = 0; o < O; ++o)
      for (int64_t oh = 0; oh < OH; ++oh)
        for (int64_t ow = 0; ow < OW; ++ow, ++linear) {
          double acc = 0;
          int64_t c0 = (o / Og) * Cg;
          for (int64_t c = 0; c < Cg; ++c)
            for (int64_t kh = 0; kh < KH; ++kh) {
              int64_t ih = oh * st[0] - pad[0] + kh * dil[0];
              if (ih < 0 || ih >= H) continue;
              for (int64_t kw = 0; kw < KW; ++kw) {
                int64_t iw = ow * st[1] - pad[1] + kw * dil[1];
                if (iw < 0 || iw >= W) continue;
                acc += at(x, {n, c0 + c, ih, iw}) * at(w, {o, c, kh, kw});
              }
            }
          int64_t idx[4] = {n, o, oh, ow};
          store(y, linear, apply_epilogue(ep, acc, in, o, idx));
        }
}

// ---- conv2d gradients ---------------------------------------------------------------------

struct ConvGradParams {
  std::vector<int64_t> st, pad, dil;
  int64_t g = 1;

  static ConvGradParams of(const Node& node) {
    return {spatial_pair(node.attr("stride")), spatial_pair(node.attr("padding")), spatial_pair(node.attr("dilation")),
            node.attr("groups").i()};
  }
};

// Calls f(n, o, oh, ow, c, kh, kw, ih, iw) for every product term of the forward conv
// y[n, o, oh, ow] += x[n, c, ih, iw] * w[o, c - group start, kh, kw] whose input position is
// inside the image: both gradients are sums over these terms.
template <typename F>
void for_each_conv_term(const ConvGradParams& p, const int64_t* y_sizes, const int64_t* x_sizes,
                        const int64_t* w_sizes, F&& f) {
  const int64_t N = y_sizes[0], O = y_sizes[1], OH = y_sizes[2], OW = y_sizes[3];
  const int64_t H = x_sizes[2], W = x_sizes[3], Cg = w_sizes[1], KH = w_sizes[2], KW = w_sizes[3];
  const int64_t Og = O / p.g;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t o = 0; o < O; ++o)
      for (int64_t oh = 0; oh < OH; ++oh)
        for (int64_t ow = 0; ow < OW; ++ow)
          for (int64_t c = 0; c < Cg; ++c)
            for (int64_t kh = 0; kh < KH; ++kh) {
              const int64_t ih = oh * p.st[0] - p.pad[0] + kh * p.dil[0];
              if (ih < 0 || ih >= H) continue;
              for (int64_t kw = 0; kw < KW; ++kw) {
                const int64_t iw = ow * p.st[1] - p.pad[1] + kw * p.dil[1];
                if (iw >= 0 && iw < W) f(n, o, oh, ow, (o / Og) * Cg + c, c, kh, kw, ih, iw);
              }
            }
}

// dx[n, c, ih, iw] = sum of dy[n, o, oh, ow] * w[o, c', kh, kw] over the terms that read it.
void ref_conv2d_backward_data(const TensorView* in, TensorView* out, const ConvGradParams& p) {
  const TensorView &dy = in[0], &w = in[1], &dx = out[0];
  std::vector<double> acc(static_cast<size_t>(dx.numel()), 0.0);
  const int64_t C = dx.sizes[1], H = dx.sizes[2], W = dx.sizes[3];
  for_each_conv_term(p, dy.sizes, dx.sizes, w.sizes,
                     [&](int64_t n, int64_t o, int64_t oh, int64_t ow, int64_t c, int64_t cg, int64_t kh, int64_t kw,
                         int64_t ih, int64_t iw) {
                       acc[((n * C + c) * H + ih) * W + iw] += at(dy, {n, o, oh, ow}) * at(w, {o, cg, kh, kw});
                     });
  for (int64_t i = 0; i < dx.numel(); ++i) store(dx, i, acc[i]);
}

// dw[o, c', kh, kw] = sum over n, oh, ow of dy[n, o, oh, ow] * x[n, c, ih, iw].
void ref_conv2d_backward_weight(const TensorView* in, TensorView* out, const ConvGradParams& p) {
  const TensorView &dy = in[0], &x = in[1], &dw = out[0];
  std::vector<double> acc(static_cast<size_t>(dw.numel()), 0.0);
  const int64_t Cg = dw.sizes[1], KH = dw.sizes[2], KW = dw.sizes[3];
  for_each_conv_term(p, dy.sizes, x.sizes, dw.sizes,
                     [&](int64_t n, int64_t o, int64_t oh, int64_t ow, int64_t c, int64_t cg, int64_t kh, int64_t kw,
                         int64_t ih, int64_t iw) {
                       acc[((o * Cg + cg) * KH + kh) * KW + kw] += at(dy, {n, o, oh, ow}) * at(x, {n, c, ih, iw});
                     });
  for (int64_t i = 0; i < dw.numel(); ++i) store(dw, i, acc[i]);
}

// ---- linear / matmul ----------------------------------------------------------------------

// out[..., n] = sum_k x[..., k] * w[n, k]
void ref_linear_impl(const TensorView* in, TensorView* out, const Epilogue& ep) {
  const TensorView &x = in[0], &w = in[1];
  const TensorView& y = out[0];
  int64_t K = w.sizes[1];
  int r = y.ndim;
  int64_t idx[kMaxDims], xi[kMaxDims];
  for (int64_t i = 0; i < y.numel(); ++i) {
    unravel(i, y.sizes, r, idx);
    std::copy(idx, idx + r, xi);
    double acc = 0;
    for (int64_t k = 0; k < K; ++k) {
      xi[r - 1] = k;
      acc += at(x, xi) * at(w, {idx[r - 1], k});
    }
    store(y, i, apply_epilogue(ep, acc, in, idx[r - 1], idx));
  }
}

// torch.matmul with broadcast batch dims. 1-d operands are treated as [1, K] / [K, 1] and the
// added dim is absent from the output.
void ref_matmul_impl(const TensorView* in, TensorView* out, const Epilogue& ep) {
  const TensorView &a = in[0], &b = in[1];
  const TensorView& y = out[0];
  bool a1 = a.ndim == 1, b1 = b.ndim == 1;
  int64_t K = a.sizes[a.ndim - 1];
  int r = y.ndim;
  // Output index -> (batch..., m, n) with m/n absent for 1-d operands.
  int nbatch = r - (a1 ? 0 : 1) - (b1 ? 0 : 1);
  int64_t idx[kMaxDims], ai[kMaxDims], bi[kMaxDims];
  for (int64_t i = 0; i < y.numel(); ++i) {
    unravel(i, y.sizes, r, idx);
    int64_t m = a1 ? 0 : idx[nbatch];
    int64_t n = b1 ? 0 : idx[r - 1];
    // Batch dims of each operand align to the right of the output's batch dims.
    int ab = a1 ? 0 : a.ndim - 2, bb = b1 ? 0 : b.ndim - 2;
    for (int d = 0; d < ab; ++d) ai[d] = a.sizes[d] == 1 ? 0 : idx[nbatch - ab + d];
    for (int d = 0; d < bb; ++d) bi[d] = b.sizes[d] == 1 ? 0 : idx[nbatch - bb + d];
    double acc = 0;
    for (int64_t k = 0; k < K; ++k) {
      if (a1) ai[0] = k;
      else { ai[ab] = m; ai[ab + 1] = k; }
      if (b1) bi[0] = k;
      else { bi[bb] = k; bi[bb + 1] = n; }
      acc += at(a, ai) * at(b, bi);
    }
    store(y, i, apply_epilogue(ep, acc, in, n, idx));
  }
}

// ---- pooling ------------------------------------------------------------------------------

struct PoolParams {
  int64_t k[2], s[2], p[2], d[2] = {1, 1};
  bool ceil_mode = false, include_pad = true;
  int64_t block = 0;  // x's and y's layout (kernels/channel_block.h)

  static PoolParams of(const Node& n, bool has_dilation) {
    PoolParams p;
    const PoolWindow w = PoolWindow::of(n, has_dilation);
    for (int i = 0; i < 2; ++i) p.k[i] = w.k[i], p.s[i] = w.s[i], p.p[i] = w.p[i], p.d[i] = w.d[i];
    p.ceil_mode = n.attr("ceil_mode").b();
    if (!has_dilation) p.include_pad = n.attr("count_include_pad").b();
    p.block = n.attr("block").i();
    return p;
  }
};

// Calls f(plane, oh, ow, linear) for every output element of a [.., C, OH, OW] output, where
// `plane` indexes the leading dims flattened (N*C or C); x is [.., C, H, W].
template <typename F>
void for_each_pool_output(const TensorView& y, F f) {
  int r = y.ndim;
  int64_t OH = y.sizes[r - 2], OW = y.sizes[r - 1];
  int64_t planes = (OH * OW != 0) ? y.numel() / (OH * OW) : 0;
  int64_t linear = 0;
  for (int64_t pl = 0; pl < planes; ++pl)
    for (int64_t oh = 0; oh < OH; ++oh)
      for (int64_t ow = 0; ow < OW; ++ow, ++linear) f(pl, oh, ow, linear);
}

// x element at (plane, h, w); plane unravels over the leading dims of x.
double pool_at(const TensorView& x, int64_t plane, int64_t h, int64_t w) {
  int r = x.ndim;
  int64_t idx[kMaxDims];
  unravel(plane, x.sizes, r - 2, idx);
  idx[r - 2] = h;
  idx[r - 1] = w;
  return at(x, idx);
}

void ref_max_pool2d(const TensorView* in, TensorView* out, const PoolParams& p) {
  const TensorView& x = in[0];
  int64_t H = x.sizes[x.ndim - 2], W = x.sizes[x.ndim - 1];
  for_each_pool_output(out[0], [&](int64_t pl, int64_t oh, int64_t ow, int64_t linear) {
    double m = -std::numeric_limits<double>::infinity();
    for (int64_t kh = 0; kh < p.k[0]; ++kh) {
      int64_t ih = oh * p.s[0] - p.p[0] + kh * p.d[0];
      if (ih < 0 || ih >= H) continue;
      for (int64_t kw = 0; kw < p.k[1]; ++kw) {
        int64_t iw = ow * p.s[1] - p.p[1] + kw * p.d[1];
        if (iw < 0 || iw >= W) continue;
        double v = pool_at(x, pl, ih, iw);
        if (v > m || std::isnan(v)) m = v;  // NaN propagates, as in PyTorch
      }
    }
    store(out[0], linear, m);
  });
}

void ref_avg_pool2d(const TensorView* in, TensorView* out, const PoolParams& p) {
  const TensorView& x = in[0];
  int64_t H = x.sizes[x.ndim - 2], W = x.sizes[x.ndim - 1];
  for_each_pool_output(out[0], [&](int64_t pl, int64_t oh, int64_t ow, int64_t linear) {
    // PyTorch: the window is clipped to the padded input first (that size is the divisor
    // with count_include_pad), then to the input itself (the divisor without).
    int64_t h0 = oh * p.s[0] - p.p[0], w0 = ow * p.s[1] - p.p[1];
    int64_t h1 = std::min(h0 + p.k[0], H + p.p[0]), w1 = std::min(w0 + p.k[1], W + p.p[1]);
    int64_t padded = (h1 - h0) * (w1 - w0);
    h0 = std::max<int64_t>(h0, 0), w0 = std::max<int64_t>(w0, 0);
    h1 = std::min(h1, H), w1 = std::min(w1, W);
    double sum = 0;
    for (int64_t ih = h0; ih < h1; ++ih)
      for (int64_t iw = w0; iw < w1; ++iw) sum += pool_at(x, pl, ih, iw);
    int64_t divisor = p.include_pad ? padded : (h1 - h0) * (w1 - w0);
    store(out[0], linear, divisor > 0 ? sum / divisor : 0.0);
  });
}

void ref_adaptive_avg_pool2d(const TensorView* in, TensorView* out) {
  const TensorView& x = in[0];
  int64_t H = x.sizes[x.ndim - 2], W = x.sizes[x.ndim - 1];
  int64_t OH = out[0].sizes[out[0].ndim - 2], OW = out[0].sizes[out[0].ndim - 1];
  for_each_pool_output(out[0], [&](int64_t pl, int64_t oh, int64_t ow, int64_t linear) {
    // PyTorch's windows: [floor(i*H/OH), ceil((i+1)*H/OH)).
    int64_t h0 = oh * H / OH, h1 = ((oh + 1) * H + OH - 1) / OH;
    int64_t w0 = ow * W / OW, w1 = ((ow + 1) * W + OW - 1) / OW;
    double sum = 0;
    for (int64_t ih = h0; ih < h1; ++ih)
      for (int64_t iw = w0; iw < w1; ++iw) sum += pool_at(x, pl, ih, iw);
    store(out[0], linear, sum / static_cast<double>((h1 - h0) * (w1 - w0)));
  });
}

// ---- sdpa ---------------------------------------------------------------------------------

struct SdpaParams {
  bool causal = false, has_mask = false, with_lse = false;
  double scale = 0;
};

// softmax(q k^T * scale + mask) v; batch dims broadcast. A bool mask keeps `true` (false adds
// -inf, so a NaN score stays NaN); a float mask is added. A row whose scores are all -inf (every
// key masked, e.g. a left-padded query) gives 0 * v summed, i.e. 0, as PyTorch's CPU sdpa does.
// with_lse: out[1] (dense [batch..., L]) gets each row's log-sum-exp.
void ref_sdpa(const TensorView* in, TensorView* out, const SdpaParams& p) {
  const TensorView &q = in[0], &k = in[1], &v = in[2];
  const TensorView& y = out[0];
  int r = y.ndim;
  int nb = r - 2;
  int64_t L = q.sizes[q.ndim - 2], E = q.sizes[q.ndim - 1], S = k.sizes[k.ndim - 2], Ev = v.sizes[v.ndim - 1];
  double scale = p.scale != 0 ? p.scale : 1.0 / std::sqrt(static_cast<double>(E));
  int64_t batches = 1;
  for (int d = 0; d < nb; ++d) batches *= y.sizes[d];
  std::vector<double> scores(static_cast<size_t>(S));
  int64_t idx[kMaxDims + 2], qi[kMaxDims], ki[kMaxDims], vi[kMaxDims];
  auto batch_index = [&](const TensorView& t, int64_t* ti) {
    int tb = t.ndim - 2;
    for (int d = 0; d < tb; ++d) ti[d] = t.sizes[d] == 1 ? 0 : idx[nb - tb + d];
  };
  for (int64_t b = 0; b < batches; ++b) {
    unravel(b, y.sizes, nb, idx);
    int64_t y_base = 0;  // y is written through its strides (a seq_first result is a swapped view)
    for (int d = 0; d < nb; ++d) y_base += idx[d] * y.strides[d];
    batch_index(q, qi);
    batch_index(k, ki);
    batch_index(v, vi);
    for (int64_t l = 0; l < L; ++l) {
      double mx = -std::numeric_limits<double>::infinity();
      for (int64_t s = 0; s < S; ++s) {
        double acc = 0;
        for (int64_t e = 0; e < E; ++e) {
          qi[q.ndim - 2] = l, qi[q.ndim - 1] = e;
          ki[k.ndim - 2] = s, ki[k.ndim - 1] = e;
          acc += at(q, qi) * at(k, ki);
        }
        acc *= scale;
        if (p.causal && s > l) acc = -std::numeric_limits<double>::infinity();
        if (p.has_mask) {
          idx[nb] = l, idx[nb + 1] = s;
          double m = at_broadcast(in[3], idx, nb + 2);
          if (in[3].dtype == DType::boolean) {
            if (m == 0) acc += -std::numeric_limits<double>::infinity();
          } else {
            acc += m;
          }
        }
        scores[s] = acc;
        mx = std::max(mx, acc);
      }
      // All -inf: shift by 0 so every weight is exp(-inf) = 0 (not exp(-inf + inf) = NaN).
      if (mx == -std::numeric_limits<double>::infinity()) mx = 0;
      double sum = 0;
      for (int64_t s = 0; s < S; ++s) sum += (scores[s] = std::exp(scores[s] - mx));
      // The log-sum-exp; 0 for a row with every key masked, as torch's CPU flash kernel.
      if (p.with_lse) store(out[1], b * L + l, sum == 0 ? 0.0 : mx + std::log(sum));
      for (int64_t e = 0; e < Ev; ++e) {
        double acc = 0;
        for (int64_t s = 0; s < S; ++s) {
          vi[v.ndim - 2] = s, vi[v.ndim - 1] = e;
          acc += scores[s] * at(v, vi);
        }
        store(y, y_base + l * y.strides[nb] + e * y.strides[nb + 1], sum == 0 ? acc : acc / sum);
      }
    }
  }
}

// ---- grouped_mm ------------------------------------------------------------------------------

// out = 0, then for each group (kernels/grouped_rows.h) out[s, n] = sum_k x[s, k] * w[e, k, n]
// (w[e, n, k] with transposed_w).
void ref_grouped_mm(const TensorView* in, TensorView* out, bool transposed_w) {
  const TensorView &x = in[0], &w = in[1];
  const TensorView& y = out[0];
  int64_t S = x.sizes[0], K = x.sizes[1], N = y.sizes[1];
  for (int64_t i = 0; i < S * N; ++i) store(y, i, 0.0);
  for_each_group(in[2], S, [&](int64_t e, int64_t lo, int64_t hi) {
    for (int64_t s = lo; s < hi; ++s)
      for (int64_t n = 0; n < N; ++n) {
        double acc = 0;
        for (int64_t k = 0; k < K; ++k) acc += at(x, {s, k}) * (transposed_w ? at(w, {e, n, k}) : at(w, {e, k, n}));
        store(y, s * N + n, acc);
      }
  });
}

}  // namespace

void register_ref_compute_kernels(KernelRegistry& r) {
  r.add("grouped_mm", Device::ref, [](const KernelContext& ctx) {
    bool tw = ctx.node.attr("transposed_w").b();
    return make_kernel("ref_grouped_mm", [tw](const TensorView* in, TensorView* out) { ref_grouped_mm(in, out, tw); });
  });
  // Kernels copy the attributes they need at creation: a plan may outlive the Graph's nodes.
  r.add("conv2d", Device::ref, [](const KernelContext& ctx) {
    ConvParams p = ConvParams::of(ctx.node);
    return make_kernel("ref_conv2d", [p](const TensorView* in, TensorView* out) { ref_conv2d(in, out, p); });
  });
  r.add("conv2d_backward_data", Device::ref, [](const KernelContext& ctx) {
    ConvGradParams p = ConvGradParams::of(ctx.node);
    return make_kernel("ref_conv2d_backward_data",
                       [p](const TensorView* in, TensorView* out) { ref_conv2d_backward_data(in, out, p); });
  });
  r.add("conv2d_backward_weight", Device::ref, [](const KernelContext& ctx) {
    ConvGradParams p = ConvGradParams::of(ctx.node);
    return make_kernel("ref_conv2d_backward_weight",
                       [p](const TensorView* in, TensorView* out) { ref_conv2d_backward_weight(in, out, p); });
  });
  r.add("linear", Device::ref, [](const KernelContext& ctx) {
    Epilogue ep = Epilogue::of(ctx.node, 2);
    return make_kernel("ref_linear", [ep](const TensorView* in, TensorView* out) { ref_linear_impl(in, out, ep); });
  });
  r.add("matmul", Device::ref, [](const KernelContext& ctx) {
    Epilogue ep = Epilogue::of(ctx.node, 2);
    const bool ta = ctx.attr("transpose_a").b(), tb = ctx.attr("transpose_b").b();
    return make_kernel("ref_matmul", [ep, ta, tb](const TensorView* in, TensorView* out) {
      // A transposed operand is read through a view with its last two sizes and strides swapped.
      std::vector<TensorView> views(in, in + 2 + ep.has_bias + ep.has_residual);
      if (ta) views[0] = last_two_swapped(views[0]);
      if (tb) views[1] = last_two_swapped(views[1]);
      ref_matmul_impl(views.data(), out, ep);
    });
  });
  r.add("max_pool2d", Device::ref, [](const KernelContext& ctx) {
    PoolParams p = PoolParams::of(ctx.node, true);
    return make_kernel("ref_max_pool2d", [p](const TensorView* in, TensorView* out) {
      on_plain_layout(in, out, p.block, [&p](const TensorView* x, TensorView* y) { ref_max_pool2d(x, y, p); });
    });
  });
  r.add("avg_pool2d", Device::ref, [](const KernelContext& ctx) {
    PoolParams p = PoolParams::of(ctx.node, false);
    return make_kernel("ref_avg_pool2d", [p](const TensorView* in, TensorView* out) {
      on_plain_layout(in, out, p.block, [&p](const TensorView* x, TensorView* y) { ref_avg_pool2d(x, y, p); });
    });
  });
  r.add("adaptive_avg_pool2d", Device::ref, [](const KernelContext&) {
    return make_kernel("ref_adaptive_avg_pool2d", ref_adaptive_avg_pool2d);
  });
  r.add("sdpa", Device::ref, [](const KernelContext& ctx) {
    SdpaParams p;
    p.causal = ctx.node.attr("is_causal").b();
    p.has_mask = ctx.node.attr("has_mask").b();
    p.scale = ctx.node.attr("scale").f();
    p.with_lse = ctx.node.attr("with_lse").b();
    const SdpaLayout layout = SdpaLayout::of(ctx.attr("seq_first").ints());
    return make_kernel("ref_sdpa", [p, layout](const TensorView* in, TensorView* out) {
      TensorView views[4] = {layout.logical(0, in[0]), layout.logical(1, in[1]), layout.logical(2, in[2]),
                             p.has_mask ? in[3] : TensorView{}};
      TensorView ys[2] = {layout.logical(3, out[0]), p.with_lse ? out[1] : TensorView{}};
      ref_sdpa(views, ys, p);
    });
  });
}

}  // namespace updraft
