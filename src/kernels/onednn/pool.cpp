// Pooling: max_pool2d and avg_pool2d on oneDNN's pooling_forward (inference), and
// adaptive_avg_pool2d as an average pool when the windows are uniform, else a plain kernel.
//
// PyTorch's ceil_mode becomes a larger right padding: oneDNN sizes the output as
// (H + pl + pr - ek) / s + 1 (floor), so pr = (OH - 1) * s + ek - H - pl reproduces the
// shape the op table inferred. Max pooling ignores padding; avg "exclude padding" counts only
// real inputs, so both agree with PyTorch. avg "include padding" counts the whole window,
// while PyTorch counts only the part inside the (symmetrically) padded input: the two differ
// exactly when ceil_mode adds right padding beyond pl, and that case is declined (the
// reference kernel runs; the plan dump says so).
//
// Layout: max_pool2d and avg_pool2d read and write the layout their `block` attribute names
// (block_conv_layout keeps a pool between convs in the convs' layout). oneDNN 3.2 has no jit
// pooling for plain NCHW on AVX2 (it picks `simple_nchw`, a scalar loop: ResNet-50's stem max
// pool took 12 of its 62 ms at 2 threads on the AVX2 EPYC). Where a plain pool's primitive is
// not a jit one, the kernel reorders x into the layout this CPU prefers (nChw8c, or NHWC with
// AVX-512), pools there with the jit kernel and reorders the result back: two copies of about
// the input's and the output's size instead of a scalar pass.
//
// NaN and -inf: oneDNN's max pooling takes a vector max that drops NaN, where PyTorch's max
// pool gives NaN for every window holding one, and it starts from -FLT_MAX, so a window of -inf
// gives -3.4e38 instead of -inf. After the primitive, the max kernel scans its input (one
// vectorised read, about what the pool itself reads once) and recomputes, as PyTorch does, the
// planes that hold a NaN or a -inf; any other input costs only the scan.
#include <immintrin.h>

#include <cmath>

#include "kernels/channel_block.h"
#include "kernels/onednn/onednn_util.h"

namespace updraft::onednn {

namespace {

// The window of a pool node (ir/ops/params.h); d is PyTorch's dilation (>= 1).
using Window = PoolWindow;

// [N, C, H, W], or [1, C, H, W] for an unbatched [C, H, W].
dims nchw(const std::vector<int64_t>& s) {
  return s.size() == 4 ? dims{s[0], s[1], s[2], s[3]} : dims{1, s[0], s[1], s[2]};
}

class PoolKernel final : public Kernel {
 public:
  void run(const TensorView* in, TensorView* out, void* scratch) const override {
    cpu::ScopedThreads threads(threads_);
    dnnl::stream& s = thread_stream();
    const void* x = x_.get(in, scratch, op_);
    if (blocked_) {
      void* bx = at_offset(scratch, blk_src_);
      void* by = at_offset(scratch, blk_dst_);
      to_blocked_.run(x, bx, at_offset(scratch, prim_scratch_), s);
      execute_pool(bx, by, scratch, s);
      to_plain_.run(by, out[0].data, at_offset(scratch, prim_scratch_), s);
    } else {
      execute_pool(x, out[0].data, scratch, s);
    }
    s.wait();
    if (alg_ == dnnl::algorithm::pooling_max) propagate_nan(static_cast<const float*>(x), out[0].ptr<float>());
  }
  size_t scratch_bytes() const override { return scratch_total_; }
  std::string name() const override { return name_; }

