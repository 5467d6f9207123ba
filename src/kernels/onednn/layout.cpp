// channel_block on oneDNN: a reorder primitive between plain NCHW and nChw8c / nChw16c
// (kernels/channel_block.h). The block_conv_layout pass inserts these where a value leaves or
// enters a chain of channel-blocked convolutions.
#include "kernels/onednn/onednn_util.h"

namespace updraft::onednn {

namespace {

constexpr const char* kOp = "channel_block";

class ChannelBlockKernel final : public Kernel {
 public:
  void run(const TensorView* in, TensorView* out, void* scratch) const override {
    cpu::ScopedThreads threads(threads_);
    dnnl::stream& s = thread_stream();
    ArgCache::Call call = args_.acquire();
    call.set(arg_from_, x_.get(in, scratch, kOp));
    call.set(arg_to_, out[0].data);
    call.set(arg_scratch_, at_offset(scratch, prim_scratch_));
    call.execute(prim_, s);
    s.wait();
  }
  size_t scratch_bytes() const override { return scratch_total_; }
  std::string name() const override { return name_; }

  static std::unique_ptr<Kernel> create(const KernelContext& ctx) {
    if (has_empty_tensor(ctx) || ctx.in_dtype(0) != DType::f32) return nullptr;
    const auto& xs = ctx.in_shapes[0];
    const int64_t from = ctx.attr("from_block").i(), to = ctx.attr("to_block").i();
    auto k = std::make_unique<ChannelBlockKernel>();
    // A reorder moves every byte once, bound by memory (a transpose to or from channels-last is
    // bound by its strided side): thread by bytes, as memory-bound GEMMs do. Measured with
    // oneDNN's reorder at 2 threads: [1, 96, 56, 56] to nhwc 0.149 -> 0.073 ms, [1, 192, 28, 28]
    // back 0.047 -> 0.024 ms, [1, 768, 7, 7] 0.022 -> 0.014 ms (that one stays on 1 thread).
    k->threads_ = cpu::threads_for_gemm(0.0, 8.0 * static_cast<double>(numel_of(xs)), ctx.thread_budget());
    cpu::ScopedThreads threads(k->threads_);
    dims d(xs.begin(), xs.end());
    dnnl::memory::desc src(d, dt::f32, channel_block_tag(from, xs[1])), dst(d, dt::f32, channel_block_tag(to, xs[1]));
    try {
      k->pd_ = dnnl::reorder::primitive_desc(engine(), src, engine(), dst, user_scratchpad_attr());
      k->prim_ = dnnl::reorder(k->pd_);
    } catch (const dnnl::error& e) {
      fail_create(kOp, "a reorder of " + shape_text(xs) + " from block " + std::to_string(from) + " to " +
                           std::to_string(to), e);
    }
    ScratchPlan plan;
    k->prim_scratch_ = plan.add(scratchpad_bytes(k->pd_));
    k->x_.plan(ctx, 0, numel_of(xs), plan);  // a plain graph input may be strided
    k->scratch_total_ = plan.total();
    k->arg_from_ = k->args_.add(DNNL_ARG_FROM, src);
    k->arg_to_ = k->args_.add(DNNL_ARG_TO, dst);
    k->arg_scratch_ = k->args_.add(DNNL_ARG_SCRATCHPAD, k->pd_.scratchpad_desc());
    k->name_ = "onednn_f32_channel_block_" + std::to_string(from) + "to" + std::to_string(to) + ":" +
               k->pd_.impl_info_str() + (k->threads_ == 1 ? ":1thread" : "");
    return k;
  }

 private:
  int threads_ = 1;
  dnnl::reorder::primitive_desc pd_;
  dnnl::reorder prim_;
  DenseInput x_;
  ArgCache args_;
  int arg_from_ = -1, arg_to_ = -1, arg_scratch_ = -1;
  size_t prim_scratch_ = 0, scratch_total_ = 0;
  std::string name_;
};

}  // namespace

void register_layout(KernelRegistry& r) { r.add("channel_block", Device::cpu, ChannelBlockKernel::create); }

}  // namespace updraft::onednn
