// linear and matmul on oneDNN's matmul primitive, with the epilogue fused as post-ops. The
// registered factories first offer the node to the streaming kernel (cpu/linear_stream.h: 1-4
// static rows of x against a constant 2-d f32 weight, a decode step's projections); every other
// node comes here.
//
// Both ops become one batched gemm C[batch..., M, N] = A[batch..., M, K] B[batch..., K, N]:
//  - linear: A = x flattened to [M, K]; B = w^T, i.e. the [N, K] weight read with strides {1, K}
//    (no copy). A constant weight is described with format_tag::any and reordered once, in the
//    factory, into the layout oneDNN prefers (prepacked).
//  - matmul: torch.matmul; 1-d operands become [1, K] / [K, 1]; batch dims are broadcast by
//    oneDNN itself (size-1 batch dims), after collapsing runs of batch dims that every operand
//    either spans fully or broadcasts, so most calls reach oneDNN as a 2-d or 3-d problem.
//
// Runtime M (shape-generic linear, and matmul by a constant 2-d matrix). When x's leading dims
// are symbolic in the graph (dynamic shapes) and the weight is a constant, one kernel serves
// every plan of the compile (it declares itself shape-generic: no kernel or reorder per new
// shape). oneDNN 3.2 serves a primitive created with M = DNNL_RUNTIME_DIM_VAL with its jit gemm,
// not brgemm, and that gemm prefers another weight layout than the static primitives: it ran
// the 156M Llama's prefill projections 1.3x slower, and with the static graph of the first
// prompt length beside it the process held two packed copies of every weight. So the kernel
// makes a static primitive per M it meets (created at the first call of that M; the last
// kMaxStaticM used are kept), all reading one weight layout: one this weight was already
// packed in, else brgemm's preferred one at the compile's M (plan_by_m). The runtime-M primitive, reading the user's
// weight in place, serves any M oneDNN refuses a static primitive for in that layout. A fused
// residual takes the sum form in both (oneDNN has no binary post-op of runtime size). Falls
// back to the static-shape kernel when oneDNN cannot create the runtime-M primitive (or only as
// a reference implementation), and for x as a graph input or a residual that is one (they may
// need staging sized by M).
//
// Transposed operands. matmul's transpose_a / transpose_b (set by fold_transpose_matmul in
// place of a permute that swaps the last two dims): that operand's dense memory is read with
// swapped strides, as linear reads its [N, K] weight; oneDNN takes the strides, no copy.
//
// Strided operands. Engine intermediates are dense, but graph inputs may be torch views; the
// common one is a transpose of the last two dims (x @ w.t()). For an operand that is a graph
// input the factory builds a second primitive variant whose memory descriptor carries those
// swapped strides, so such views run zero-copy. Any other strided view is packed dense into
// planned scratch first (DenseInput).
#include <algorithm>
#include <array>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <optional>
#include <unordered_map>
#include <vector>

#include "kernels/cpu/linear_stream.h"
#include "kernels/onednn/gemm.h"
#include "kernels/onednn/onednn_util.h"
#include "kernels/onednn/packed_weights.h"

namespace updraft::onednn {

namespace {

// Row-major strides of `d`. A runtime dim (DNNL_RUNTIME_DIM_VAL, INT64_MIN: runtime-M kernels)
// makes the strides left of it runtime too, and is never multiplied (signed overflow is UB).
dims dense_strides(const dims& d) {
  dims s(d.size());
  int64_t acc = 1;
  bool runtime = false;
  for (int i = static_cast<int>(d.size()) - 1; i >= 0; --i) {
    s[i] = runtime ? DNNL_RUNTIME_DIM_VAL : acc;
    if (d[i] == DNNL_RUNTIME_DIM_VAL) runtime = true;
    else acc *= d[i];
  }
  return s;
}

// Strides of `d` when its last two dims are stored swapped (a transposed view), batch dims dense.
dims swapped_strides(const dims& d) {
  size_t r = d.size();
  dims s = dense_strides(d);
  s[r - 1] = d[r - 2];
  s[r - 2] = 1;
  return s;
}

// Threads for C = A B with the given element counts (batch dims included) and inner size K:
// its flops, or the f32 bytes it streams (A, B and C once each), as cpu::threads_for_gemm weighs
// them. Plain numbers, no allocation: runtime-M kernels call it per call.
int gemm_threads(double a_elems, double b_elems, double c_elems, double K, const cpu::ThreadBudget& budget) {
  return cpu::threads_for_gemm(2.0 * c_elems * K, 4.0 * (a_elems + b_elems + c_elems), budget);
}

// One gemm operand. Variant 0: the input view is dense. Variant 1: the view's last two dims are
// swapped in memory (only for graph inputs of rank >= 2).
struct Operand {
  DenseInput dense;
  int variants = 1;
  std::array<dnnl::memory::desc, 2> md;
  std::vector<int64_t> swapped_view;  // expected strides of a variant-1 view

