// conv2d on oneDNN: convolution_forward (inference) built for the concrete shapes, with the
// epilogue fused as post-ops and constant weights prepacked once.
//
// Layouts: src and dst are plain NCHW (abcd), channel-blocked nChw8c / nChw16c or channels-last
// (nhwc: a block of all the channels) as the node's src_block / dst_block say (set by the
// block_conv_layout pass, which keeps activations blocked through conv chains and inserts
// channel_block reorders where a plain consumer needs them); the residual has dst's layout.
// With plain src/dst oneDNN falls back to its gemm-based convolution ("gemm:jit"); with blocked
// ones it runs its direct jit kernels, with nhwc on AVX-512 its brgemm ones ("brgconv"). The weights use
// format_tag::any so oneDNN picks their layout, and constant weights are reordered once.
//
// Weight scale (has_weight_scale, a folded batch norm): the weight reorder multiplies each
// output channel by its scale (a reorder with per-channel source scales, one f32 multiply per
// element: the same bits as multiplying the weights beforehand). With constant weights that is
// the prepack itself, so the fold costs nothing at run time and no scaled copy of the weights
// exists; with weight inputs the reorder runs every call, as it would for a layout change.
//
// Residual: preferably a binary_add post-op reading the residual tensor in place. A sum
// post-op accumulates into whatever dst already holds, so run() must first copy the residual
// into the output: an extra pass over the output per call, and a precondition on dst that
// gets awkward once dst has a blocked layout (the residual would need that layout too).
// binary_add names its operand with its own descriptor and leaves dst write-only.
// But measured on oneDNN v3.2: with plain NCHW src/dst the convolution runs as "gemm:jit",
// which implements sum but not binary post-ops, and asking for binary_add there silently
// yields "ref:any" (plain loops, orders of magnitude slower). So the factory asks for
// binary_add and, when that lands on a reference implementation, rebuilds with the sum
// post-op (ResidualMode::sum) and copies the residual into dst before each call. When that is a
// reference implementation too (seen for 3x3 convs in ResNet-50: 3 s instead of 2 ms), the conv
// runs with its bias only and a separate binary primitive computes act(dst + residual) in place
// (ResidualMode::separate): one extra pass over dst, both primitives jitted. conv2d is not
// declared in-place, so the output never aliases the residual otherwise.
//
// relu / clamp epilogues: oneDNN's post-ops turn NaN into the bound, so by default the kernel
// applies them after the primitive (apply_engine_act, NaN kept). A node the plan proves finite
// (KernelContext::finite_inputs, runtime/finite_inputs.h) also gets a primitive with the
// activation as a post-op, which run() takes on calls where call_inputs_finite().
//
// Activations after a gemm-based convolution: oneDNN v3.2's gemm-based convolution
// ("x64:gemm:jit", the form a plain NCHW conv runs in) applies eltwise post-ops one element at a
// time, through scalar code, after its GEMM. A 1x1 conv 24 -> 144 on 56x56 took 250 us alone and
// 2.7-4.5 ms with relu, relu6, hardswish, silu or gelu as a post-op (docs/BENCHMARKS.md, "Issue 19: activations after
// gemm-based convolutions"). So on that implementation the activation is never a post-op: relu
// and clamp run in the engine's pass above (no fused primitive is kept), and the others in a
// oneDNN eltwise primitive over dst, in place (act_after_), one vectorised pass while dst is
// still in cache. oneDNN's rather than the engine's elementwise functions: its jitted erf GELU
// took 0.46 ns an element here, the engine's exact one 1.6 (256-bit only), and it is the same
// algorithm the post-op named, NaN handling included.
//
// Reference implementations: in the channel-blocked layout oneDNN v3.2 has no jit kernel for
// some problems (large "same" padding against the image: Conv1d k=32 p=16 over 49 steps, k=15
// p=7 on 32x32, k=7 p=7 on 16x16) and picks "ref:any", 100-2000x slower than eager. The
// kernel then tries other forms of the same conv (create(): a plain source, the gemm-based
// convolution in plain NCHW, a zero-bordered copy of the source run unpadded, more threads)
// and runs the first that oneDNN jits between reorders from and to the graph's layouts
// ("via_plain" or "pre_padded" in the kernel name); each reorder or copy is one pass over a
// tensor. A conv that only a reference
// implementation serves in every form is refused with an error that says so: the partition
// falls back to PyTorch and the report gives the reason. No conv ever runs on "ref" silently.
#include <cstring>
#include <optional>

