#include "kernels/onednn/onednn_util.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "kernels/channel_block.h"

namespace updraft::onednn {

const dnnl::engine& engine() {
  static const dnnl::engine eng(dnnl::engine::kind::cpu, 0);  // C++ guarantees one thread-safe init
  return eng;
}

dnnl::stream& thread_stream() {
  // One stream per thread: a dnnl::stream is not meant to be shared by concurrent callers.
  thread_local dnnl::stream s(engine());
  return s;
}

dnnl::primitive_attr user_scratchpad_attr() {
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  return attr;
}

void append_post_ops(const Epilogue& ep, dnnl::primitive_attr& attr, ResidualMode mode,
                     const dnnl::memory::desc* residual, bool finite) {
  dnnl::post_ops po;
  // The residual goes before the activation: act(op + bias + residual).
  if (mode == ResidualMode::binary_add) po.append_binary(dnnl::algorithm::binary_add, *residual);
  if (mode == ResidualMode::sum) po.append_sum(1.f);
  // PyTorch's activations as oneDNN eltwise algorithms (alpha, beta as oneDNN defines them),
  // from each row's dnnl_epi; `alpha` / `beta` in a row are the epilogue's parameters.
  if (ep.act && (finite || !act_in_engine(ep))) {
    [[maybe_unused]] const float alpha = static_cast<float>(ep.alpha), beta = static_cast<float>(ep.beta);
    switch (*ep.act) {
#define UPDRAFT_EW_POST_OP_no_epi throw Error("onednn", "activation '" + std::string(ew_op_info(*ep.act).name) + "' has no oneDNN post-op");
#define UPDRAFT_EW_POST_OP_engine_epi(alg, a, b) po.append_eltwise(dnnl::algorithm::alg, a, b); break;
#define UPDRAFT_EW_POST_OP_dnnl_epi(alg, a, b) po.append_eltwise(dnnl::algorithm::alg, a, b); break;
#define UPDRAFT_EW_OP(name, arity, form, result, dtypes, attrs, epi, ...) \
  case EwOp::name: UPDRAFT_EW_POST_OP_##epi
#include "ir/elementwise_ops.def"
      case EwOp::count_: break;
    }
  }
  attr.set_post_ops(po);
}

void apply_engine_act(const Epilogue& ep, float* y, int64_t n, int threads) {
  if (!act_in_engine(ep) || n == 0) return;
  // MAXPS / MINPS return their second operand when either is NaN: with x second, NaN stays.
  const bool relu = *ep.act == EwOp::relu;
  const float alpha = static_cast<float>(ep.alpha), beta = static_cast<float>(ep.beta);
  const __m256 lo = _mm256_set1_ps(relu ? 0.f : alpha), hi = _mm256_set1_ps(relu ? INFINITY : beta);
  const float slo = relu ? 0.f : alpha, shi = relu ? INFINITY : beta;
  constexpr int64_t kChunk = 16384;  // floats per task: 64 KiB, a few tasks per thread on big outputs
  cpu::parallel_for((n + kChunk - 1) / kChunk, threads, [&](int64_t c) {
    float* p = y + c * kChunk;
    const int64_t m = std::min(kChunk, n - c * kChunk);
    int64_t i = 0;
    for (; i + 8 <= m; i += 8)
      _mm256_storeu_ps(p + i, _mm256_min_ps(hi, _mm256_max_ps(lo, _mm256_loadu_ps(p + i))));
    for (; i < m; ++i) {
      const float x = p[i];
      p[i] = std::isnan(x) ? x : std::min(shi, std::max(slo, x));
    }
  });
}

dnnl::memory new_memory(const dnnl::memory::desc& md, std::shared_ptr<void>* keep) {
  *keep = aligned_alloc_shared(md.get_size());
  return dnnl::memory(md, engine(), keep->get());
}

bool is_dense(const TensorView& v) {
  int64_t expect = 1;
  for (int d = v.ndim - 1; d >= 0; --d) {
    if (v.sizes[d] == 1) continue;
    if (v.strides[d] != expect) return false;
    expect *= v.sizes[d];
  }
  return true;
}

void pack_dense_f32(const TensorView& v, float* dst) {
  const float* src = v.ptr<const float>();
  int64_t n = v.numel();
  if (n == 0) return;
  int r = v.ndim;
  if (r == 0) {
    dst[0] = src[0];
    return;
  }
  // Walk the output in order with an odometer over the source offsets; the innermost dim is
  // a plain strided loop.
  int64_t idx[kMaxDims] = {};
  int64_t inner = v.sizes[r - 1], inner_stride = v.strides[r - 1];
  for (int64_t done = 0; done < n; done += inner) {
    int64_t off = 0;
    for (int d = 0; d < r - 1; ++d) off += idx[d] * v.strides[d];
    const float* s = src + off;
    for (int64_t i = 0; i < inner; ++i) dst[done + i] = s[i * inner_stride];
    for (int d = r - 2; d >= 0; --d) {
      if (++idx[d] < v.sizes[d]) break;
      idx[d] = 0;
    }
  }
}

void DenseInput::plan(const KernelContext& ctx, int k, int64_t numel, ScratchPlan& p) {
  input = k;
  // Only graph inputs can be strided (intermediates are planned dense, constants are dense).
  may_stage = ctx.node.inputs.at(k)->is_input;
  if (may_stage) offset = p.add(static_cast<size_t>(numel) * sizeof(float));
}

void* DenseInput::get(const TensorView* in, void* scratch, const char* op) const {
  const TensorView& v = in[input];
  if (is_dense(v)) return v.data;
  if (!may_stage)
    throw Error(op, "input " + std::to_string(input) + " is strided, but it is an engine intermediate, which "
                "the memory planner must keep contiguous (a planner or lowering bug)");
  float* dst = reinterpret_cast<float*>(at_offset(scratch, offset));
  pack_dense_f32(v, dst);
  return dst;
}

void copy_residual_into(const TensorView& residual, const TensorView& dst) {
  if (residual.data == dst.data && is_dense(residual)) return;
  if (is_dense(residual)) std::memcpy(dst.data, residual.data, dst.nbytes());
  else pack_dense_f32(residual, dst.ptr<float>());
}

int ArgCache::add(int id, const dnnl::memory::desc& md) {
  specs_.push_back({id, md, std::nullopt});
  return static_cast<int>(specs_.size()) - 1;
}

void ArgCache::add_fixed(int id, const dnnl::memory& m) { specs_.push_back({id, m.get_desc(), m}); }

ArgCache::Call ArgCache::acquire() const {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!pool_.empty()) {
      std::unique_ptr<Set> set = std::move(pool_.back());
      pool_.pop_back();
      return Call(*this, std::move(set));
    }
  }
  // A caller's first use (or more concurrent callers than before): build a set. The handles
  // start with no data; set() points them at the call's buffers.
  auto set = std::make_unique<Set>();
  for (const Spec& sp : specs_) {
    set->mem.push_back(sp.fixed ? *sp.fixed : dnnl::memory(sp.md, engine(), DNNL_MEMORY_NONE));
    set->raw.push_back({sp.id, set->mem.back().get()});
  }
  return Call(*this, std::move(set));
}

