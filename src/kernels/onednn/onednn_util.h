// Internal helpers shared by the oneDNN kernels (conv.cpp, matmul.cpp, pool.cpp) and the
// engine's own attention kernel (src/kernels/cpu/attention.cpp: its input helpers). Not public.
//
// The rules every kernel here follows:
//  - one process-wide dnnl::engine (cpu, 0), created once on first use;
//  - primitives are created in the factory for the concrete shapes; run() only executes them;
//  - every primitive uses scratchpad_mode::user, and its scratchpad comes out of the `scratch`
//    argument of Kernel::run (ScratchPlan lays the regions out), so one Kernel may run on many
//    threads at once, each thread with its own scratch;
//  - each kernel picks its OpenMP thread count from its work (cpu::threads_for_work: small
//    problems run on the calling thread, no fork) and sets it with cpu::ScopedThreads both
//    while creating its primitives and in run(), since oneDNN splits work by the count it
//    saw at creation;
//  - run() allocates no data buffers, and reuses its oneDNN argument handles (ArgCache): the
//    dnnl::memory objects are created once per concurrent caller and re-pointed at each call's
//    buffers, and the primitive runs through the C API with a flat argument array.
#pragma once
#include <cstddef>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/error.h"
#include "core/tensor.h"
#include "ir/graph.h"
#include "ir/ops/params.h"
#include "kernels/cpu/threads.h"
#include "kernels/kernel.h"
#include "oneapi/dnnl/dnnl.hpp"

namespace updraft::onednn {

using dims = dnnl::memory::dims;
using tag = dnnl::memory::format_tag;
using dt = dnnl::memory::data_type;

// The CPU engine all kernels share (thread-safe lazy init).
const dnnl::engine& engine();
// An in-order stream for the calling thread on engine(); created on a thread's first call.
dnnl::stream& thread_stream();

// A primitive_attr with the user-managed scratchpad every kernel here requires.
dnnl::primitive_attr user_scratchpad_attr();

// How a fused residual reaches the primitive.
//  - binary_add: a binary post-op whose operand is the residual tensor itself
//    (DNNL_ARG_ATTR_MULTIPLE_POST_OP(0) | DNNL_ARG_SRC_1): no copy, dst stays write-only.
//  - sum: the residual is first copied into dst, and a sum post-op (scale 1) accumulates the
//    op's result onto it: one extra pass over the output per call.
// Kernels prefer one and switch to the other when oneDNN can only serve the preferred one
// with its reference implementation (see conv.cpp for the measured case).
// How a conv/matmul adds its residual: a binary_add post-op, a sum post-op (dst pre-filled with
// the residual), or `separate`: the primitive runs with no residual/activation post-ops and a
// second oneDNN binary primitive computes act(dst + residual) in place (used when both post-op
// forms would land on a reference implementation).
enum class ResidualMode { none, binary_add, sum, separate };

// The epilogue (ir/ops/params.h) as oneDNN post-ops.
// Sets `attr`'s post-ops to the residual (per `mode`; `residual` is its descriptor for
// binary_add) and then the activation, giving act(op + bias + residual); the bias is the
// primitive's own bias argument. The activation is its row's eltwise post-op
// (ir/elementwise_ops.def, dnnl_epi); the ones act_in_engine() names are left out, and the
// kernel applies them to its output with apply_engine_act() after the primitive, unless
// `finite`: the primitive runs only on calls whose inputs are finite (KernelContext::
// finite_inputs), where oneDNN's relu / clip give PyTorch's values, so they are post-ops too.
void append_post_ops(const Epilogue& ep, dnnl::primitive_attr& attr, ResidualMode mode,
                     const dnnl::memory::desc* residual, bool finite = false);
// relu and clamp (hardtanh, relu6), the rows marked engine_epi: oneDNN's x64 post-ops compute
// them with a vector max/min that turns NaN into the bound, where PyTorch keeps the NaN (an MLP
// with one NaN input gave finite outputs). The engine applies them in one NaN-propagating pass
// over the output, while it is still in cache; the other activations propagate NaN inside oneDNN.
inline bool act_in_engine(const Epilogue& ep) { return ep.act && ew_op_info(*ep.act).epi == EwEpi::engine; }
// y[i] = act(y[i]) for i < n in place, NaN kept; `threads` as the kernel's primitive.
void apply_engine_act(const Epilogue& ep, float* y, int64_t n, int threads);

// True for oneDNN's reference (plain C++ loop) implementations, e.g. "ref:any".
inline bool is_reference_impl(const char* impl) { return std::string(impl).rfind("ref", 0) == 0; }

// For ResidualMode::sum: makes dst hold the residual (a no-op when they are the same memory).
void copy_residual_into(const TensorView& residual, const TensorView& dst);

// Regions of one kernel's per-call scratch, each 64-byte aligned.
class ScratchPlan {
 public:
  size_t add(size_t bytes) {
    size_t off = total_;
    total_ += (bytes + 63) / 64 * 64;
    return off;
  }
  size_t total() const { return total_; }

 private:
  size_t total_ = 0;
};

inline char* at_offset(void* scratch, size_t off) { return static_cast<char*>(scratch) + off; }

// Contiguity that ignores the strides of size-1 dims (PyTorch's notion).
bool is_dense(const TensorView& v);
// Copies a strided f32 view into dense row-major memory at dst.
void pack_dense_f32(const TensorView& v, float* dst);

// An input a kernel wants as dense row-major memory. Engine intermediates and constants are
// always dense; graph inputs may arrive as strided torch views, so for those the factory
// reserves scratch and run() packs them there when they are not dense.
struct DenseInput {
  int input = -1;
  bool may_stage = false;
  size_t offset = 0;