#include "kernels/onednn/onednn_util.h"

namespace updraft::onednn {

namespace {

constexpr const char* kOp = "conv2d";

class ConvKernel final : public Kernel {
 public:
  void run(const TensorView* in, TensorView* out, void* scratch) const override {
    cpu::ScopedThreads threads(threads_);
    dnnl::stream& s = thread_stream();
    ArgCache::Call call = args_.acquire();
    void* src = x_.get(in, scratch, kOp);
    void* dst = out[0].data;
    // Another form than the graph's (create()): the source to plain and padded, dst in scratch.
    if (src_reorder_) src = reorder_to(*src_reorder_, outer_src_md_, plain_src_md_, src, at_offset(scratch, src_plain_), s);
    if (pre_pad_) src = pad_into(static_cast<const float*>(src), reinterpret_cast<float*>(at_offset(scratch, padded_)));
    if (dst_reorder_) dst = at_offset(scratch, dst_plain_);
    call.set(arg_src_, src);
    call.set(arg_dst_, dst);
    call.set(arg_scratch_, at_offset(scratch, prim_scratch_));
    if (!packed_w_) {  // else the prepacked constant, fixed in the cache
      void* w = w_.get(in, scratch, kOp);
      if (w_reorder_) {
        // Non-constant weights in the user layout (or scaled): reorder into the primitive's
        // layout each call.
        void* packed = at_offset(scratch, w_packed_);
        std::unordered_map<int, dnnl::memory> args = {
            {DNNL_ARG_FROM, wrap(w_user_md_, w)},
            {DNNL_ARG_TO, wrap(pd_.weights_desc(), packed)},
            {DNNL_ARG_SCRATCHPAD, wrap(reorder_pd_.scratchpad_desc(), at_offset(scratch, reorder_scratch_))}};
        if (scaled_) args[DNNL_ARG_ATTR_SCALES | DNNL_ARG_FROM] = wrap(scale_md_, scale_.get(in, scratch, kOp));
        w_reorder_->execute(s, args);
        call.set(arg_w_, packed);
      } else {
        call.set(arg_w_, w);
      }
    }
    if (arg_bias_ >= 0) call.set(arg_bias_, in[ep_.bias_input].data);
    void* res = nullptr;
    if (residual_mode_ == ResidualMode::binary_add || residual_mode_ == ResidualMode::separate) {
      res = res_.get(in, scratch, kOp);
      if (res_reorder_)
        res = reorder_to(*res_reorder_, outer_dst_md_, dst_md_, res, at_offset(scratch, res_plain_), s);
    }
    if (arg_res_ >= 0) call.set(arg_res_, res);
    if (residual_mode_ == ResidualMode::sum) {
      if (res_reorder_)
        reorder_to(*res_reorder_, outer_dst_md_, dst_md_, in[ep_.residual_input].data, dst, s);
      else
        copy_residual_into(in[ep_.residual_input], out[0]);  // dst is out[0] unless it is reordered
    }
    // The activation as a post-op where the plan found this call's inputs finite (oneDNN's
    // relu / clip differ from PyTorch only on NaN); else after the primitive, keeping NaN.
    const bool act_fused = fused_prim_ && call_inputs_finite();
    call.execute(act_fused ? *fused_prim_ : prim_, s);
    if (residual_mode_ == ResidualMode::separate) {
      const dnnl::memory& d = call.memory(arg_dst_);
      add_.execute(s, {{DNNL_ARG_SRC_0, d},
                       {DNNL_ARG_SRC_1, wrap(dst_md_, res)},
                       {DNNL_ARG_DST, d},
                       {DNNL_ARG_SCRATCHPAD, wrap(add_pd_.scratchpad_desc(), at_offset(scratch, add_scratch_))}});
    }
    if (act_after_) {  // in place over dst; its arguments reused as the conv's are (ArgCache)
      ArgCache::Call act = act_args_.acquire();
      act.set(0, dst);
      act.set(1, dst);
      act.set(2, at_offset(scratch, act_scratch_));
      act.execute(*act_after_, s);
    }
    if (dst_reorder_) reorder_to(*dst_reorder_, dst_md_, outer_dst_md_, dst, out[0].data, s);
    s.wait();
    // The whole output buffer in the graph's layout, channel-block padding included (the act
    // keeps its zeros zero); dst_md_ may be another layout (a larger padded block) when
    // via_plain_.
    if (!act_fused)
      apply_engine_act(ep_, out[0].ptr<float>(), static_cast<int64_t>(outer_dst_md_.get_size() / sizeof(float)), threads_);
  }