  // Which variant the view `in[dense.input]` matches, and the pointer to pass oneDNN.
  int pick(const TensorView* in, void* scratch, const char* op, void** ptr) const {
    const TensorView& v = in[dense.input];
    if (is_dense(v)) {
      *ptr = v.data;
      return 0;
    }
    if (variants == 2) {
      bool ok = true;
      for (int d = 0; d < v.ndim && ok; ++d) ok = v.sizes[d] == 1 || v.strides[d] == swapped_view[d];
      if (ok) {
        *ptr = v.data;
        return 1;
      }
    }
    *ptr = dense.get(in, scratch, op);  // packs into scratch (variant 0 layout)
    return 0;
  }

  // `internal`: the operand's dims as the gemm sees them. `flip`: the dense view is the
  // transpose of `internal` (linear's weight). `swappable`: the view's swapped layout is the
  // swapped layout of `internal` (false for linear's x, whose leading dims are flattened).
  void init(const KernelContext& ctx, int k, const dims& internal, bool flip, bool swappable, ScratchPlan& plan) {
    const auto& vs = ctx.in_shapes[k];
    dense.plan(ctx, k, numel_of(vs), plan);
    variants = (swappable && dense.may_stage && vs.size() >= 2) ? 2 : 1;
    dims ds = dense_strides(internal), ss = swapped_strides(internal);
    md[0] = dnnl::memory::desc(internal, dt::f32, flip ? ss : ds);
    if (variants == 2) {
      md[1] = dnnl::memory::desc(internal, dt::f32, flip ? ds : ss);
      swapped_view = swapped_strides(dims(vs.begin(), vs.end()));
    }
  }
};

// A plain prepacked layout whose rows start a multiple of 1 KiB apart maps every row of a
// column panel onto the same few L1 sets (32 KiB, 8 ways: addresses 4 KiB apart share a set),
// so oneDNN 3.2's jit gemm, which walks down those rows without copying them for small M,
// thrashes its L1: a linear of 768 -> 3072 (BERT's and ViT's MLP) at M = 128 ran at 87 GFLOP/s
// against 150 for 768 -> 3000 on the AVX2 EPYC (docs/BENCHMARKS.md). The same layout with each
// row padded by one cache line avoids it; oneDNN's gemm reads any leading dimension. Takes a
// plain layout of the last two dims (either order) under batch dims of size 1 (a constant
// broadcast over the batch); returns `md` itself for anything else or when nothing aliases.
dnnl::memory::desc unaliased_rows(const dnnl::memory::desc& md) {
  constexpr int64_t kAliasBytes = 1024, kPadBytes = 64;
  const dims d = md.get_dims(), st = md.get_strides();
  const size_t r = d.size();
  if (md.get_format_kind() != dnnl::memory::format_kind::blocked || md.get_inner_nblks() != 0 || r < 2) return md;
  for (size_t i = 0; i + 2 < r; ++i)
    if (d[i] != 1) return md;
  const int64_t es = static_cast<int64_t>(dnnl::memory::data_type_size(md.get_data_type()));
  // The row dim is the one of the last two with the larger stride; the other must be dense.
  const size_t row = st[r - 2] >= st[r - 1] ? r - 2 : r - 1, col = row == r - 2 ? r - 1 : r - 2;
  if (st[col] != 1 || st[row] != d[col] || d[row] < 2 || (st[row] * es) % kAliasBytes != 0) return md;
  dims padded = st;
  padded[row] = st[row] + kPadBytes / es;
  for (size_t i = 0; i + 2 < r; ++i) padded[i] = padded[row] * d[row];  // size-1 dims: any stride, kept dense
  return dnnl::memory::desc(d, md.get_data_type(), padded);
}

// Makes `v`'s primitive again asking for the weight layout `md` (make_pd reads the weight
// descriptor through `bmd`, which points at `md` for the try and is restored after). The new
// primitive is taken when oneDNN serves `md` with the same implementation and no more
// scratchpad: a larger scratchpad would mean the primitive repacks the weight per call.
template <typename MakePd, typename Variant>
bool try_weight_layout(Variant& v, const dnnl::memory::desc& md, const dnnl::memory::desc*& bmd,
                       const MakePd& make_pd) {
  const dnnl::memory::desc* saved = bmd;
  bmd = &md;
  bool taken = false;
  try {
    auto pd = make_pd(v.residual);
    if (pd.impl_info_str() == v.pd.impl_info_str() && scratchpad_bytes(pd) <= scratchpad_bytes(v.pd) &&
        pd.weights_desc() == md) {
      v.pd = pd;
      taken = true;
    }
  } catch (const dnnl::error&) {
    // oneDNN takes no such layout for this problem: keep the primitive as it was
  }
  bmd = saved;
  return taken;
}

// Sharing a packed weight across primitives: when `v`'s primitive (made with the weight layout
// `any`) prefers a layout not yet packed from this weight, but the weight was packed before in
// another layout (another graph's primitive: prefill's M = 32 and decode's M = 1 may prefer
// different blockings), the primitive is made again asking for each known layout, and the
// first that try_weight_layout takes is kept.
template <typename MakePd, typename Variant>
void adopt_known_layout(Variant& v, const std::vector<dnnl::memory::desc>& known, const dnnl::memory::desc*& bmd,
                        const MakePd& make_pd) {
  const dnnl::memory::desc want = v.pd.weights_desc();
  for (const auto& md : known)
    if (md == want) return;
  for (const auto& md : known)
    if (try_weight_layout(v, md, bmd, make_pd)) return;
}

// A scratchpad of `bytes` (64-byte aligned) that only this thread uses: the calling thread waits
// for the primitive it passes it to, so one buffer per thread, grown to the largest asked, is
// never shared. For scratchpads a plan did not size (the runtime-M kernel's static primitives).
void* thread_scratch(size_t bytes) {
  thread_local std::unique_ptr<char[]> buf;
  thread_local size_t cap = 0;
  if (bytes + 63 > cap) buf.reset(new char[bytes + 63]), cap = bytes + 63;
  const auto p = reinterpret_cast<uintptr_t>(buf.get());
  return reinterpret_cast<void*>((p + 63) & ~static_cast<uintptr_t>(63));
}

class GemmKernel final : public Kernel {
 public:
  void run(const TensorView* in, TensorView* out, void* scratch) const override {
    cpu::ScopedThreads threads(threads_);  // see onednn_util.h
    dnnl::stream& s = thread_stream();
    void *a = nullptr, *b = nullptr;
    int va = a_.pick(in, scratch, op_, &a);
    int vb = 0;
    if (!packed_b_[va]) vb = b_.pick(in, scratch, op_, &b);
    const Variant& v = variants_[va][vb];
    if (runtime_m_) {  // this call's M: x is dense [..., K], the output [..., N]
      run_runtime_m(v, a, in, out, scratch, s);
      return;
    }
    ArgCache::Call call = v.args.acquire();
    call.set(v.arg_src, a);
    if (v.arg_w >= 0) call.set(v.arg_w, b);  // else the prepacked constant, fixed in the cache
    call.set(v.arg_dst, out[0].data);
    call.set(v.arg_scratch, at_offset(scratch, prim_scratch_));
    if (v.arg_bias >= 0) call.set(v.arg_bias, in[ep_.bias_input].data);
    if (v.arg_res >= 0) call.set(v.arg_res, res_.get(in, scratch, op_));
    if (v.residual == ResidualMode::sum) copy_residual_into(in[ep_.residual_input], out[0]);
    // relu / clamp as a post-op on calls whose inputs the plan found finite (conv.cpp's rule).
    const bool act_fused = v.fused && call_inputs_finite();
    call.execute(act_fused ? *v.fused : v.prim, s);
    s.wait();
    if (!act_fused) apply_engine_act(ep_, out[0].ptr<float>(), out[0].numel(), threads_);
  }