  static std::unique_ptr<Kernel> create(const KernelContext& ctx, const char* op, dnnl::algorithm alg,
                                        const Window& w) {
    auto k = std::make_unique<PoolKernel>();
    k->op_ = op;
    k->alg_ = alg;
    k->w_ = w;
    // One window's worth of element operations per output element.
    k->threads_ = cpu::threads_for_work(static_cast<double>(numel_of(ctx.out_shapes[0])) * w.k[0] * w.k[1],
                                        ctx.thread_budget());
    cpu::ScopedThreads threads(k->threads_);
    dims src = nchw(ctx.in_shapes[0]), dst = nchw(ctx.out_shapes[0]);
    k->planes_ = src[0] * src[1], k->H_ = src[2], k->W_ = src[3], k->OH_ = dst[2], k->OW_ = dst[3];
    dims pl{w.p[0], w.p[1]}, pr(2);
    for (int i = 0; i < 2; ++i) {
      int64_t ek = w.d[i] * (w.k[i] - 1) + 1;
      pr[i] = std::max(pl[i], (dst[2 + i] - 1) * w.s[i] + ek - src[2 + i] - pl[i]);
    }
    auto pool_pd = [&](tag t) {
      return dnnl::pooling_forward::primitive_desc(
          engine(), dnnl::prop_kind::forward_inference, alg, dnnl::memory::desc(src, dt::f32, t),
          dnnl::memory::desc(dst, dt::f32, t), {w.s[0], w.s[1]}, {w.k[0], w.k[1]}, {w.d[0] - 1, w.d[1] - 1}, pl, pr,
          user_scratchpad_attr());
    };
    // A pool reads and writes the graph's layout (the node's block, set by block_conv_layout;
    // 0 plain). Where oneDNN has no jit pool for it (plain NCHW on AVX2, nChw16c on an AVX2 CPU
    // given conv_layout="nchw16c"), it pools in this CPU's layout between two reorders.
    k->layout_ = ctx.node.has_attr("block") ? ctx.node.attr("block").i() : 0;
    k->C_ = src[1];
    const tag outer = channel_block_tag(k->layout_, src[1]);
    const int64_t block = preferred_channel_block();
    const tag inner = channel_block_tag(block == kChannelsLast ? src[1] : block, src[1]);
    try {
      k->pd_ = pool_pd(outer);
      if (!is_jit(k->pd_) && block != 0 && inner != outer) {
        auto other = pool_pd(inner);
        if (is_jit(other)) k->pd_ = other, k->blocked_ = true;
      }
      k->prim_ = dnnl::pooling_forward(k->pd_);
    } catch (const dnnl::error& e) {
      fail_create(op, "a pooling primitive for x " + shape_text(ctx.in_shapes[0]), e);
    }
    ScratchPlan plan;
    size_t prim_scratch = scratchpad_bytes(k->pd_);
    if (k->blocked_) {
      k->to_blocked_.create(op, dnnl::memory::desc(src, dt::f32, outer), k->pd_.src_desc());
      k->to_plain_.create(op, k->pd_.dst_desc(), dnnl::memory::desc(dst, dt::f32, outer));
      prim_scratch = std::max({prim_scratch, k->to_blocked_.scratch_bytes(), k->to_plain_.scratch_bytes()});
      k->blk_src_ = plan.add(k->pd_.src_desc().get_size());
      k->blk_dst_ = plan.add(k->pd_.dst_desc().get_size());
    }
    k->prim_scratch_ = plan.add(prim_scratch);  // the steps run one after another: one region
    k->x_.plan(ctx, 0, numel_of(ctx.in_shapes[0]), plan);
    k->scratch_total_ = plan.total();
    k->args_.add(DNNL_ARG_SRC, k->pd_.src_desc());
    k->args_.add(DNNL_ARG_DST, k->pd_.dst_desc());
    k->args_.add(DNNL_ARG_SCRATCHPAD, k->pd_.scratchpad_desc());
    k->name_ = std::string("onednn_f32_") + op + ":" + k->pd_.impl_info_str() +
               (k->layout_ ? ":block" + std::to_string(k->layout_) : "") +
               (k->blocked_ ? (block == kChannelsLast ? std::string(":via_nhwc") : ":via_block" + std::to_string(block)) : "");
    return k;
  }

 private:
  // Whether x holds a NaN or a -inf: !(x > -inf), unordered compares true.
  static bool has_nan_or_ninf(const float* x, int64_t n) {
    const __m256 ninf = _mm256_set1_ps(-INFINITY);
    __m256 acc = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) acc = _mm256_or_ps(acc, _mm256_cmp_ps(_mm256_loadu_ps(x + i), ninf, _CMP_NGT_UQ));
    bool found = _mm256_movemask_ps(acc) != 0;
    for (; i < n; ++i) found |= !(x[i] > -INFINITY);
    return found;
  }

  // The max of the window at (oh, ow) as PyTorch defines it: a NaN gives NaN, a window of
  // -inf gives -inf; padding is never read. at(ih, iw) reads the plane.
  template <typename At>
  float torch_max(At at, int64_t oh, int64_t ow) const {
    float m = -INFINITY;
    for (int64_t i = 0; i < w_.k[0]; ++i) {
      const int64_t ih = oh * w_.s[0] - w_.p[0] + i * w_.d[0];
      if (ih < 0 || ih >= H_) continue;
      for (int64_t j = 0; j < w_.k[1]; ++j) {
        const int64_t iw = ow * w_.s[1] - w_.p[1] + j * w_.d[1];
        if (iw < 0 || iw >= W_) continue;
        const float v = at(ih, iw);
        if (v > m || std::isnan(v)) m = v;
        if (std::isnan(m)) return m;
      }
    }
    return m;
  }

