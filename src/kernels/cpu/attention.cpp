// sdpa: softmax(q k^T * scale + mask) v on the CPU, tiled in registers.
//
// Not a oneDNN primitive: oneDNN v3.2 has no fused attention, and three primitives (q k^T,
// softmax, p v) would write the whole [.., L, S] score tensor to memory and back, and need
// new primitives for every (L, S). Here the work is cut into units of (batch element, block of
// up to 32 query rows). A thread packs the unit's k as k^T [E, S16] (S rounded up to 16) in its
// slice of the planned scratch, computes the block's scores with an R-row x 16-key register
// tile (each k^T load feeds R rows of FMAs; the scale multiplies the finished dot products),
// except that up to kDotKeys keys past a multiple of 16 are dot products of q's and k's rows
// (a 16-key tile for Swin's 49th key cost a quarter of the call), applies masks and causality
// per row, turns the block's rows into exp(score - max) with the engine's vector exp (one loop
// over all their vectors), and accumulates p v with a 4-row tile, dividing by the row sums at
// the end (the tiles: src/kernels/cpu/sdpa_tiles.h). Scores stay in the thread's scratch
// (32 x S16 floats), never in memory the plan sees; run() allocates nothing.
// Tiles rather than one query row at a time: a horizontal sum per score left the FMA units
// idle (the figures: docs/BENCHMARKS.md, "Code-comment figures").
//
// Vectorisation: the AVX2 + FMA tiles here (the engine's baseline; 4-row score tiles, 16-column
// p v tiles, simd_f32.h's exp, < 2 ulp), or the AVX-512 ones of attention_avx512.cpp (8-row
// score tiles, 64-column p v tiles, the same exp on 16 lanes), picked when the kernel is built
// (pick_tiles: the CPU's AVX-512F, unless KernelOptions::cpu_isa is avx2).
//
// Shape-generic: run() reads L, S and the batch dims from the views, and the per-thread
// scratch is sized by this call's S (scratch_bytes_for), so one kernel serves every plan of a
// dynamic-shape compile, unless q/k/v is a graph input (its staging region is sized by the
// shapes the kernel was built for). The thread count is fixed per kernel from the work of the
// shapes it was built for (cpu::threads_for_work).
//
// with_lse (training graphs' forward): each row's log-sum-exp, shift + log(sum), is written as
// the rows are finished, so the backward can recompute the weights without the forward saving
// them (docs/training.md, "Attention").
//
// Layouts: q, k, v need a unit stride in their last dim; their row and batch strides may be
// anything, and size-1 batch dims broadcast. A graph input with a non-unit inner stride is
// packed dense into scratch first. The mask is read through its strides (broadcast dims of
// size 1 read index 0). seq_first operands (SdpaLayout, ir/ops/params.h: [.., S, H, E], the
// layout of the projections around the attention) are read and written as views with their
// dims -3 and -2 swapped, so the head transposes a model writes cost no copy
// (passes/fold_permute_sdpa.h); the output rows are then H * Ev apart.
#include <immintrin.h>
#include <omp.h>

#include <cmath>
#include <cstdlib>
#include <limits>
#include <string>

#include "ir/ops/params.h"
#include "kernels/cpu/sdpa_tiles.h"
#include "kernels/cpu/strided_copy.h"
#include "kernels/cpu/simd_f32.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/threads.h"
#include "kernels/cpu/transpose8.h"
#include "kernels/kernel.h"
#include "kernels/onednn/onednn_util.h"  // DenseInput, ScratchPlan: shared with the oneDNN kernels