  size_t scratch_bytes() const override { return scratch_total_; }
  std::string name() const override { return name_; }
  bool fuses_when_finite() const override {
    for (const auto& row : variants_)
      for (const Variant& v : row)
        if (v.fused) return true;
    return false;
  }
  // Runtime-M kernels run any M (the weight, so K and N, is the same constant in every plan);
  // empty tensors go to the reference kernel, as create_linear decides.
  bool runs_shapes_of(const KernelContext& ctx) const override {
    return runtime_m_ && !has_empty_tensor(ctx) && !ctx.in_shapes[0].empty() && ctx.in_shapes[0].back() == K_;
  }
  size_t scratch_bytes_for(const KernelContext&) const override { return scratch_total_; }  // no M-sized regions

  // a_dims/b_dims/c_dims: the gemm problem (same rank, batch dims equal or 1). a_flip, b_flip:
  // see Operand::init (matmul's transpose_a / transpose_b, linear's weight). b is prepacked when
  // it is a constant. `runtime_m`: a_dims/c_dims are {DNNL_RUNTIME_DIM_VAL, K} / {.., N} (2-d,
  // constant b, nothing staged; see the top).
  static std::unique_ptr<Kernel> create(const KernelContext& ctx, const char* op, const dims& a_dims,
                                        const dims& b_dims, const dims& c_dims, bool b_flip, bool runtime_m = false,
                                        bool a_flip = false);

 private:
  struct Variant {
    dnnl::matmul::primitive_desc pd;
    dnnl::matmul prim;
    // prim with the relu / clamp epilogue as a post-op, for calls with finite inputs
    // (KernelContext::finite_inputs): same implementation, weight layout and scratchpad.
    std::optional<dnnl::matmul> fused;
    ResidualMode residual = ResidualMode::none;
    ArgCache args;  // execute() arguments; indices below, -1 when absent or fixed
    int arg_src = -1, arg_w = -1, arg_dst = -1, arg_scratch = -1, arg_bias = -1, arg_res = -1;
  };
  const char* op_ = "";
  int threads_ = 1;
  Epilogue ep_;
  Operand a_, b_;
  dnnl::memory::desc c_md_, bias_md_;
  Variant variants_[2][2];
  std::optional<dnnl::memory> packed_b_[2];  // per a-variant: constant b in that pd's layout
  std::shared_ptr<void> packed_storage_[2];   // their storage
  std::optional<Tensor> b_keep_;              // the constant b, when read in place (no prepack)
  bool b_in_place_ = false;                   // b_keep_ is read (no packed copy)
  bool b_shared_ = false;                     // a packed copy came from another kernel (PackedWeights)
  bool b_padded_ = false;                     // the packed rows are padded (unaliased_rows)
  DenseInput res_;
  size_t prim_scratch_ = 0, scratch_total_ = 0;
  size_t prim_region_ = 0;  // bytes planned for the primitive's scratchpad (at prim_scratch_)
  bool runtime_m_ = false;
  int64_t K_ = 0, N_ = 0;  // runtime_m_ only

