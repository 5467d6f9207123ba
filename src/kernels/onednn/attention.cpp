// sdpa: softmax(q k^T * scale + mask) v on the CPU, one query row at a time.
//
// Not a oneDNN primitive: oneDNN v3.2 has no fused attention, and three primitives (q k^T,
// softmax, p v) would write the whole [.., L, S] score tensor to memory and back. Here each
// thread keeps one row of S scores in its own slice of the planned scratch (scratch_bytes()
// reserves threads * S floats), so the scores never leave cache, masks and causality are
// applied while they are computed, and run() allocates nothing.
//
// Vectorisation is AVX2 + FMA, the engine's baseline (CMakeLists.txt compiles it with
// -mavx2 -mfma); the softmax uses the engine's vector exp (simd_f32.h, < 2 ulp).
//
// Shape-generic: run() reads L, S and the batch dims from the views, and the per-thread score
// rows are sized by this call's S (scratch_bytes_for), so one kernel serves every plan of a
// dynamic-shape compile, unless q/k/v is a graph input (its staging region is sized by the
// shapes the kernel was built for).
//
// Layouts: q, k, v need a unit stride in their last dim; their row and batch strides may be
// anything, and size-1 batch dims broadcast. A graph input with a non-unit inner stride is
// packed dense into scratch first. The mask is read through its strides (broadcast dims of
// size 1 read index 0).
#include <immintrin.h>
#include <omp.h>

#include <cmath>
#include <limits>

#include "kernels/cpu/simd_f32.h"
#include "kernels/onednn/onednn_util.h"

namespace updraft::onednn {

namespace {

namespace simd = cpu::simd;  // hsum, row_max, exp_shift_sum

constexpr const char* kOp = "sdpa";

float dot(const float* a, const float* b, int64_t n) {
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc0);
    acc1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), acc1);
  }
  for (; i + 8 <= n; i += 8) acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc0);
  float s = simd::hsum(_mm256_add_ps(acc0, acc1));
  for (; i < n; ++i) s += a[i] * b[i];
  return s;
}