namespace updraft::cpu {

namespace {

namespace simd = cpu::simd;  // hsum, row_max, exp_shift_sum
using onednn::at_offset;
using onednn::DenseInput;
using onednn::has_empty_tensor;
using onednn::ScratchPlan;

constexpr const char* kOp = "sdpa";

constexpr int64_t kRowBlock = 32;  // query rows per unit of work
// At most this many keys past a multiple of 16 are scored as dot products rather than by a
// 16-key tile (measured: docs/BENCHMARKS.md, "Issue 19: Swin's 49 keys").
constexpr int64_t kDotKeys = 4;

int64_t round16(int64_t n) { return (n + 15) / 16 * 16; }

// kt = k^T [E, S16] from k's rows [S, E] (row stride ks, unit inner stride), zero from S to
// the row stride S16 (a multiple of 16 from S up). In 8 x 8 blocks transposed in registers, the
// edges element by element: at the short keys of a windowed attention (Swin: 49 keys of 32
// features, packed once per head and window) the element-by-element copy and the mask added
// element by element were a quarter of the kernel's time (perf, docs/BENCHMARKS.md "Issue 19:
// attention without its head transposes").
void pack_kt(const float* kb, int64_t ks, int64_t S, int64_t E, int64_t S16, float* kt) {
  int64_t j = 0;
  for (; j + 8 <= S; j += 8) {
    const float* rows = kb + j * ks;
    int64_t e = 0;
    for (; e + 8 <= E; e += 8) {
      const __m256 r[8] = {_mm256_loadu_ps(rows + e),          _mm256_loadu_ps(rows + ks + e),
                           _mm256_loadu_ps(rows + 2 * ks + e), _mm256_loadu_ps(rows + 3 * ks + e),
                           _mm256_loadu_ps(rows + 4 * ks + e), _mm256_loadu_ps(rows + 5 * ks + e),
                           _mm256_loadu_ps(rows + 6 * ks + e), _mm256_loadu_ps(rows + 7 * ks + e)};
      store_transposed8(r, kt + e * S16 + j, S16);
    }
    for (; e < E; ++e)
      for (int64_t i = 0; i < 8; ++i) kt[e * S16 + j + i] = rows[i * ks + e];
  }
  for (int64_t e = 0; e < E; ++e) {
    float* row = kt + e * S16;
    for (int64_t jj = j; jj < S; ++jj) row[jj] = kb[jj * ks + e];
    for (int64_t jj = S; jj < S16; ++jj) row[jj] = 0.f;
  }
}

// sc[j] += m[j] for j < n (an additive mask row with unit stride).
void add_row(float* sc, const float* m, int64_t n) {
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) _mm256_storeu_ps(sc + j, _mm256_add_ps(_mm256_loadu_ps(sc + j), _mm256_loadu_ps(m + j)));
  for (; j < n; ++j) sc[j] += m[j];
}

struct Avx2 {
  using reg = __m256;
  static constexpr int lanes = 8;
  static reg zero() { return _mm256_setzero_ps(); }
  static reg load(const float* p) { return _mm256_loadu_ps(p); }
  static void store(float* p, reg v) { _mm256_storeu_ps(p, v); }
  static reg set1(float x) { return _mm256_set1_ps(x); }
  static reg fma(reg a, reg b, reg c) { return _mm256_fmadd_ps(a, b, c); }
  static reg mul(reg a, reg b) { return _mm256_mul_ps(a, b); }
  static float hsum(reg v) { return simd::hsum(v); }
};

// The tiles to use: AVX-512 where the CPU has it, unless options.cpu_isa caps the engine's own
// kernels at AVX2.
const cpu::sdpa::Tiles& pick_tiles(const KernelOptions& options) {
  return use_avx512(options) ? cpu::sdpa::tiles_avx512() : cpu::sdpa::tiles_avx2();
}

class SdpaKernel final : public Kernel {
 public:
  void run(const TensorView* in, TensorView* out, void* scratch) const override {
    // seq_first operands ([..., S, H, E]) as [..., H, S, E] views: q, k, v and y are read and
    // written through their strides.
    const TensorView q = layout_.logical(0, operand(in, 0, scratch)), k = layout_.logical(1, operand(in, 1, scratch)),
                     v = layout_.logical(2, operand(in, 2, scratch));
    const TensorView* mask = has_mask_ ? &in[3] : nullptr;
    const TensorView y = layout_.logical(3, out[0]);
    float* lse = with_lse_ ? out[1].ptr<float>() : nullptr;  // [batch..., L], dense
    int nb = y.ndim - 2;
    // This call's sizes (the kernel may have been built for other ones; see the top).
    const int64_t L = q.sizes[q.ndim - 2], S = k.sizes[k.ndim - 2], E = q.sizes[q.ndim - 1];
    const int64_t Ev = v.sizes[v.ndim - 1];
    const int64_t batches = L * Ev != 0 ? y.numel() / (L * Ev) : 0;
    if (batches == 0) return;
    const int64_t S16 = round16(S), blocks = (L + kRowBlock - 1) / kRowBlock;
    // Keys [0, tiled) go through the 16-key score tiles, from k^T with row stride kts; the rest,
    // at most kDotKeys past a multiple of 16, as dot products (Tiles::scores_dots).
    const int64_t rest = S % 16, tiled = S > 16 && rest <= kDotKeys ? S - rest : S, kts = round16(tiled);
    const size_t thread_bytes = thread_bytes_for(S, E);
    float* y_data = y.ptr<float>();
    char* thread_scratch = at_offset(scratch, scores_);
    const int64_t qs = q.strides[q.ndim - 2], ks = k.strides[k.ndim - 2], vs = v.strides[v.ndim - 2],
                  ys = y.strides[nb];
#pragma omp parallel num_threads(threads_) if (threads_ > 1)
    {
      float* kt = reinterpret_cast<float*>(thread_scratch + omp_get_thread_num() * thread_bytes);
      float* p = kt + E * S16;
      float* inv = p + kRowBlock * S16;
      float shifts[kRowBlock], sums[kRowBlock];
      int64_t keys[kRowBlock];
      const float* packed = nullptr;  // the k whose k^T is in kt (query heads sharing a k reuse it)
#pragma omp for schedule(dynamic, 1)
      for (int64_t unit = 0; unit < batches * blocks; ++unit) {
        const int64_t b = unit / blocks, l0 = (unit % blocks) * kRowBlock, l1 = std::min(L, l0 + kRowBlock);
        int64_t idx[kMaxDims];
        int64_t rem = b;
        for (int d = nb - 1; d >= 0; --d) idx[d] = rem % y.sizes[d], rem /= y.sizes[d];
        const float* qb = q.ptr<const float>() + batch_offset(q, idx, nb);
        const float* vb = v.ptr<const float>() + batch_offset(v, idx, nb);
        const float* kb = k.ptr<const float>() + batch_offset(k, idx, nb);
        if (packed != kb) {  // k^T for this batch element
          pack_kt(kb, ks, tiled, E, kts, kt);
          packed = kb;
        }
        const cpu::sdpa::Tiles& t = *tiles_;
        int64_t l = l0;
        for (; l + t.score_rows <= l1; l += t.score_rows)
          t.scores_wide(qb + l * qs, qs, kt, kts, E, scale_, p + (l - l0) * S16, S16);
        for (; l < l1; ++l) t.scores_one(qb + l * qs, qs, kt, kts, E, scale_, p + (l - l0) * S16, S16);
        if (tiled < S) t.scores_dots(qb + l0 * qs, qs, l1 - l0, kb, ks, tiled, S, E, scale_, p, S16);
        int64_t n_max = 0;  // keys any row of the block uses
        for (l = l0; l < l1; ++l) {
          // Causal: keys after the query position are masked (weight 0, never accumulated).
          const int64_t n = causal_ ? std::min(l + 1, S) : S;
          if (mask) apply_mask(*mask, idx, nb, l, p + (l - l0) * S16, n);
          keys[l - l0] = n;
          n_max = std::max(n_max, n);
        }
        // NaN scores make the row NaN, as in torch. A row with every key masked has weights 0
        // and sum 0 (softmax_rows), and torch's CPU sdpa gives 0 for it (sum_j 0 * v_j), not
        // 0 / 0: a left-padded query row of a batched prompt.
        t.softmax_rows(p, S16, l1 - l0, keys, shifts, sums);
        for (l = l0; l < l1; ++l) {
          const float sum = sums[l - l0];
          inv[l - l0] = sum == 0.f ? 0.f : 1.f / sum;
          // torch's CPU flash kernel gives 0 for a row with every key masked (its backward then
          // weighs every key exp(-inf - 0) = 0).
          if (lse) lse[b * L + l] = sum == 0.f ? 0.f : shifts[l - l0] + std::log(sum);
          float* sc = p + (l - l0) * S16;
          for (int64_t j = keys[l - l0]; j < n_max; ++j) sc[j] = 0.f;  // p v reads n_max keys of every row
        }
        float* yb = y_data + batch_offset(y, idx, nb);
        for (l = l0; l + 4 <= l1; l += 4)
          t.pv_four(p + (l - l0) * S16, S16, vb, vs, n_max, Ev, yb + l * ys, ys, inv + (l - l0));
        for (; l < l1; ++l) t.pv_one(p + (l - l0) * S16, S16, vb, vs, n_max, Ev, yb + l * ys, ys, inv + (l - l0));
      }
    }
  }