  // Runtime M served by static primitives, one per M seen (oneDNN 3.2's runtime-M matmul is its
  // jit gemm; a static one is brgemm: the 156M Llama's prefill projections at 32 rows took 35-44
  // ms against 51-52, docs/BENCHMARKS.md, "runtime M by static primitives"). All of them read the
  // weight in one layout, by_m_w_: a layout the process already packed this weight in (another
  // graph's static primitive), else brgemm's preferred one at the compile's M, else the weight
  // in place (prepack_weights=False). The runtime-M primitive (variants_[0][0]) reads the user's
  // weight in place and serves an M whose static primitive oneDNN refuses in that layout.
  struct ByM {
    dnnl::matmul prim;
    dnnl::memory::desc scratch_md;
    size_t scratch = 0;
  };
  static constexpr size_t kMaxStaticM = 64;  // kept, least recently used out first
  std::optional<dnnl::memory> by_m_w_;        // the static primitives' weight (packed or in place)
  std::shared_ptr<void> by_m_storage_;         // its packed storage (shared, PackedWeights)
  mutable std::mutex by_m_mu_;
  struct ByMEntry {
    std::shared_ptr<const ByM> prim;  // null: oneDNN refused this M in by_m_w_'s layout
    uint64_t used = 0;
  };
  mutable std::unordered_map<int64_t, ByMEntry> by_m_;
  mutable uint64_t by_m_clock_ = 0;

  // Runtime M: the thread count of a call with M rows (its primitives are made under it too).
  int threads_for_rows(int64_t M) const {
    return gemm_threads(static_cast<double>(M) * K_, static_cast<double>(K_) * N_, static_cast<double>(M) * N_,
                        static_cast<double>(K_), budget_);
  }

  // The static primitive for M rows with weight layout w (nullopt if oneDNN refuses w or serves
  // it only with a reference implementation); made under the thread count a call of M runs with.
  std::optional<dnnl::matmul::primitive_desc> static_pd(int64_t M, const dnnl::memory::desc& w, ResidualMode mode) const {
    cpu::ScopedThreads threads(threads_for_rows(M));
    dnnl::memory::desc a_md({M, K_}, dt::f32, dims{K_, 1}), c_md({M, N_}, dt::f32, dims{N_, 1});
    try {
      dnnl::primitive_attr attr = user_scratchpad_attr();
      append_post_ops(ep_, attr, mode, &c_md);
      auto pd = ep_.has_bias ? dnnl::matmul::primitive_desc(engine(), a_md, w, bias_md_, c_md, attr)
                             : dnnl::matmul::primitive_desc(engine(), a_md, w, c_md, attr);
      const bool any = w.get_format_kind() == dnnl::memory::format_kind::any;
      if (is_reference_impl(pd.impl_info_str()) || (!any && pd.weights_desc() != w)) return std::nullopt;
      return pd;
    } catch (const dnnl::error&) {
      return std::nullopt;
    }
  }

  std::shared_ptr<const ByM> static_for(int64_t M) const {
    if (!by_m_w_) return nullptr;
    std::lock_guard<std::mutex> lock(by_m_mu_);
    auto it = by_m_.find(M);
    if (it != by_m_.end()) {
      it->second.used = ++by_m_clock_;
      return it->second.prim;
    }
    // A server's prompt lengths are unbounded: the least recently used M makes room (its
    // primitive lives on in a call that holds it). A new M costs one primitive creation.
    if (by_m_.size() >= kMaxStaticM)
      by_m_.erase(std::min_element(by_m_.begin(), by_m_.end(), [](const auto& a, const auto& b) {
        return a.second.used < b.second.used;
      }));
    // Made under the lock: a concurrent call of the same new M waits for it rather than making
    // a second one (a new prompt length added ~5 ms over the 156M Llama's 57 linears).
    std::shared_ptr<const ByM> made;
    if (auto pd = static_pd(M, by_m_w_->get_desc(), variants_[0][0].residual)) {
      cpu::ScopedThreads threads(threads_for_rows(M));
      made = std::make_shared<ByM>(ByM{dnnl::matmul(*pd), pd->scratchpad_desc(), scratchpad_bytes(*pd)});
    }
    by_m_.emplace(M, ByMEntry{made, ++by_m_clock_});
    return made;
  }