// y += alpha * x
void axpy(float alpha, const float* x, float* y, int64_t n) {
  __m256 a = _mm256_set1_ps(alpha);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_fmadd_ps(a, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
  for (; i < n; ++i) y[i] += alpha * x[i];
}

class SdpaKernel final : public Kernel {
 public:
  void run(const TensorView* in, TensorView* out, void* scratch) const override {
    TensorView q = operand(in, 0, scratch), k = operand(in, 1, scratch), v = operand(in, 2, scratch);
    const TensorView* mask = has_mask_ ? &in[3] : nullptr;
    const TensorView& y = out[0];
    int nb = y.ndim - 2;
    // This call's sizes (the kernel may have been built for other ones; see the top).
    const int64_t L = q.sizes[q.ndim - 2], S = k.sizes[k.ndim - 2], E = q.sizes[q.ndim - 1];
    const int64_t Ev = v.sizes[v.ndim - 1];
    const int64_t rows = L * Ev ? y.numel() / Ev : 0;
    const size_t row_bytes = row_bytes_for(S);
    float* y_data = y.ptr<float>();
    char* row_scratch = at_offset(scratch, scores_);
#pragma omp parallel num_threads(threads_)
    {
      float* sc = reinterpret_cast<float*>(row_scratch + omp_get_thread_num() * row_bytes);
#pragma omp for schedule(dynamic, 8)
      for (int64_t row = 0; row < rows; ++row) {
        int64_t b = row / L, l = row % L;
        int64_t idx[kMaxDims];
        int64_t rem = b;
        for (int d = nb - 1; d >= 0; --d) idx[d] = rem % y.sizes[d], rem /= y.sizes[d];
        const float* qr = q.ptr<const float>() + batch_offset(q, idx, nb) + l * q.strides[q.ndim - 2];
        const float* kb = k.ptr<const float>() + batch_offset(k, idx, nb);
        const float* vb = v.ptr<const float>() + batch_offset(v, idx, nb);
        int64_t ks = k.strides[k.ndim - 2], vs = v.strides[v.ndim - 2];
        // Causal: keys after the query position are masked, so they are never computed.
        int64_t n = causal_ ? std::min(l + 1, S) : S;
        for (int64_t j = 0; j < n; ++j) sc[j] = dot(qr, kb + j * ks, E) * scale_;
        if (mask) apply_mask(*mask, idx, nb, l, sc, n);
        float mx = simd::row_max(sc, n);  // NaN scores make the row NaN, as in torch
        float sum = simd::exp_shift_sum(sc, mx, n, sc);
        float* yr = y_data + row * Ev;
        for (int64_t e = 0; e < Ev; ++e) yr[e] = 0.f;
        for (int64_t j = 0; j < n; ++j)
          if (sc[j] != 0.f) axpy(sc[j], vb + j * vs, yr, Ev);
        float inv = 1.f / sum;
        for (int64_t e = 0; e < Ev; ++e) yr[e] *= inv;
      }
    }
  }

  size_t scratch_bytes() const override { return scratch_total_; }
  std::string name() const override { return "cpu_f32_sdpa_rowwise_avx2"; }
  bool runs_shapes_of(const KernelContext& ctx) const override { return generic_ && !has_empty_tensor(ctx); }
  size_t scratch_bytes_for(const KernelContext& ctx) const override {
    const auto& ks = ctx.in_shapes[1];
    return row_bytes_for(ks[ks.size() - 2]) * static_cast<size_t>(threads_);  // scores_ is 0, nothing staged
  }

  static std::unique_ptr<Kernel> create(const KernelContext& ctx) {
    if (has_empty_tensor(ctx)) return nullptr;
    auto k = std::make_unique<SdpaKernel>();
    const auto &qs = ctx.in_shapes[0], &ks = ctx.in_shapes[1];
    const int64_t E = qs.back(), S = ks[ks.size() - 2];
    k->causal_ = ctx.node.attr("is_causal").b();
    k->has_mask_ = ctx.node.attr("has_mask").b();
    double scale = ctx.node.attr("scale").f();
    // E (q's last dim) is the same in every plan: the default scale is fixed per node.
    k->scale_ = static_cast<float>(scale != 0 ? scale : 1.0 / std::sqrt(static_cast<double>(E)));
    k->threads_ = ctx.num_threads > 0 ? ctx.num_threads : omp_get_max_threads();
    ScratchPlan plan;
    k->scores_ = plan.add(row_bytes_for(S) * static_cast<size_t>(k->threads_));
    k->generic_ = true;
    for (int i = 0; i < 3; ++i) {
      k->qkv_[i].plan(ctx, i, numel_of(ctx.in_shapes[i]), plan);
      if (k->qkv_[i].may_stage) k->generic_ = false;
    }
    k->scratch_total_ = plan.total();
    return k;
  }

 private:
  // in[i] as-is when its last dim has unit stride, else packed dense into scratch.
  TensorView operand(const TensorView* in, int i, void* scratch) const {
    TensorView t = in[i];
    if (t.sizes[t.ndim - 1] == 1 || t.strides[t.ndim - 1] == 1) return t;
    return TensorView::contiguous(qkv_[i].get(in, scratch, kOp), t.dtype, t.shape());
  }

  // Offset of the batch element `idx` (the output's nb batch indices) in t, whose batch dims
  // align to the right and broadcast where their size is 1.
  static int64_t batch_offset(const TensorView& t, const int64_t* idx, int nb) {
    int tb = t.ndim - 2;
    int64_t off = 0;
    for (int d = 0; d < tb; ++d)
      if (t.sizes[d] != 1) off += idx[nb - tb + d] * t.strides[d];
    return off;
  }

  // Adds (float) or applies (bool, false = -inf) the mask row for (batch idx, query l).
  static void apply_mask(const TensorView& m, const int64_t* idx, int nb, int64_t l, float* sc, int64_t n) {
    int r = m.ndim;  // m broadcasts to [batch..., L, S], aligned to the right
    int64_t off = 0;
    for (int d = 0; d < r - 2; ++d)
      if (m.sizes[d] != 1) off += idx[nb - (r - 2) + d] * m.strides[d];
    if (r >= 2 && m.sizes[r - 2] != 1) off += l * m.strides[r - 2];
    int64_t js = (r >= 1 && m.sizes[r - 1] != 1) ? m.strides[r - 1] : 0;
    if (m.dtype == DType::boolean) {
      const bool* p = static_cast<const bool*>(m.data) + off;
      for (int64_t j = 0; j < n; ++j)
        if (!p[j * js]) sc[j] = -std::numeric_limits<float>::infinity();
    } else {
      const float* p = static_cast<const float*>(m.data) + off;
      for (int64_t j = 0; j < n; ++j) sc[j] += p[j * js];
    }
  }

  // One thread's row of S scores, padded to a cache line.
  static size_t row_bytes_for(int64_t S) { return (static_cast<size_t>(S) * sizeof(float) + 63) / 64 * 64; }

  bool causal_ = false, has_mask_ = false, generic_ = false;
  float scale_ = 1;
  int threads_ = 1;
  size_t scores_ = 0, scratch_total_ = 0;
  DenseInput qkv_[3];
};

}  // namespace

void register_attention(KernelRegistry& r) { r.add("sdpa", Device::cpu, SdpaKernel::create); }

}  // namespace updraft::onednn