  // Recomputes, as PyTorch does, the planes of x that hold a NaN or a -inf: plain planes one by
  // one; in a channel layout (a plane is strided there) every plane once x holds any.
  void propagate_nan(const float* x, float* y) const {
    const int64_t hw = H_ * W_;
    if (layout_ == 0) {
      cpu::parallel_for(planes_, threads_, [&](int64_t p) {
        const float* xp = x + p * hw;
        if (!has_nan_or_ninf(xp, hw)) return;
        float* yp = y + p * OH_ * OW_;
        for (int64_t oh = 0; oh < OH_; ++oh)
          for (int64_t ow = 0; ow < OW_; ++ow)
            yp[oh * OW_ + ow] = torch_max([&](int64_t ih, int64_t iw) { return xp[ih * W_ + iw]; }, oh, ow);
      });
      return;
    }
    if (!has_nan_or_ninf(x, planes_ * hw)) return;
    const int64_t xs[4] = {planes_ / C_, C_, H_, W_}, ys[4] = {planes_ / C_, C_, OH_, OW_};
    cpu::parallel_for(planes_, threads_, [&](int64_t p) {
      const int64_t n = p / C_, c = p % C_;
      auto at = [&](int64_t ih, int64_t iw) { return x[channel_block_offset(n, c, ih, iw, xs, layout_)]; };
      for (int64_t oh = 0; oh < OH_; ++oh)
        for (int64_t ow = 0; ow < OW_; ++ow) y[channel_block_offset(n, c, oh, ow, ys, layout_)] = torch_max(at, oh, ow);
    });
  }

  // One reorder between the plain and the blocked layout, with its own argument sets.
  struct Reorder {
    dnnl::reorder::primitive_desc pd;
    dnnl::reorder prim;
    ArgCache args;  // from, to, scratchpad
    void create(const char* op, const dnnl::memory::desc& from, const dnnl::memory::desc& to) {
      try {
        pd = dnnl::reorder::primitive_desc(engine(), from, engine(), to, user_scratchpad_attr());
        prim = dnnl::reorder(pd);
      } catch (const dnnl::error& e) {
        fail_create(op, "a layout reorder around the pooling", e);
      }
      args.add(DNNL_ARG_FROM, from);
      args.add(DNNL_ARG_TO, to);
      args.add(DNNL_ARG_SCRATCHPAD, pd.scratchpad_desc());
    }
    size_t scratch_bytes() const { return scratchpad_bytes(pd); }
    void run(const void* from, void* to, void* prim_scratch, dnnl::stream& s) const {
      ArgCache::Call call = args.acquire();
      call.set(0, from);
      call.set(1, to);
      call.set(2, prim_scratch);
      call.execute(prim, s);
    }
  };

  static bool is_jit(const dnnl::pooling_forward::primitive_desc& pd) {
    return std::string(pd.impl_info_str()).rfind("jit", 0) == 0;
  }

  void execute_pool(const void* x, void* y, void* scratch, dnnl::stream& s) const {
    ArgCache::Call call = args_.acquire();  // argument order: src, dst, scratchpad (create())
    call.set(0, x);
    call.set(1, y);
    call.set(2, at_offset(scratch, prim_scratch_));
    call.execute(prim_, s);
  }