  size_t scratch_bytes() const override { return scratch_total_; }
  std::string name() const override { return name_; }
  bool fuses_when_finite() const override { return fused_prim_.has_value(); }

  static std::unique_ptr<Kernel> create(const KernelContext& ctx);

 private:
  // Runs `r` (a plain <-> blocked reorder without scratchpad) from `from` to `to`; returns `to`.
  static void* reorder_to(const dnnl::reorder& r, const dnnl::memory::desc& from_md, const dnnl::memory::desc& to_md,
                          const void* from, void* to, dnnl::stream& s) {
    r.execute(s, {{DNNL_ARG_FROM, wrap(from_md, from)}, {DNNL_ARG_TO, wrap(to_md, to)}});
    return to;
  }
  // Picks the primitive for src_md_ / dst_md_ and the residual mode (see the file comment).
  template <typename MakePd>
  void choose_primitive(const MakePd& make_pd);
  // Moves a non-engine activation out of a gemm-based pd_ into act_after_ (the file comment);
  // `rebuild` makes pd_ again for the same form, now without it.
  template <typename Rebuild>
  void act_out_of_gemm(const Rebuild& rebuild);
  // Keeps `fused` (pd_ with the relu / clamp epilogue as a post-op) as the primitive for calls
  // with finite inputs, when oneDNN serves it with pd_'s implementation, weight layout and
  // scratchpad (so the packed weights and the planned scratch serve both).
  void keep_fused_act(const dnnl::convolution_forward::primitive_desc& fused);
  // Builds the reorders between the graph's blocked layouts and the plain ones the primitive
  // runs in, and plans their buffers.
  void plan_plain_copies(ScratchPlan& plan);

  // Copies the plain source [N, C, H, W] into the interior of the zeroed [N, C, H + pads, W + pads].
  void* pad_into(const float* src, float* padded) const {
    const int64_t N = src_dims_[0], C = src_dims_[1], H = src_dims_[2], W = src_dims_[3];
    const int64_t Hp = padded_dims_[2], Wp = padded_dims_[3];
    std::memset(padded, 0, sizeof(float) * N * C * Hp * Wp);
    for (int64_t nc = 0; nc < N * C; ++nc)
      for (int64_t h = 0; h < H; ++h)
        std::memcpy(padded + (nc * Hp + h + pad_top_) * Wp + pad_left_, src + (nc * H + h) * W, sizeof(float) * W);
    return padded;
  }