ArgCache::Call::~Call() {
  if (!set_) return;  // moved from
  std::lock_guard<std::mutex> lock(owner_.mu_);
  owner_.pool_.push_back(std::move(set_));
}

void ArgCache::Call::execute(const dnnl::primitive& prim, dnnl::stream& s) const {
  dnnl::error::wrap_c_api(
      dnnl_primitive_execute(prim.get(), s.get(), static_cast<int>(set_->raw.size()), set_->raw.data()),
      "could not execute a primitive");
}

void fail_create(const std::string& op, const std::string& what, const dnnl::error& e) {
  throw Error(op, "oneDNN could not create " + what + ": " + e.what() +
                      " (status " + std::to_string(static_cast<int>(e.status)) + ")");
}

std::string shape_text(const std::vector<int64_t>& s) {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + std::to_string(s[i]);
  return r + "]";
}

bool has_empty_tensor(const KernelContext& ctx) {
  for (const auto& s : ctx.in_shapes)
    if (numel_of(s) == 0) return true;
  for (const auto& s : ctx.out_shapes)
    if (numel_of(s) == 0) return true;
  return false;
}

}  // namespace updraft::onednn

namespace updraft::onednn {

tag channel_block_tag(int64_t block, int64_t channels) {
  // One block of all the channels is channels-last (kernels/channel_block.h), also where that is
  // 8 or 16 channels: the same bytes, and oneDNN's nhwc kernels serve it.
  if (block != 0 && block == channels) return tag::acdb;
  switch (block) {
    case 0: return tag::abcd;
    case 8: return tag::nChw8c;
    case 16: return tag::nChw16c;
    default:
      throw Error("kernels", "no oneDNN layout for channel block " + std::to_string(block) + " of " +
                                 std::to_string(channels) + " channels (use 0, 8, 16 or the channel count)");
  }
}

// Channels-last on AVX-512, where oneDNN 3.2's brgemm convolutions (nhwc only) run 1.0-8x
// faster than its nChw16c direct ones on ResNet-50 and MobileNet shapes (benchmarks/cpp/
// conv_layouts.cpp, docs/BENCHMARKS.md). With AVX2 the two are level on ResNet-50's shapes
// (0.8-1.2x either way), so nChw8c stays.
int preferred_channel_block() {
  const dnnl::cpu_isa isa = dnnl::get_effective_cpu_isa();
  if (isa >= dnnl::cpu_isa::avx512_core) return kChannelsLast;
  if (isa >= dnnl::cpu_isa::avx2) return 8;
  return 0;
}

}  // namespace updraft::onednn

namespace updraft {
int preferred_channel_block() { return onednn::preferred_channel_block(); }
}  // namespace updraft