  const char* op_ = "";
  int64_t layout_ = 0, C_ = 1;  // the graph's layout of x and y (kernels/channel_block.h)
  bool blocked_ = false;  // pools in this CPU's layout between two reorders from and to the graph's
  Reorder to_blocked_, to_plain_;  // to that layout, and back to the graph's
  size_t blk_src_ = 0, blk_dst_ = 0;
  dnnl::algorithm alg_ = dnnl::algorithm::pooling_max;
  Window w_{};
  int64_t planes_ = 0, H_ = 0, W_ = 0, OH_ = 0, OW_ = 0;
  int threads_ = 1;
  dnnl::pooling_forward::primitive_desc pd_;
  dnnl::pooling_forward prim_;
  DenseInput x_;
  ArgCache args_;
  size_t prim_scratch_ = 0, scratch_total_ = 0;
  std::string name_;
};

std::unique_ptr<Kernel> create_max_pool(const KernelContext& ctx) {
  if (has_empty_tensor(ctx)) return nullptr;
  return PoolKernel::create(ctx, "max_pool2d", dnnl::algorithm::pooling_max, PoolWindow::of(ctx.node, true));
}

std::unique_ptr<Kernel> create_avg_pool(const KernelContext& ctx) {
  if (has_empty_tensor(ctx)) return nullptr;
  Window w = PoolWindow::of(ctx.node, false);
  bool include_pad = ctx.node.attr("count_include_pad").b();
  if (include_pad) {
    dims src = nchw(ctx.in_shapes[0]), dst = nchw(ctx.out_shapes[0]);
    for (int i = 0; i < 2; ++i)
      if ((dst[2 + i] - 1) * w.s[i] + w.k[i] > src[2 + i] + 2 * w.p[i]) return nullptr;  // see the file comment
  }
  return PoolKernel::create(ctx, "avg_pool2d",
                            include_pad ? dnnl::algorithm::pooling_avg_include_padding
                                        : dnnl::algorithm::pooling_avg_exclude_padding,
                            w);
}

// adaptive_avg_pool2d with non-uniform windows: PyTorch's [floor(i*H/OH), ceil((i+1)*H/OH)).
class AdaptiveAvgKernel final : public Kernel {
 public:
  AdaptiveAvgKernel(const KernelContext& ctx) {
    dims s = nchw(ctx.in_shapes[0]), d = nchw(ctx.out_shapes[0]);
    planes_ = s[0] * s[1], H_ = s[2], W_ = s[3], OH_ = d[2], OW_ = d[3];
    // Each output element reads about (H / OH + 1) * (W / OW + 1) inputs: count the input once.
    threads_ = cpu::threads_for_work(static_cast<double>(planes_ * H_ * W_), ctx.thread_budget());
    ScratchPlan plan;
    x_.plan(ctx, 0, numel_of(ctx.in_shapes[0]), plan);
    scratch_total_ = plan.total();
  }
  void run(const TensorView* in, TensorView* out, void* scratch) const override {
    const float* x = static_cast<const float*>(x_.get(in, scratch, "adaptive_avg_pool2d"));
    float* y = out[0].ptr<float>();
    cpu::parallel_for(planes_, threads_, [&](int64_t p) {
      const float* xp = x + p * H_ * W_;
      float* yp = y + p * OH_ * OW_;
      for (int64_t oh = 0; oh < OH_; ++oh) {
        int64_t h0 = oh * H_ / OH_, h1 = ((oh + 1) * H_ + OH_ - 1) / OH_;
        for (int64_t ow = 0; ow < OW_; ++ow) {
          int64_t w0 = ow * W_ / OW_, w1 = ((ow + 1) * W_ + OW_ - 1) / OW_;
          float sum = 0;
          for (int64_t ih = h0; ih < h1; ++ih)
            for (int64_t iw = w0; iw < w1; ++iw) sum += xp[ih * W_ + iw];
          yp[oh * OW_ + ow] = sum / static_cast<float>((h1 - h0) * (w1 - w0));
        }
      }
    });
  }
  size_t scratch_bytes() const override { return scratch_total_; }
  std::string name() const override { return "cpu_f32_adaptive_avg_pool2d"; }

 private:
  int64_t planes_, H_, W_, OH_, OW_;
  int threads_ = 1;
  DenseInput x_;
  size_t scratch_total_ = 0;
};

std::unique_ptr<Kernel> create_adaptive_avg_pool(const KernelContext& ctx) {
  if (has_empty_tensor(ctx)) return nullptr;
  dims s = nchw(ctx.in_shapes[0]), d = nchw(ctx.out_shapes[0]);
  if (s[2] % d[2] == 0 && s[3] % d[3] == 0) {
    // Uniform windows (including the global 1x1 mean): a plain average pool.
    Window w{};
    for (int i = 0; i < 2; ++i) w.k[i] = w.s[i] = s[2 + i] / d[2 + i], w.p[i] = 0, w.d[i] = 1;
    return PoolKernel::create(ctx, "adaptive_avg_pool2d", dnnl::algorithm::pooling_avg_exclude_padding, w);
  }
  return std::make_unique<AdaptiveAvgKernel>(ctx);
}

}  // namespace

void register_pool(KernelRegistry& r) {
  r.add("max_pool2d", Device::cpu, create_max_pool);
  r.add("avg_pool2d", Device::cpu, create_avg_pool);
  r.add("adaptive_avg_pool2d", Device::cpu, create_adaptive_avg_pool);
}

}  // namespace updraft::onednn
