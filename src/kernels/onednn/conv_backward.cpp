// conv2d_backward_data and conv2d_backward_weight on oneDNN's backward primitives
// (convolution_backward_data / convolution_backward_weights), built for the concrete shapes.
//
// The graph's tensors are plain: dy [N, O, OH, OW] and x / dx [N, C, H, W] in NCHW, w / dw
// [O, C/g, kh, kw] row-major (goihw once O splits into groups). A backward graph gets them from
// the forward (saved activations are torch tensors) and from elementwise gradients, so
// block_conv_layout, which keeps forward convolutions' activations blocked, leaves these alone.
//
// Layouts: the primitive runs in the first of a list of forms that oneDNN serves with a jit
// kernel (never a reference one: "ref:any" is orders of magnitude slower than PyTorch's; a
// problem no form jits is refused with an error, and the partition falls back to PyTorch).
// A form names the activations' layout; the weights always use format_tag::any. Where the
// primitive's layout differs from the graph's, its inputs are reordered into scratch and its
// output reordered back: one pass over each tensor, counted in the measured order of forms
// (create(); docs/BENCHMARKS.md, "Issue 17: convolution gradients, batch norm and max pool in
// the engine (session 23)").
//
// The bias gradient is not here: it is a sum of dy over N, H and W, which the lowering emits as
// the engine's sum.
#include <algorithm>

#include "kernels/onednn/onednn_util.h"

namespace updraft::onednn {

namespace {

// One tensor of the call: its layout in the graph and in the primitive, and when they differ
// the reorder between them and the scratch that holds the primitive's copy.
struct Operand {
  Operand() = default;
  Operand(const dnnl::memory::desc& graph, const dnnl::memory::desc& prim) : graph_md(graph), prim_md(prim) {}

  dnnl::memory::desc graph_md, prim_md;
  std::optional<dnnl::reorder> reorder;
  size_t copy = 0;

  // `to_prim`: an input (graph -> primitive), else the output (primitive -> graph).
  void plan(bool to_prim, ScratchPlan& plan) {
    if (prim_md == graph_md) return;
    reorder = to_prim ? dnnl::reorder(dnnl::reorder::primitive_desc(engine(), graph_md, engine(), prim_md))
                      : dnnl::reorder(dnnl::reorder::primitive_desc(engine(), prim_md, engine(), graph_md));
    copy = plan.add(prim_md.get_size());
  }
  // The primitive's pointer for graph memory `p` (an input: reordered into scratch first).
  void* input(void* p, void* scratch, dnnl::stream& s) const {
    if (!reorder) return p;
    void* to = at_offset(scratch, copy);
    reorder->execute(s, {{DNNL_ARG_FROM, wrap(graph_md, p)}, {DNNL_ARG_TO, wrap(prim_md, to)}});
    return to;
  }
  void* output(void* p, void* scratch) const { return reorder ? at_offset(scratch, copy) : p; }
  void write_back(void* prim_out, void* p, dnnl::stream& s) const {
    if (reorder) reorder->execute(s, {{DNNL_ARG_FROM, wrap(prim_md, prim_out)}, {DNNL_ARG_TO, wrap(graph_md, p)}});
  }
};

class ConvGradKernel final : public Kernel {
 public:
  void run(const TensorView* in, TensorView* out, void* scratch) const override {
    cpu::ScopedThreads threads(threads_);
    dnnl::stream& s = thread_stream();
    ArgCache::Call call = args_.acquire();
    call.set(arg_dy_, dy_.input(dy_in_.get(in, scratch, op_), scratch, s));
    call.set(arg_other_, other_.input(other_in_.get(in, scratch, op_), scratch, s));
    void* result = result_.output(out[0].data, scratch);
    call.set(arg_result_, result);
    call.set(arg_scratch_, at_offset(scratch, prim_scratch_));
    call.execute(prim_, s);
    result_.write_back(result, out[0].data, s);
    s.wait();
  }
  size_t scratch_bytes() const override { return scratch_total_; }
  std::string name() const override { return name_; }