  void plan(const KernelContext& ctx, int k, int64_t numel, ScratchPlan& plan);
  // Pointer to dense data for in[input]; throws when the view is strided and no scratch was
  // planned (an engine intermediate must never be strided).
  void* get(const TensorView* in, void* scratch, const char* op) const;
};

// Throws Error(op, "oneDNN could not create <what>: <reason>").
[[noreturn]] void fail_create(const std::string& op, const std::string& what, const dnnl::error& e);

// "f32[1, 3, 7, 7]"-style text for error messages.
std::string shape_text(const std::vector<int64_t>& s);

// True when any of the context's tensors is empty: the kernels here decline those (nullptr)
// and the reference kernel, which handles empty loops trivially, runs instead.
bool has_empty_tensor(const KernelContext& ctx);

// Size in bytes of a primitive descriptor's user scratchpad.
template <typename PD>
size_t scratchpad_bytes(const PD& pd) {
  return pd.scratchpad_desc().get_size();
}

// A dnnl::memory for `md` over new storage from aligned_alloc_shared (huge pages for large
// buffers, unlike oneDNN's own allocation); `keep` receives the storage, which the caller holds
// as long as the memory is used.
dnnl::memory new_memory(const dnnl::memory::desc& md, std::shared_ptr<void>* keep);

// dnnl::memory over a caller's pointer (oneDNN's API is non-const; it is only read).
inline dnnl::memory wrap(const dnnl::memory::desc& md, const void* p) {
  return dnnl::memory(md, engine(), const_cast<void*>(p));
}

// The execute() arguments of one primitive, with the dnnl::memory handles built once and
// re-pointed per call. Creating a dnnl::memory costs ~2,400 instructions and destroying it
// about as much; a small linear step used 4 of them per call (measured with callgrind, see
// benchmarks/cpp/dispatch_overhead.cpp BM_DispatchLinear).
//
//   ArgCache args;                                   // factory
//   int src = args.add(DNNL_ARG_SRC, src_md);        // re-pointed per call
//   args.add_fixed(DNNL_ARG_WEIGHTS, packed);        // same memory every call
//   auto call = args.acquire();                      // run(): one handle set for this caller
//   call.set(src, x);
//   call.execute(prim, stream);
//
// Thread-safe: each caller leases its own handle set (popped from a small pool under a mutex,
// or built on a caller's first use), so a Kernel may run on many threads at once.
class ArgCache {
  struct Set {
    std::vector<dnnl::memory> mem;     // one per argument
    std::vector<dnnl_exec_arg_t> raw;  // {id, handle} as the C API takes them
  };

 public:
  ArgCache() = default;
  ArgCache(const ArgCache&) = delete;
  ArgCache& operator=(const ArgCache&) = delete;

  // An argument whose pointer changes per call; returns its index for Call::set.
  int add(int id, const dnnl::memory::desc& md);
  // An argument that is the same memory on every call (e.g. prepacked weights).
  void add_fixed(int id, const dnnl::memory& m);

  class Call {
   public:
    Call(const ArgCache& owner, std::unique_ptr<Set> set) : owner_(owner), set_(std::move(set)) {}
    Call(Call&&) = default;
    ~Call();
    void set(int k, const void* p) { set_->mem[k].set_data_handle(const_cast<void*>(p)); }
    // The memory of argument k (e.g. to pass it to a second primitive).
    const dnnl::memory& memory(int k) const { return set_->mem[k]; }
    void execute(const dnnl::primitive& prim, dnnl::stream& s) const;

   private:
    const ArgCache& owner_;
    std::unique_ptr<Set> set_;
  };
  Call acquire() const;

 private:
  struct Spec {
    int id;
    dnnl::memory::desc md;
    std::optional<dnnl::memory> fixed;
  };
  std::vector<Spec> specs_;
  mutable std::mutex mu_;
  mutable std::vector<std::unique_ptr<Set>> pool_;
};

// The oneDNN tag of an NCHW activation in channel block `block` (kernels/channel_block.h):
// 0 abcd, `channels` nhwc (channels-last), 8 nChw8c, 16 nChw16c; throws Error("kernels") for
// other sizes.
tag channel_block_tag(int64_t block, int64_t channels);
// The activation layout oneDNN's convolutions prefer on this CPU: kChannelsLast with AVX-512,
// 8 (nChw8c) with AVX2, 0 (plain, no blocking) below that (updraft::preferred_channel_block, kernel.h).
int preferred_channel_block();

// Per-file registration, called by register_onednn_compute_kernels (compute.cpp).
void register_conv(KernelRegistry& r);       // conv2d
void register_conv_backward(KernelRegistry& r);  // conv2d_backward_data, conv2d_backward_weight
void register_matmul(KernelRegistry& r);     // linear, matmul
void register_pool(KernelRegistry& r);       // max_pool2d, avg_pool2d, adaptive_avg_pool2d
void register_layout(KernelRegistry& r);     // channel_block (a oneDNN reorder)
void register_grouped_mm(KernelRegistry& r); // grouped_mm (oneDNN sgemm per group)

}  // namespace updraft::onednn