  bool via_plain_ = false;  // the primitive's layouts differ from the graph's, or it reads a padded copy
  bool pre_pad_ = false;    // the primitive reads a zero-bordered copy of the source, unpadded
  dnnl::memory::desc outer_src_md_, outer_dst_md_;  // the graph's layouts (src_md_/dst_md_: the primitive's)
  dnnl::memory::desc plain_src_md_;                 // the source in plain NCHW, unpadded
  dims src_dims_, padded_dims_;
  int64_t pad_top_ = 0, pad_left_ = 0;
  size_t padded_ = 0;
  std::optional<dnnl::reorder> src_reorder_, dst_reorder_, res_reorder_;
  size_t src_plain_ = 0, dst_plain_ = 0, res_plain_ = 0;
  Epilogue ep_;
  bool scaled_ = false;  // input 2 scales the weights per output channel
  int threads_ = 1;
  ResidualMode residual_mode_ = ResidualMode::none;
  dnnl::memory::desc src_md_, dst_md_, w_user_md_, bias_md_, scale_md_;
  dnnl::convolution_forward::primitive_desc pd_;
  dnnl::convolution_forward prim_;
  std::optional<dnnl::convolution_forward> fused_prim_;  // keep_fused_act
  dnnl::binary::primitive_desc add_pd_;  // ResidualMode::separate: dst = act(dst + residual)
  dnnl::binary add_;
  size_t add_scratch_ = 0;
  bool act_out_of_pd_ = false;  // the activation runs in act_after_, not as pd_'s post-op
  dnnl::eltwise_forward::primitive_desc act_pd_;
  std::optional<dnnl::eltwise_forward> act_after_;  // dst = act(dst), in place
  ArgCache act_args_;                                 // its src, dst and scratchpad, in that order
  size_t act_scratch_ = 0;
  std::optional<dnnl::memory> packed_w_;  // constant weights in pd_.weights_desc() layout
  std::shared_ptr<void> packed_storage_;   // its storage
  dnnl::reorder::primitive_desc reorder_pd_;
  std::optional<dnnl::reorder> w_reorder_;  // non-constant weights whose layout differs
  DenseInput x_, w_, scale_, res_;
  ArgCache args_;  // prim_'s execute() arguments; indices below, -1 when absent or fixed
  int arg_src_ = -1, arg_dst_ = -1, arg_scratch_ = -1, arg_w_ = -1, arg_bias_ = -1, arg_res_ = -1;
  size_t prim_scratch_ = 0, reorder_scratch_ = 0, w_packed_ = 0, scratch_total_ = 0;
  std::string name_;
};

template <typename MakePd>
void ConvKernel::choose_primitive(const MakePd& make_pd) {
  residual_mode_ = ep_.has_residual ? ResidualMode::binary_add : ResidualMode::none;
  pd_ = make_pd(residual_mode_);
  if (residual_mode_ != ResidualMode::binary_add || !is_reference_impl(pd_.impl_info_str())) return;
  auto with_sum = make_pd(ResidualMode::sum);
  if (!is_reference_impl(with_sum.impl_info_str())) {
    pd_ = with_sum;
    residual_mode_ = ResidualMode::sum;
    return;
  }
  pd_ = make_pd(ResidualMode::separate);
  residual_mode_ = ResidualMode::separate;
  Epilogue act_only = ep_;
  act_only.has_residual = false;
  dnnl::primitive_attr add_attr = user_scratchpad_attr();
  append_post_ops(act_only, add_attr, ResidualMode::none, nullptr);
  add_pd_ = dnnl::binary::primitive_desc(engine(), dnnl::algorithm::binary_add, dst_md_, dst_md_, dst_md_, add_attr);
  add_ = dnnl::binary(add_pd_);
}

// oneDNN's gemm-based convolutions ("x64:gemm:jit", "gemm:jit", ...; not brgemm's "brg..."),
// which apply post-ops one element at a time.
bool applies_post_ops_per_element(const char* impl) {
  const std::string s = std::string(":") + impl + ":";
  return s.find(":gemm:") != std::string::npos;
}

template <typename Rebuild>
void ConvKernel::act_out_of_gemm(const Rebuild& rebuild) {
  if (!ep_.act || act_in_engine(ep_) || residual_mode_ == ResidualMode::separate ||
      !applies_post_ops_per_element(pd_.impl_info_str()))
    return;
  // The activation's eltwise algorithm and parameters from the post-op table (append_post_ops).
  Epilogue act_only = ep_;
  act_only.has_bias = act_only.has_residual = false;
  dnnl::primitive_attr with_act;
  append_post_ops(act_only, with_act, ResidualMode::none, nullptr);
  dnnl::algorithm alg;
  float alpha = 0, beta = 0;
  with_act.get_post_ops().get_params_eltwise(0, alg, alpha, beta);
  act_out_of_pd_ = true;
  rebuild();
  if (is_reference_impl(pd_.impl_info_str())) {  // never seen; the post-op form is jitted, keep it
    act_out_of_pd_ = false;
    rebuild();
    return;
  }
  act_pd_ = dnnl::eltwise_forward::primitive_desc(engine(), dnnl::prop_kind::forward_inference, alg, dst_md_, dst_md_,
                                                  alpha, beta, user_scratchpad_attr());
  act_after_ = dnnl::eltwise_forward(act_pd_);
  act_args_.add(DNNL_ARG_SRC, dst_md_);
  act_args_.add(DNNL_ARG_DST, dst_md_);
  act_args_.add(DNNL_ARG_SCRATCHPAD, act_pd_.scratchpad_desc());
}

void ConvKernel::keep_fused_act(const dnnl::convolution_forward::primitive_desc& fused) {
  if (applies_post_ops_per_element(fused.impl_info_str())) return;  // slower than the engine's pass
  if (std::string(fused.impl_info_str()) != pd_.impl_info_str() || fused.weights_desc() != pd_.weights_desc() ||
      fused.scratchpad_desc() != pd_.scratchpad_desc())
    return;
  fused_prim_ = dnnl::convolution_forward(fused);
}

void ConvKernel::plan_plain_copies(ScratchPlan& plan) {
  try {
    if (outer_src_md_ != plain_src_md_) {
      src_reorder_ = dnnl::reorder(dnnl::reorder::primitive_desc(engine(), outer_src_md_, engine(), plain_src_md_));
      src_plain_ = plan.add(plain_src_md_.get_size());
    }
    if (pre_pad_) padded_ = plan.add(src_md_.get_size());
    if (outer_dst_md_ != dst_md_) {
      dst_plain_ = plan.add(dst_md_.get_size());
      dst_reorder_ = dnnl::reorder(dnnl::reorder::primitive_desc(engine(), dst_md_, engine(), outer_dst_md_));
      if (ep_.has_residual) {
        res_reorder_ = dnnl::reorder(dnnl::reorder::primitive_desc(engine(), outer_dst_md_, engine(), dst_md_));
        if (residual_mode_ != ResidualMode::sum) res_plain_ = plan.add(dst_md_.get_size());
      }
    }
  } catch (const dnnl::error& e) {
    fail_create(kOp, "the plain <-> blocked reorders around a convolution", e);
  }
}

std::unique_ptr<Kernel> ConvKernel::create(const KernelContext& ctx) {
  if (has_empty_tensor(ctx)) return nullptr;
  const Node& n = ctx.node;
  auto k = std::make_unique<ConvKernel>();
  k->scaled_ = n.attr("has_weight_scale").b();
  k->ep_ = Epilogue::of(n, k->scaled_ ? 3 : 2);
  const auto &xs = ctx.in_shapes[0], &ws = ctx.in_shapes[1], &ys = ctx.out_shapes[0];
  int64_t g = n.attr("groups").i();
  auto st = spatial_pair(n.attr("stride")), pad = spatial_pair(n.attr("padding")), dil = spatial_pair(n.attr("dilation"));
  auto pad_end = n.attr("padding_end").ints().empty() ? pad : spatial_pair(n.attr("padding_end"));
  int64_t O = ws[0];
  // 2 flops per multiply-add: every output element sums C/g * kh * kw products. A depthwise
  // conv does few flops per byte it reads and writes, so its bytes count too (threads_for_gemm).
  const int max_threads = ctx.num_threads > 0 ? ctx.num_threads : omp_get_max_threads();
  const double flops = 2.0 * static_cast<double>(numel_of(ys)) * ws[1] * ws[2] * ws[3];
  const double bytes = 4.0 * static_cast<double>(numel_of(xs) + numel_of(ys) + numel_of(ws));
  k->threads_ = cpu::threads_for_gemm(flops, bytes, ctx.thread_budget());
  std::optional<cpu::ScopedThreads> threads(std::in_place, k->threads_);  // primitives are created for the count they run with

  const dims src_dims(xs.begin(), xs.end()), dst_dims(ys.begin(), ys.end());
  const int64_t src_block = ctx.attr("src_block").i(), dst_block = ctx.attr("dst_block").i();
  k->outer_src_md_ = dnnl::memory::desc(src_dims, dt::f32, channel_block_tag(src_block, xs[1]));
  k->outer_dst_md_ = dnnl::memory::desc(dst_dims, dt::f32, channel_block_tag(dst_block, ys[1]));
  k->plain_src_md_ = dnnl::memory::desc(src_dims, dt::f32, tag::abcd);
  k->src_dims_ = src_dims;
  // [O, C/g, kh, kw] row-major is exactly goihw once O splits into (g, O/g).
  dims w_dims = g == 1 ? dims{ws[0], ws[1], ws[2], ws[3]} : dims{g, O / g, ws[1], ws[2], ws[3]};
  k->w_user_md_ = dnnl::memory::desc(w_dims, dt::f32, g == 1 ? tag::oihw : tag::goihw);
  dnnl::memory::desc w_any(w_dims, dt::f32, tag::any);
  if (k->ep_.has_bias) k->bias_md_ = dnnl::memory::desc({O}, dt::f32, tag::a);
  if (k->scaled_) k->scale_md_ = dnnl::memory::desc({O}, dt::f32, tag::a);
  // The reorder's scale mask: the dims that make up the output channel (O, or g and O/g).
  const int scale_mask = g == 1 ? 1 : 3;

  // PyTorch floors the output size; oneDNN's own size rule (integer division) gives the same
  // output with padding_r = padding_end (= padding unless fold_pad_conv made it asymmetric).
  dims strides{st[0], st[1]}, dilates{dil[0] - 1, dil[1] - 1}, pl{pad[0], pad[1]}, pr{pad_end[0], pad_end[1]};
  std::string what = "a convolution for x " + shape_text(xs) + ", w " + shape_text(ws) + ", groups " +
                     std::to_string(g);
  auto make_pd = [&](ResidualMode mode, const dims& pl, const dims& pr, bool finite = false) {
    dnnl::primitive_attr attr = user_scratchpad_attr();
    Epilogue post = k->ep_;
    if (k->act_out_of_pd_) post.act.reset();
    if (mode != ResidualMode::separate) append_post_ops(post, attr, mode, &k->dst_md_, finite);
    using pd_t = dnnl::convolution_forward::primitive_desc;
    const auto fwd = dnnl::prop_kind::forward_inference;
    const auto alg = dnnl::algorithm::convolution_direct;
    return k->ep_.has_bias
               ? pd_t(engine(), fwd, alg, k->src_md_, w_any, k->bias_md_, k->dst_md_, strides, dilates, pl, pr, attr)
               : pd_t(engine(), fwd, alg, k->src_md_, w_any, k->dst_md_, strides, dilates, pl, pr, attr);
  };
  // The forms a conv may run in, in order of preference, until oneDNN gives one a jit kernel:
  // the graph's layouts; plain src with a blocked dst (direct kernels); plain src and dst
  // (gemm-based, which serves most shapes but is slow on large kernels with large padding); the
  // same reading a zero-bordered copy of the source (pre-padded); and all of these again with
  // 2+ threads where the work gave 1 (oneDNN's gemm-based convolution declines some
  // single-threaded problems: on an AVX2 CPU with one thread, x [1, 3, 16, 16] with a 7x7
  // kernel and padding 7 is jitted only pre-padded into an 8-channel-blocked dst). Measured
  // forms: the header comment and tests/cpp/test_conv.cpp (NoProblemRunsOnAReferenceImplementation).
  struct Form {
    int64_t src_block, dst_block;
    bool pre_pad;
  };
  const bool padded = pl[0] || pl[1] || pr[0] || pr[1];
  std::vector<Form> forms = {{src_block, dst_block, false}};
  for (bool pre_pad : {false, true}) {
    if (pre_pad && !padded) break;
    // Both blocks on every CPU: oneDNN's AVX2 kernels (8-channel blocks) also run on AVX-512
    // CPUs and serve some problems its AVX-512 ones decline; on an AVX2-only CPU the 16-block
    // form is never jitted, and costs one descriptor creation.
    for (int64_t block : {16, 8}) forms.push_back({0, block, pre_pad});
    forms.push_back({0, 0, pre_pad});
  }
  try {
    bool jitted = false;
    for (int round = 0; round < 2 && !jitted; ++round) {
      if (round == 1) {
        if (k->threads_ > 1 || max_threads <= 1) break;
        k->threads_ = max_threads;
        threads.reset();
        threads.emplace(k->threads_);
      }
      for (const Form& f : forms) {
        k->pre_pad_ = f.pre_pad;
        k->pad_top_ = pl[0];
        k->pad_left_ = pl[1];
        k->padded_dims_ = f.pre_pad ? dims{xs[0], xs[1], xs[2] + pl[0] + pr[0], xs[3] + pl[1] + pr[1]} : src_dims;
        const dims none{0, 0};
        k->src_md_ = dnnl::memory::desc(k->padded_dims_, dt::f32, channel_block_tag(f.src_block, xs[1]));
        k->dst_md_ = dnnl::memory::desc(dst_dims, dt::f32, channel_block_tag(f.dst_block, ys[1]));
        auto form_pd = [&](ResidualMode mode) { return make_pd(mode, f.pre_pad ? none : pl, f.pre_pad ? none : pr); };
        k->choose_primitive(form_pd);
        k->via_plain_ = k->src_md_ != k->outer_src_md_ || k->dst_md_ != k->outer_dst_md_;
        if ((jitted = !is_reference_impl(k->pd_.impl_info_str()))) {
          k->act_out_of_gemm([&] { k->choose_primitive(form_pd); });
          break;
        }
      }
    }
    if (!jitted)
      throw Error(kOp, "only oneDNN's reference implementation (" + std::string(k->pd_.impl_info_str()) +
                           ") serves " + what + " in any layout; it runs orders of magnitude slower than "
                           "PyTorch's, so this partition is left to PyTorch");
    k->prim_ = dnnl::convolution_forward(k->pd_);
    if (ctx.finite_inputs && act_in_engine(k->ep_) && k->residual_mode_ != ResidualMode::separate) {
      const dims none{0, 0};
      k->keep_fused_act(make_pd(k->residual_mode_, k->pre_pad_ ? none : pl, k->pre_pad_ ? none : pr, true));
    }
  } catch (const dnnl::error& e) {
    fail_create(kOp, what, e);
  }

  ScratchPlan plan;
  k->prim_scratch_ = plan.add(scratchpad_bytes(k->pd_));
  k->x_.plan(ctx, 0, numel_of(xs), plan);
  if (k->via_plain_) k->plan_plain_copies(plan);
  if (k->residual_mode_ == ResidualMode::binary_add || k->residual_mode_ == ResidualMode::separate)
    k->res_.plan(ctx, k->ep_.residual_input, numel_of(ys), plan);
  if (k->residual_mode_ == ResidualMode::separate) k->add_scratch_ = plan.add(scratchpad_bytes(k->add_pd_));
  if (k->act_after_) k->act_scratch_ = plan.add(scratchpad_bytes(k->act_pd_));

  const dnnl::memory::desc& w_pref = k->pd_.weights_desc();
  const Tensor* wc = ctx.const_inputs[1];
  const Tensor* sc = k->scaled_ ? ctx.const_inputs[2] : nullptr;
  if (wc && (!k->scaled_ || sc)) {
    // Constant weights (and scale): reorder once into the primitive's layout, scaled, and keep
    // them in the kernel.
    try {
      dnnl::memory user = wrap(k->w_user_md_, wc->data());
      dnnl::memory packed = new_memory(w_pref, &k->packed_storage_);
      if (w_pref == k->w_user_md_ && !sc) {
        std::memcpy(packed.get_data_handle(), wc->data(), k->w_user_md_.get_size());
      } else {
        dnnl::primitive_attr attr;
        if (sc) attr.set_scales_mask(DNNL_ARG_FROM, scale_mask);
        dnnl::reorder::primitive_desc rpd(engine(), k->w_user_md_, engine(), w_pref, attr);
        std::unordered_map<int, dnnl::memory> args = {{DNNL_ARG_FROM, user}, {DNNL_ARG_TO, packed}};
        if (sc) args[DNNL_ARG_ATTR_SCALES | DNNL_ARG_FROM] = wrap(k->scale_md_, sc->data());
        dnnl::stream s(engine());
        dnnl::reorder(rpd).execute(s, args);
        s.wait();
      }
      k->packed_w_ = packed;
    } catch (const dnnl::error& e) {
      fail_create(kOp, "the weight prepack reorder for w " + shape_text(ws), e);
    }
  } else {
    k->w_.plan(ctx, 1, numel_of(ws), plan);
    if (k->scaled_) k->scale_.plan(ctx, 2, O, plan);
    if (w_pref != k->w_user_md_ || k->scaled_) {
      try {
        dnnl::primitive_attr attr = user_scratchpad_attr();
        if (k->scaled_) attr.set_scales_mask(DNNL_ARG_FROM, scale_mask);
        k->reorder_pd_ = dnnl::reorder::primitive_desc(engine(), k->w_user_md_, engine(), w_pref, attr);
        k->w_reorder_ = dnnl::reorder(k->reorder_pd_);
      } catch (const dnnl::error& e) {
        fail_create(kOp, "the per-call weight reorder for w " + shape_text(ws), e);
      }
      k->w_packed_ = plan.add(w_pref.get_size());
      k->reorder_scratch_ = plan.add(scratchpad_bytes(k->reorder_pd_));
    }
  }
  k->scratch_total_ = plan.total();
  k->arg_src_ = k->args_.add(DNNL_ARG_SRC, k->src_md_);
  k->arg_dst_ = k->args_.add(DNNL_ARG_DST, k->dst_md_);
  k->arg_scratch_ = k->args_.add(DNNL_ARG_SCRATCHPAD, k->pd_.scratchpad_desc());
  if (k->packed_w_) k->args_.add_fixed(DNNL_ARG_WEIGHTS, *k->packed_w_);
  else k->arg_w_ = k->args_.add(DNNL_ARG_WEIGHTS, k->w_reorder_ ? w_pref : k->w_user_md_);
  if (k->ep_.has_bias) k->arg_bias_ = k->args_.add(DNNL_ARG_BIAS, k->bias_md_);
  if (k->residual_mode_ == ResidualMode::binary_add)
    k->arg_res_ = k->args_.add(DNNL_ARG_ATTR_MULTIPLE_POST_OP(0) | DNNL_ARG_SRC_1, k->dst_md_);
  k->name_ = std::string("onednn_f32_conv2d:") + k->pd_.impl_info_str() + (k->packed_w_ ? ":prepacked" : "") +
             (k->scaled_ ? ":scaled" : "") + (k->pre_pad_ ? ":pre_padded" : k->via_plain_ ? ":via_plain" : "") +
             (k->threads_ == 1 ? ":1thread" : "") + (k->fused_prim_ ? ":act_fused_if_finite" : "") +
             (k->act_after_ ? ":act_after" : "");
  if (k->residual_mode_ == ResidualMode::separate) k->name_ += std::string("+binary_add:") + k->add_pd_.impl_info_str();
  return k;
}

}  // namespace

void register_conv(KernelRegistry& r) { r.add("conv2d", Device::cpu, ConvKernel::create); }

}  // namespace updraft::onednn