  size_t scratch_bytes() const override { return scratch_total_; }
  std::string name() const override { return std::string("cpu_f32_sdpa_tiled_") + tiles_->isa; }
  bool runs_shapes_of(const KernelContext& ctx) const override { return generic_ && !has_empty_tensor(ctx); }
  size_t scratch_bytes_for(const KernelContext& ctx) const override {
    const auto qs = layout_.logical(0, ctx.in_shapes[0]), ks = layout_.logical(1, ctx.in_shapes[1]);
    return thread_bytes_for(ks[ks.size() - 2], qs.back()) * static_cast<size_t>(threads_);  // scores_ is 0, nothing staged
  }

  static std::unique_ptr<Kernel> create(const KernelContext& ctx) {
    if (has_empty_tensor(ctx)) return nullptr;
    auto k = std::make_unique<SdpaKernel>();
    k->tiles_ = &pick_tiles(ctx.options);
    k->layout_ = SdpaLayout::of(ctx.attr("seq_first").ints());
    const auto qs = k->layout_.logical(0, ctx.in_shapes[0]), ks = k->layout_.logical(1, ctx.in_shapes[1]);
    const int64_t E = qs.back(), S = ks[ks.size() - 2];
    k->causal_ = ctx.node.attr("is_causal").b();
    k->has_mask_ = ctx.node.attr("has_mask").b();
    k->with_lse_ = ctx.node.attr("with_lse").b();
    double scale = ctx.node.attr("scale").f();
    // E (q's last dim) is the same in every plan: the default scale is fixed per node.
    k->scale_ = static_cast<float>(scale != 0 ? scale : 1.0 / std::sqrt(static_cast<double>(E)));
    // 4 flops per (query, key, feature): q k^T and p v.
    const int64_t L = qs[qs.size() - 2], batch = numel_of(ctx.out_shapes[0]) / std::max<int64_t>(1, L * ctx.out_shapes[0].back());
    k->threads_ = cpu::threads_for_work(4.0 * static_cast<double>(batch) * L * S * E, ctx.thread_budget());
    ScratchPlan plan;
    k->scores_ = plan.add(thread_bytes_for(S, E) * static_cast<size_t>(k->threads_));
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

  // Adds (float) or applies (bool, false = -inf) the mask row for (batch idx, query l).
  static void apply_mask(const TensorView& m, const int64_t* idx, int nb, int64_t l, float* sc, int64_t n) {
    int r = m.ndim;  // m broadcasts to [batch..., L, S], aligned to the right
    int64_t off = 0;
    for (int d = 0; d < r - 2; ++d)
      if (m.sizes[d] != 1) off += idx[nb - (r - 2) + d] * m.strides[d];
    if (r >= 2 && m.sizes[r - 2] != 1) off += l * m.strides[r - 2];
    int64_t js = (r >= 1 && m.sizes[r - 1] != 1) ? m.strides[r - 1] : 0;
    if (m.dtype == DType::boolean) {
      // Added, not assigned, as torch adds its bool mask as 0 / -inf: a NaN score stays NaN.
      const bool* p = static_cast<const bool*>(m.data) + off;
      for (int64_t j = 0; j < n; ++j)
        if (!p[j * js]) sc[j] += -std::numeric_limits<float>::infinity();
    } else {
      const float* p = static_cast<const float*>(m.data) + off;
      if (js == 1) return add_row(sc, p, n);
      for (int64_t j = 0; j < n; ++j) sc[j] += p[j * js];
    }
  }

  // One thread's scratch: k^T [E, S16], the block's scores [32, S16] and 32 row sums, padded
  // to a cache line.
  static size_t thread_bytes_for(int64_t S, int64_t E) {
    const size_t floats = static_cast<size_t>((E + kRowBlock) * round16(S) + kRowBlock);
    return (floats * sizeof(float) + 63) / 64 * 64;
  }

  const cpu::sdpa::Tiles* tiles_ = nullptr;
  SdpaLayout layout_;
  bool causal_ = false, has_mask_ = false, with_lse_ = false, generic_ = false;
  float scale_ = 1;
  int threads_ = 1;
  size_t scores_ = 0, scratch_total_ = 0;
  DenseInput qkv_[3];
};

}  // namespace

}  // namespace updraft::cpu