  // Runtime M (called by create): picks by_m_w_ (see ByM) at the compile's M; `src`: the weight's PackedWeights
  // source when prepack_weights is on.
  void plan_by_m(int64_t hint_m, const std::optional<PackedWeights::Source>& src, const dnnl::memory::desc& user) {
    const ResidualMode mode = variants_[0][0].residual;
    std::optional<dnnl::memory::desc> pick;
    if (src) {
      for (const auto& md : PackedWeights::layouts_of(*src))
        if (static_pd(hint_m, md, mode)) {
          pick = md;
          break;
        }
      if (!pick) {
        if (auto pd = static_pd(hint_m, dnnl::memory::desc({K_, N_}, dt::f32, tag::any), mode)) {
          const dnnl::memory::desc want = pd->weights_desc(), padded = unaliased_rows(want);
          pick = padded != want && static_pd(hint_m, padded, mode) ? padded : want;
          b_padded_ = *pick == padded && padded != want;
        }
      }
    }
    if (pick && *pick != user) {
      bool hit = false;
      by_m_storage_ = PackedWeights::get(*src, *pick, &hit);
      by_m_w_ = wrap(*pick, by_m_storage_.get());
      b_shared_ = hit;
      b_in_place_ = false;
    } else if (static_pd(hint_m, user, mode)) {
      by_m_w_ = *packed_b_[0];  // the user's weight in place
    }
  }

  cpu::ThreadBudget budget_;