  static std::unique_ptr<Kernel> create(const KernelContext& ctx);

 private:
  const char* op_ = "";
  bool data_ = false;   // conv2d_backward_data, else conv2d_backward_weight
  int threads_ = 1;
  // dy, the other input (w for data, x for weights) and the result (dx or dw).
  Operand dy_, other_, result_;
  DenseInput dy_in_, other_in_;
  dnnl::primitive prim_;
  dnnl::memory::desc scratch_md_;  // the primitive's user scratchpad
  ArgCache args_;
  int arg_dy_ = -1, arg_other_ = -1, arg_result_ = -1, arg_scratch_ = -1;
  size_t prim_scratch_ = 0, scratch_total_ = 0;
  std::string name_;
};

std::unique_ptr<Kernel> ConvGradKernel::create(const KernelContext& ctx) {
  if (has_empty_tensor(ctx) || ctx.in_dtype(0) != DType::f32) return nullptr;
  auto k = std::make_unique<ConvGradKernel>();
  const Node& n = ctx.node;
  k->data_ = n.op_name() == "conv2d_backward_data";
  k->op_ = k->data_ ? "conv2d_backward_data" : "conv2d_backward_weight";
  const auto& ys = ctx.in_shapes[0];
  const auto& xs = k->data_ ? ctx.out_shapes[0] : ctx.in_shapes[1];
  const auto& ws = k->data_ ? ctx.in_shapes[1] : ctx.out_shapes[0];
  const int64_t g = ctx.attr("groups").i(), O = ws[0];
  auto st = spatial_pair(ctx.attr("stride")), pad = spatial_pair(ctx.attr("padding")),
       dil = spatial_pair(ctx.attr("dilation"));

  // The forward's multiply-adds, as conv2d counts them: both gradients do the same work.
  const double flops = 2.0 * static_cast<double>(numel_of(ys)) * ws[1] * ws[2] * ws[3];
  const double bytes = 4.0 * static_cast<double>(numel_of(xs) + numel_of(ys) + numel_of(ws));
  k->threads_ = cpu::threads_for_gemm(flops, bytes, ctx.thread_budget());
  cpu::ScopedThreads threads(k->threads_);  // primitives are created for the count they run with

  const dims src_dims(xs.begin(), xs.end()), dst_dims(ys.begin(), ys.end());
  const dims w_dims = g == 1 ? dims{ws[0], ws[1], ws[2], ws[3]} : dims{g, O / g, ws[1], ws[2], ws[3]};
  const dnnl::memory::desc src_plain(src_dims, dt::f32, tag::abcd), dst_plain(dst_dims, dt::f32, tag::abcd),
      w_plain(w_dims, dt::f32, g == 1 ? tag::oihw : tag::goihw), w_any(w_dims, dt::f32, tag::any);
  const dims strides{st[0], st[1]}, dilates{dil[0] - 1, dil[1] - 1}, pl{pad[0], pad[1]}, pr = pl;
  const std::string what = std::string(k->data_ ? "the input gradient" : "the weight gradient") +
                           " of a convolution for x " + shape_text(xs) + ", w " + shape_text(ws) + ", groups " +
                           std::to_string(g);

  // Forms, fastest first as measured on ResNet-50's convs at batch 8 (docs/BENCHMARKS.md): a
  // 1x1 conv is one GEMM in plain NCHW (oneDNN's gemm-based kernel, no reorder at all); a larger
  // kernel runs faster in oneDNN's own choice of layout (blocked), reorders included, than as
  // im2col + GEMM. Channels-last is the last resort of both.
  const bool pointwise = ws[2] == 1 && ws[3] == 1;
  const std::vector<tag> forms = pointwise ? std::vector<tag>{tag::abcd, tag::any, tag::nhwc}
                                           : std::vector<tag>{tag::any, tag::abcd, tag::nhwc};
  const auto alg = dnnl::algorithm::convolution_direct;
  std::string impl;
  try {
    for (tag form : forms) {
      const dnnl::memory::desc src_md(src_dims, dt::f32, form), dst_md(dst_dims, dt::f32, form);
      // The backward primitives take the forward's descriptor as a hint of its layouts.
      dnnl::convolution_forward::primitive_desc hint(engine(), dnnl::prop_kind::forward_training, alg, src_md, w_any,
                                                     dst_md, strides, dilates, pl, pr);
      dnnl::primitive_attr attr = user_scratchpad_attr();
      if (k->data_) {
        dnnl::convolution_backward_data::primitive_desc pd(engine(), alg, src_md, w_any, dst_md, strides, dilates, pl,
                                                           pr, hint, attr);
        impl = pd.impl_info_str();
        if (is_reference_impl(impl.c_str())) continue;
        k->dy_ = {dst_plain, pd.diff_dst_desc()};
        k->other_ = {w_plain, pd.weights_desc()};
        k->result_ = {src_plain, pd.diff_src_desc()};
        k->scratch_md_ = pd.scratchpad_desc();
        k->prim_ = dnnl::convolution_backward_data(pd);
      } else {
        dnnl::convolution_backward_weights::primitive_desc pd(engine(), alg, src_md, w_any, dst_md, strides, dilates,
                                                              pl, pr, hint, attr);
        impl = pd.impl_info_str();
        if (is_reference_impl(impl.c_str())) continue;
        k->dy_ = {dst_plain, pd.diff_dst_desc()};
        k->other_ = {src_plain, pd.src_desc()};
        k->result_ = {w_plain, pd.diff_weights_desc()};
        k->scratch_md_ = pd.scratchpad_desc();
        k->prim_ = dnnl::convolution_backward_weights(pd);
      }
      break;
    }
    if (!k->prim_)
      throw Error(k->op_, "only oneDNN's reference implementation (" + impl + ") serves " + what +
                              "; it runs orders of magnitude slower than PyTorch's, so this partition is left "
                              "to PyTorch");
  } catch (const dnnl::error& e) {
    fail_create(k->op_, what, e);
  }

  ScratchPlan plan;
  k->prim_scratch_ = plan.add(k->scratch_md_.get_size());
  k->dy_in_.plan(ctx, 0, numel_of(ys), plan);
  k->other_in_.plan(ctx, 1, numel_of(k->data_ ? ws : xs), plan);
  try {
    k->dy_.plan(true, plan);
    k->other_.plan(true, plan);
    k->result_.plan(false, plan);
  } catch (const dnnl::error& e) {
    fail_create(k->op_, "the layout reorders around " + what, e);
  }
  k->scratch_total_ = plan.total();
  k->arg_dy_ = k->args_.add(DNNL_ARG_DIFF_DST, k->dy_.prim_md);
  k->arg_other_ = k->args_.add(k->data_ ? DNNL_ARG_WEIGHTS : DNNL_ARG_SRC, k->other_.prim_md);
  k->arg_result_ = k->args_.add(k->data_ ? DNNL_ARG_DIFF_SRC : DNNL_ARG_DIFF_WEIGHTS, k->result_.prim_md);
  k->arg_scratch_ = k->args_.add(DNNL_ARG_SCRATCHPAD, k->scratch_md_);
  const bool reordered = k->dy_.reorder || k->other_.reorder || k->result_.reorder;
  k->name_ = std::string("onednn_f32_") + k->op_ + ":" + impl + (reordered ? ":reordered" : "") +
             (k->threads_ == 1 ? ":1thread" : "");
  return k;
}

}  // namespace

void register_conv_backward(KernelRegistry& r) {
  r.add("conv2d_backward_data", Device::cpu, ConvGradKernel::create);
  r.add("conv2d_backward_weight", Device::cpu, ConvGradKernel::create);
}

}  // namespace updraft::onednn