namespace updraft {
void register_cpu_attention_kernels(KernelRegistry& r) { r.add("sdpa", Device::cpu, cpu::SdpaKernel::create); }
}  // namespace updraft

namespace updraft::cpu::sdpa {

namespace {
// A row whose max is -inf (every key masked) is shifted by 0, so its weights are exp(-inf) = 0
// and its sum 0, not exp(-inf + inf) = NaN.
float softmax_row_avx2(float* sc, int64_t n, float* shift) {
  const float m = simd::row_max(sc, n);
  *shift = m == -std::numeric_limits<float>::infinity() ? 0.f : m;
  return simd::exp_shift_sum(sc, *shift, n, sc);
}
void softmax_rows_avx2(float* p, int64_t ps, int64_t rows, const int64_t* n, float* shift, float* sum) {
  for (int64_t r = 0; r < rows; ++r) sum[r] = softmax_row_avx2(p + r * ps, n[r], shift + r);
}
}  // namespace

// 4 rows x 16 keys (8 accumulators) for scores; 4 rows x 16 columns for p v.
const Tiles& tiles_avx2() {
  static const Tiles t{"avx2",
                       4,
                       scores_tile<Avx2, 4>,
                       scores_tile<Avx2, 1>,
                       scores_dots<Avx2>,
                       pv_tile<Avx2, 4>,
                       pv_tile<Avx2, 1>,
                       softmax_rows_avx2};
  return t;
}

}  // namespace updraft::cpu::sdpa