  // Runtime M: memory objects need real dims, so this call's are made here (the ArgCache
  // holds fixed descriptors), and the thread count follows this call's work.
  void run_runtime_m(const Variant& v, void* a, const TensorView* in, TensorView* out, void* scratch,
                     dnnl::stream& s) const {
    const int64_t M = in[0].numel() / K_;
    cpu::ScopedThreads threads(threads_for_rows(M));
    dnnl::memory::desc a_md({M, K_}, dt::f32, dims{K_, 1}), c_md({M, N_}, dt::f32, dims{N_, 1});
    std::unordered_map<int, dnnl::memory> args;
    args[DNNL_ARG_SRC] = wrap(a_md, a);
    args[DNNL_ARG_DST] = wrap(c_md, out[0].data);
    if (ep_.has_bias) args[DNNL_ARG_BIAS] = wrap(bias_md_, in[ep_.bias_input].data);
    if (v.residual == ResidualMode::sum) copy_residual_into(in[ep_.residual_input], out[0]);
    if (const std::shared_ptr<const ByM> bm = static_for(M)) {
      args[DNNL_ARG_WEIGHTS] = *by_m_w_;
      // The plan's region was sized for the runtime-M primitive (often none): a larger static
      // scratchpad goes in this thread's own buffer.
      void* sp = bm->scratch <= prim_region_ ? at_offset(scratch, prim_scratch_) : thread_scratch(bm->scratch);
      args[DNNL_ARG_SCRATCHPAD] = wrap(bm->scratch_md, sp);
      bm->prim.execute(s, args);
      s.wait();
      apply_engine_act(ep_, out[0].ptr<float>(), M * N_, omp_get_max_threads());
      return;
    }
    args[DNNL_ARG_WEIGHTS] = *packed_b_[0];
    args[DNNL_ARG_SCRATCHPAD] = wrap(v.pd.scratchpad_desc(), at_offset(scratch, prim_scratch_));
    v.prim.execute(s, args);
    s.wait();
    apply_engine_act(ep_, out[0].ptr<float>(), M * N_, omp_get_max_threads());
  }
  std::string name_;
};

std::unique_ptr<Kernel> GemmKernel::create(const KernelContext& ctx, const char* op, const dims& a_dims,
                                           const dims& b_dims, const dims& c_dims, bool b_flip, bool runtime_m,
                                           bool a_flip) {
  auto k = std::make_unique<GemmKernel>();
  k->op_ = op;
  k->runtime_m_ = runtime_m;
  k->K_ = a_dims.back();
  k->N_ = c_dims.back();
  k->budget_ = ctx.thread_budget();
  // Runtime M: the thread count is picked per call from that call's M (run_runtime_m); the
  // primitive and the prepack get them all.
  k->threads_ = runtime_m ? cpu::threads_for_work(1e30, ctx.thread_budget())
                          : gemm_threads(static_cast<double>(numel_of(a_dims)), static_cast<double>(numel_of(b_dims)),
                                         static_cast<double>(numel_of(c_dims)), static_cast<double>(a_dims.back()),
                                         ctx.thread_budget());
  cpu::ScopedThreads threads(k->threads_);
  k->ep_ = Epilogue::of(ctx.node, 2);
  // Scratch layout: [primitive scratchpad (max over variants) | staged operands, residual].
  // The staged regions are planned first, relative to 0, and shifted once the max is known.
  ScratchPlan rest;
  // linear flattens x's leading dims into M, which a transposed view cannot be described by.
  bool a_swappable = std::string(op) == "matmul" || ctx.in_shapes[0].size() == 2;
  k->a_.init(ctx, 0, a_dims, a_flip, a_swappable, rest);
  const Tensor* b_const = ctx.const_inputs[1];
  if (!b_const) k->b_.init(ctx, 1, b_dims, b_flip, true, rest);
  k->c_md_ = dnnl::memory::desc(c_dims, dt::f32, dense_strides(c_dims));
  if (k->ep_.has_bias) {
    dims bd(c_dims.size(), 1);
    bd.back() = c_dims.back();
    k->bias_md_ = dnnl::memory::desc(bd, dt::f32, dense_strides(bd));
  }
  if (k->ep_.has_residual) k->res_.plan(ctx, k->ep_.residual_input, numel_of(ctx.out_shapes[0]), rest);

  dnnl::memory::desc b_any(b_dims, dt::f32, tag::any);
  const bool prepack = ctx.options.prepack_weights;
  // The constant weight as stored: dense [.., K, N], or for linear the [N, K] weight read
  // transposed.
  dnnl::memory::desc b_user(b_dims, dt::f32, b_flip ? swapped_strides(b_dims) : dense_strides(b_dims));
  // A prepacked constant is shared with every other kernel of the process that packed the same
  // bytes into the same layout (packed_weights.h); the layouts packed so far are tried first.
  std::optional<PackedWeights::Source> b_src;
  std::vector<dnnl::memory::desc> b_known;
  if (b_const && prepack) {
    b_src = PackedWeights::source(*b_const, b_user);
    b_known = PackedWeights::layouts_of(*b_src);
  }
  size_t prim_scratch = 0;
  for (int va = 0; va < k->a_.variants; ++va) {
    for (int vb = 0; vb < (b_const ? 1 : k->b_.variants); ++vb) {
      // Runtime M: that primitive reads the user's weight in place; the static primitives per M
      // hold the packed copy (plan_by_m).
      const dnnl::memory::desc* bmd = b_const ? (prepack && !runtime_m ? &b_any : &b_user) : &k->b_.md[vb];
      Variant& v = k->variants_[va][vb];
      auto make_pd = [&](ResidualMode mode) {
        dnnl::primitive_attr attr = user_scratchpad_attr();
        append_post_ops(k->ep_, attr, mode, &k->c_md_);
        return k->ep_.has_bias
                   ? dnnl::matmul::primitive_desc(engine(), k->a_.md[va], *bmd, k->bias_md_, k->c_md_, attr)
                   : dnnl::matmul::primitive_desc(engine(), k->a_.md[va], *bmd, k->c_md_, attr);
      };
      try {
        // The residual as binary_add (no copy), unless only a reference implementation takes
        // it that way; then as a sum post-op over a copy (see onednn_util.h, ResidualMode).
        // Runtime M: oneDNN takes no binary post-op of runtime size, so always the sum form.
        v.residual = !k->ep_.has_residual ? ResidualMode::none
                     : runtime_m          ? ResidualMode::sum
                                          : ResidualMode::binary_add;
        v.pd = make_pd(v.residual);
        if (v.residual == ResidualMode::binary_add && is_reference_impl(v.pd.impl_info_str())) {
          auto with_sum = make_pd(ResidualMode::sum);
          if (!is_reference_impl(with_sum.impl_info_str())) v.pd = with_sum, v.residual = ResidualMode::sum;
        }
        // oneDNN's reference loops run orders of magnitude slower than PyTorch's gemm: refuse
        // (the partition falls back to PyTorch with this reason) rather than run them silently.
        if (is_reference_impl(v.pd.impl_info_str()))
          throw Error(op, std::string("only oneDNN's reference implementation (") + v.pd.impl_info_str() +
                              ") serves a " + (runtime_m ? "runtime-M " : "") + "matmul for " +
                              shape_text(ctx.in_shapes[0]) + " x " + shape_text(ctx.in_shapes[1]) +
                              "; it runs orders of magnitude slower than PyTorch's, so this partition is left to PyTorch");
        if (b_src && !runtime_m) {
          // Rows padded where the preferred plain layout would alias (unaliased_rows).
          const dnnl::memory::desc want = v.pd.weights_desc(), padded = unaliased_rows(want);
          if (padded != want) try_weight_layout(v, padded, bmd, make_pd);
          adopt_known_layout(v, b_known, bmd, make_pd);
          k->b_padded_ = k->b_padded_ || (padded != want && v.pd.weights_desc() == padded);
        }
        v.prim = dnnl::matmul(v.pd);
        if (ctx.finite_inputs && !runtime_m && act_in_engine(k->ep_)) {
          dnnl::primitive_attr attr = user_scratchpad_attr();
          append_post_ops(k->ep_, attr, v.residual, &k->c_md_, true);
          const dnnl::memory::desc w = v.pd.weights_desc();
          auto fused = k->ep_.has_bias
                           ? dnnl::matmul::primitive_desc(engine(), k->a_.md[va], w, k->bias_md_, k->c_md_, attr)
                           : dnnl::matmul::primitive_desc(engine(), k->a_.md[va], w, k->c_md_, attr);
          if (std::string(fused.impl_info_str()) == v.pd.impl_info_str() && fused.weights_desc() == w &&
              fused.scratchpad_desc() == v.pd.scratchpad_desc())
            v.fused = dnnl::matmul(fused);
        }
      } catch (const dnnl::error& e) {
        fail_create(op, "a matmul for " + shape_text(ctx.in_shapes[0]) + " x " + shape_text(ctx.in_shapes[1]), e);
      }
      prim_scratch = std::max(prim_scratch, scratchpad_bytes(v.pd));
      // A primitive whose preferred layout is the weight's own (the runtime-M gemm's, often)
      // reads it in place: a "prepacked" copy would be the same bytes twice.
      if (b_const && (!prepack || runtime_m || v.pd.weights_desc() == b_user)) {
        // The constant read where it is (no copy); the kernel keeps its storage alive.
        k->packed_b_[va] = wrap(b_user, b_const->data());
        k->b_keep_ = *b_const;
        k->b_in_place_ = true;
      } else if (b_const) {
        // Prepack: the constant in this variant's preferred weight layout, made once per process.
        try {
          bool hit = false;
          k->packed_storage_[va] = PackedWeights::get(*b_src, v.pd.weights_desc(), &hit);
          k->packed_b_[va] = wrap(v.pd.weights_desc(), k->packed_storage_[va].get());
          k->b_shared_ = k->b_shared_ || hit;
          b_known = PackedWeights::layouts_of(*b_src);
        } catch (const dnnl::error& e) {
          fail_create(op, "the weight prepack reorder for " + shape_text(ctx.in_shapes[1]), e);
        }
      }
      if (runtime_m) continue;  // run_runtime_m builds this call's arguments (memory needs real dims)
      v.arg_src = v.args.add(DNNL_ARG_SRC, k->a_.md[va]);
      if (b_const) v.args.add_fixed(DNNL_ARG_WEIGHTS, *k->packed_b_[va]);
      else v.arg_w = v.args.add(DNNL_ARG_WEIGHTS, k->b_.md[vb]);
      v.arg_dst = v.args.add(DNNL_ARG_DST, k->c_md_);
      v.arg_scratch = v.args.add(DNNL_ARG_SCRATCHPAD, v.pd.scratchpad_desc());
      if (k->ep_.has_bias) v.arg_bias = v.args.add(DNNL_ARG_BIAS, k->bias_md_);
      if (v.residual == ResidualMode::binary_add)
        v.arg_res = v.args.add(DNNL_ARG_ATTR_MULTIPLE_POST_OP(0) | DNNL_ARG_SRC_1, k->c_md_);
    }
  }
  if (runtime_m && b_const) k->plan_by_m(std::max<int64_t>(1, numel_of(ctx.in_shapes[0]) / k->K_), b_src, b_user);
  size_t base = (prim_scratch + 63) / 64 * 64;
  k->a_.dense.offset += base;
  k->b_.dense.offset += base;
  k->res_.offset += base;
  k->scratch_total_ = base + rest.total();
  k->prim_region_ = base;
  k->name_ = std::string("onednn_f32_") + op + ":" + k->variants_[0][0].pd.impl_info_str() +
             (b_const ? (k->b_in_place_ ? ":inplace_w" : k->b_shared_ ? ":prepacked:shared" : ":prepacked") : "") +
             (k->b_padded_ && !k->b_in_place_ ? ":padded_rows" : "") +
             (std::string(op) == "matmul" && a_flip ? ":ta" : "") + (std::string(op) == "matmul" && b_flip ? ":tb" : "") +
             (runtime_m ? (k->by_m_w_ ? ":runtime_m:static_by_m" : ":runtime_m") : k->threads_ == 1 ? ":1thread" : "") +
             (k->variants_[0][0].fused ? ":act_fused_if_finite" : "");
  return k;
}

// A linear (or matmul by a constant 2-d matrix) whose M is symbolic in the graph, with a
// constant weight and nothing that needs M-sized staging scratch (x and the residual are not
// graph inputs, which may be strided).
// KernelOptions::static_gemm turns the runtime-M kernel off (every plan then builds static
// primitives): for comparing the two on a given machine.
bool runtime_m_fits(const KernelContext& ctx) {
  if (ctx.options.static_gemm) return false;
  const Node& n = ctx.node;
  const Value* x = n.inputs[0];
  if (!ctx.const_inputs[1] || x->is_input || x->type.shape.empty()) return false;
  Epilogue ep = Epilogue::of(n, 2);
  if (ep.has_residual && n.inputs[ep.residual_input]->is_input) return false;
  for (size_t d = 0; d + 1 < x->type.shape.size(); ++d)
    if (!x->type.shape[d].is_static()) return true;
  return false;
}

// linear on oneDNN: x [..., K] -> [M, K]; w [N, K] read as B = w^T [K, N].
std::unique_ptr<Kernel> gemm_linear(const KernelContext& ctx) {
  if (has_empty_tensor(ctx)) return nullptr;
  const auto& ws = ctx.in_shapes[1];
  int64_t N = ws[0], K = ws[1];
  int64_t M = numel_of(ctx.in_shapes[0]) / K;
  if (runtime_m_fits(ctx)) {
    try {
      const int64_t rt = DNNL_RUNTIME_DIM_VAL;
      return GemmKernel::create(ctx, "linear", {rt, K}, {K, N}, {rt, N}, /*b_flip=*/true, /*runtime_m=*/true);
    } catch (const Error&) {
      // oneDNN has no (fast) runtime-M matmul for this epilogue: the static primitive below.
    }
  }
  return GemmKernel::create(ctx, "linear", {M, K}, {K, N}, {M, N}, /*b_flip=*/true);
}

// matmul on oneDNN: promote 1-d operands, then collapse the broadcast batch dims.
std::unique_ptr<Kernel> gemm_matmul(const KernelContext& ctx) {
  if (has_empty_tensor(ctx)) return nullptr;
  // transpose_a / transpose_b (fold_transpose_matmul): the operand is the dense transpose of the
  // gemm's view of it, read with swapped strides as linear reads its weight.
  const bool ta = ctx.attr("transpose_a").b(), tb = ctx.attr("transpose_b").b();
  // x @ W with a constant 2-d W (GPT-2's Conv1D): x's dense leading dims flatten into M, as
  // for linear, so a symbolic batch or sequence gets the runtime-M kernel.
  if (!ta && !tb && ctx.in_shapes[1].size() == 2 && ctx.in_shapes[0].size() >= 2 && runtime_m_fits(ctx)) {
    const int64_t K = ctx.in_shapes[1][0], N = ctx.in_shapes[1][1], rt = DNNL_RUNTIME_DIM_VAL;
    try {
      return GemmKernel::create(ctx, "matmul", {rt, K}, {K, N}, {rt, N}, /*b_flip=*/false, /*runtime_m=*/true);
    } catch (const Error&) {
      // no (fast) runtime-M primitive for this epilogue: the static one below
    }
  }
  std::vector<int64_t> a = ctx.in_shapes[0], b = ctx.in_shapes[1];
  if (ta) std::swap(a[a.size() - 1], a[a.size() - 2]);
  if (tb) std::swap(b[b.size() - 1], b[b.size() - 2]);
  if (a.size() == 1) a.insert(a.begin(), 1);
  if (b.size() == 1) b.push_back(1);
  int64_t M = a[a.size() - 2], K = a.back(), N = b.back();
  size_t nb = std::max(a.size(), b.size()) - 2;
  a.insert(a.begin(), nb + 2 - a.size(), 1);
  b.insert(b.begin(), nb + 2 - b.size(), 1);
  // Runs of batch dims merge when each operand either spans all of them or broadcasts all of
  // them: the merged dim is then still a dense (or broadcast) dim of that operand.
  struct Group {
    int64_t a, b, c;
  };
  std::vector<Group> groups;
  for (size_t d = 0; d < nb; ++d) {
    int64_t c = std::max(a[d], b[d]);
    if (c == 1) continue;
    bool ab = a[d] == 1, bb = b[d] == 1;
    if (!groups.empty() && (groups.back().a == 1) == ab && (groups.back().b == 1) == bb) {
      groups.back().a *= a[d];
      groups.back().b *= b[d];
      groups.back().c *= c;
    } else {
      groups.push_back({a[d], b[d], c});
    }
  }
  dims ad, bd, cd;
  for (const Group& g : groups) ad.push_back(g.a), bd.push_back(g.b), cd.push_back(g.c);
  ad.insert(ad.end(), {M, K});
  bd.insert(bd.end(), {K, N});
  cd.insert(cd.end(), {M, N});
  return GemmKernel::create(ctx, "matmul", ad, bd, cd, /*b_flip=*/tb, /*runtime_m=*/false, /*a_flip=*/ta);
}

// linear and matmul: the kernel that reads a constant f32 weight in place (any rows of x for a
// linear's [N, K] weight, a decode step's few for matmul's [K, N]; cpu/linear_stream.h), else
// oneDNN's.
std::unique_ptr<Kernel> create_linear(const KernelContext& ctx) {
  if (has_empty_tensor(ctx)) return nullptr;
  if (auto k = cpu::make_inplace_f32(ctx)) return k;
  return gemm_linear(ctx);
}
std::unique_ptr<Kernel> create_matmul(const KernelContext& ctx) {
  if (has_empty_tensor(ctx)) return nullptr;
  if (auto k = cpu::make_inplace_f32(ctx)) return k;
  if (auto k = cpu::make_matmul_rows_f32(ctx)) return k;
  return gemm_matmul(ctx);
}

}  // namespace

std::unique_ptr<Kernel> create_onednn_linear(const KernelContext& ctx) { return gemm_linear(ctx); }
std::unique_ptr<Kernel> create_onednn_matmul(const KernelContext& ctx) { return gemm_matmul(ctx); }

void register_matmul(KernelRegistry& r) {
  r.add("linear", Device::cpu, create_linear);
  r.add("matmul", Device::cpu, create_matmul);
}

}  // namespace updraft::onednn
