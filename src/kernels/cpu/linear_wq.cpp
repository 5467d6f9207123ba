// The fast linear_wq kernel (docs/quantization.md): y = act(x @ (w * scale)^T + bias + residual)
// with an i8 or bf16 weight [N, K] or an int4 one [N, K / 2] (per-group scales, applied in the
// tiles) read in place (no prepacked copy: the stored low-precision weight is the only copy the
// engine holds), widened to f32 in registers, f32 accumulation.
// The same kernel with an f32 weight is the f32 linear that reads the user's weight in place
// (linear_stream.h), for a decode step's few rows and for a prompt's many.
//
// Work split: the N rows of w in blocks (kBlockRows), the blocks spread over the threads (each
// thread a contiguous range, so each weight byte is read by one thread, once per call). With up
// to 4 rows of x (decode) the dot tiles (linear_wq_tiles.h) run over the thread's whole range at
// once, which they read as a few long streams. With up to kDotMaxRows (i8, bf16), block by
// block: for every group of up to 4 rows of x, the tiles run over the block's rows of w; the
// block (kBlockRows x K, at most ~45 KB as i8 at K = 2816) stays in L1/L2 between groups. With
// more (prefill; an f32 weight from 5 rows on), run_bcast: x is transposed once into the scratch
// (its columns split over the threads), and each thread's range of weight rows is broadcast
// against it (bcast_dot; i8 and bf16 rows widened in order into a per-thread strip first). Then
// the epilogue over the block's or range's outputs: per-row scale, bias, residual, activation
// (the elementwise evaluator's vector block op, or ew_ref for an op without one).
// An f32 weight stored [K, N] (matmul, x @ W) is split by its rows instead (run_kn).
//
// quantize_x (int8 activations, linear_i8_tiles.h): the rows of x are quantised into the
// scratch first (split over the threads by rows when there are many), then the same blocks of
// w run the int8 x int8 tiles into int32 sums in y's memory, which the block turns into f32
// ((f32(sum - x_offset * wsum[n]) * sx[m]), the scale in the epilogue) while they are in cache.
// wsum (the VNNI tiles' offset correction) is computed once from a constant weight, when the
// kernel is built, or per call from a weight that is an input.
//
// Threads: the per-kernel rule (threads.h) on max(flops, weight bytes * kFlopsPerByte), decided
// at each call from its M, so one kernel serves every shape of a compile (decode and prefill).
#include <omp.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "core/error.h"
#include "ir/ops/params.h"
#include "kernels/cpu/elementwise_internal.h"
#include "kernels/cpu/linear_i8_tiles.h"
#include "kernels/cpu/linear_stream.h"
#include "kernels/cpu/linear_wq_tiles.h"
#include "kernels/cpu/threads.h"
#include "kernels/elementwise_ops.h"
#include "kernels/kernel.h"

namespace updraft {

namespace {

constexpr int64_t kBlockRows = 16;  // rows of w per block: a multiple of every tile's NT
// i8 and bf16 weights: the most rows of x the dot tiles serve; more take the broadcast tiles
// (prefill). On 2 AVX-512 cores (BM_PrefillLinear, 2816 x 1024 i8) the dot tiles ran 6, 8 and
// 11 rows at 100-127 GFLOP/s against the broadcast tiles' 50-82, and 16 rows at 127-130 alike.
constexpr int64_t kDotMaxRows = 11;
// [K, N] weights: the least weight rows a thread streams (fewer, and adding its partial sums
// costs more than its share of the weight saves).
constexpr int64_t kKnMinRows = 64;

class LinearWqKernel final : public Kernel {
 public:
  LinearWqKernel(const KernelContext& ctx)
      : ep_(Epilogue::of(ctx.node, weight_scaled(ctx) ? 3 : 2)),
        scaled_(weight_scaled(ctx)),
        wdtype_(ctx.in_dtype(1)),
        int4_(wdtype_ == DType::u8),
        tiles_(cpu::wq::dot_tiles(use_avx512(ctx.options))),
        budget_(ctx.thread_budget()),
        max_threads_(ctx.num_threads > 0 ? ctx.num_threads : omp_get_max_threads()),
        kn_(ctx.node.op_name() == "matmul"),
        K_(ctx.in_shapes[1][kn_ ? 0 : 1] * (int4_ ? 2 : 1)),
        N_(ctx.in_shapes[1][kn_ ? 1 : 0]),
        act_fn_(ep_.act ? cpu_ew::block_fn(*ep_.act, float{}) : nullptr),
        quantize_x_(ctx.node.op_name() == "linear_wq" && ctx.node.attr("quantize_x").b()),
        i8_(cpu::wq::i8_tiles(use_avx512(ctx.options))),
        M_(ctx.in_shapes[0].empty() || !K_ ? 0 : numel_of(ctx.in_shapes[0]) / K_) {
    if (quantize_x_ && !int4_ && i8_.x_offset && ctx.const_inputs[1]) {
      wsum_.resize(static_cast<size_t>(N_));
      row_sums(static_cast<const int8_t*>(ctx.const_inputs[1]->data()), wsum_.data());
    }
  }

  void run(const TensorView* in, TensorView* out, void* scratch) const override {
    const TensorView &x = in[0], &w = in[1];
    TensorView& y = out[0];
    const int64_t N = w.sizes[kn_ ? 1 : 0], K = K_, M = K ? x.numel() / K : 0;
    if (y.numel() == 0) return;
    UPDRAFT_CHECK(x.is_contiguous() && w.is_contiguous(), "linear_wq", "x and w must be contiguous here; the plan packs strided inputs");
    const double wbytes = static_cast<double>(N) * row_bytes();
    int nt = cpu::threads_for_gemm(2.0 * M * N * K, wbytes, budget_);
    nt = std::max(1, std::min(nt, max_threads_));
    if (quantize_x_) {
      run_i8(in, y, M, N, K, nt, static_cast<uint8_t*>(scratch));
      return;
    }
    if (kn_) {
      run_kn(in, y, M, N, K, static_cast<int>(std::min<int64_t>(nt, std::max<int64_t>(1, K / kKnMinRows))),
             static_cast<float*>(scratch));
      return;
    }
    if (M > bcast_above()) {
      run_bcast(in, y, M, N, K, nt, static_cast<float*>(scratch));
      return;
    }
    nt = static_cast<int>(std::min<int64_t>(nt, (N + kBlockRows - 1) / kBlockRows));
    cpu::parallel_for(nt, nt, [&](int64_t t) {
      thread_rows(t, nt, N, kBlockRows, M <= cpu::kStreamMaxRows,
                  [&](int64_t n0, int64_t n1) { run_block(in, y, M, N, K, n0, n1); });
    });
  }

  size_t scratch_bytes() const override { return scratch_for(M_); }
  size_t scratch_bytes_for(const KernelContext& ctx) const override {
    return scratch_for(ctx.in_shapes[0].empty() || !K_ ? 0 : numel_of(ctx.in_shapes[0]) / K_);
  }
  std::string name() const override {
    if (wdtype_ == DType::f32) return std::string(kn_ ? "cpu_matmul_stream_f32_" : "cpu_linear_f32_") + tiles_.isa;
    if (quantize_x_) return std::string(int4_ ? "cpu_linear_wq_i4i8_" : "cpu_linear_wq_i8i8_") + i8_.isa;
    return std::string("cpu_linear_wq_") + (int4_ ? "i4" : wdtype_ == DType::i8 ? "i8" : "bf16") + "_" + tiles_.isa;
  }
  // Every size is read from the views at each call (M decides threads and the path there).
  bool runs_shapes_of(const KernelContext&) const override { return true; }

 private:
  // Scratch for a call with M rows of x. quantize_x: the quantised rows, their scales, and wsum
  // when the weight is not a constant (computed per call).
  size_t scratch_for(int64_t M) const {
    if (quantize_x_ && int4_)  // the quantised rows, their scales and their aux words (u4_prepare)
      return static_cast<size_t>(M) * cpu::wq::padded_k(K_) + static_cast<size_t>(M) * sizeof(float) +
             static_cast<size_t>(M * i8_.u4_aux_words(K_)) * sizeof(int32_t);
    if (quantize_x_) {
      const size_t wsum = i8_.x_offset && wsum_.empty() ? static_cast<size_t>(N_) * sizeof(int32_t) : 0;
      return static_cast<size_t>(M) * cpu::wq::padded_k(K_) + static_cast<size_t>(M) * sizeof(float) + wsum;
    }
    // [K, N]: the partial sums of every thread but the first (which sums into y itself).
    if (kn_) return static_cast<size_t>(std::max(max_threads_ - 1, 0)) * cpu::kStreamMaxRows * N_ * sizeof(float);
    if (M <= bcast_above()) return 0;
    const size_t strips = wdtype_ == DType::f32 ? 0 : static_cast<size_t>(max_threads_) * cpu::wq::strip_floats(tiles_, K_);
    return (static_cast<size_t>(cpu::wq::xt_floats(tiles_, M, K_)) + strips) * sizeof(float);
  }

  // Bytes per row of the [N, K] weight (an int4 row holds two values per byte).
  int64_t row_bytes() const { return int4_ ? K_ / 2 : K_ * static_cast<int64_t>(dtype_size(wdtype_)); }

  // wsum[n] = sum_k w[n, k] over the N rows of an i8 weight [N, K].
  void row_sums(const int8_t* w, int32_t* wsum) const {
    for (int64_t n = 0; n < N_; ++n) {
      int32_t s = 0;
      for (int64_t k = 0; k < K_; ++k) s += w[n * K_ + k];
      wsum[n] = s;
    }
  }

  // row(m) for each of x's M rows (quantize_x's per-call pass over x), split over the threads by
  // rows: a second thread pays off only for many rows.
  template <class Row>
  static void quantize_rows_of_x(int64_t M, int nt, Row&& row) {
    const int qt = static_cast<int>(std::min<int64_t>(M >= 16 ? nt : 1, M));
    cpu::parallel_for(qt, qt, [&](int64_t t) {
      for (int64_t m = M * t / qt; m < M * (t + 1) / qt; ++m) row(m);
    });
  }

  // quantize_x: x's rows quantised into the scratch (xq: M rows of padded_k(K) bytes, then sx),
  // the int8 tiles per block of w rows into int32 sums in y, taken to f32 there, the epilogue.
  void run_i8(const TensorView* in, TensorView& y, int64_t M, int64_t N, int64_t K, int nt, uint8_t* scratch) const {
    if (int4_) {
      run_i8_u4(in, y, M, N, K, nt, scratch);
      return;
    }
    const int64_t Kp = cpu::wq::padded_k(K);
    const float* x = in[0].ptr<const float>();
    const int8_t* w = in[1].ptr<const int8_t>();
    uint8_t* xq = scratch;
    float* sx = reinterpret_cast<float*>(scratch + M * Kp);
    const int32_t* wsum = wsum_.data();
    if (i8_.x_offset && wsum_.empty()) {  // a weight that is an input: its row sums per call
      int32_t* ws = reinterpret_cast<int32_t*>(sx + M);
      row_sums(w, ws);
      wsum = ws;
    }
    quantize_rows_of_x(M, nt, [&](int64_t m) { sx[m] = i8_.quantize(x + m * K, K, Kp, xq + m * Kp); });
    const int bt = static_cast<int>(std::min<int64_t>(nt, (N + kBlockRows - 1) / kBlockRows));
    cpu::parallel_for(bt, bt, [&](int64_t t) {
      thread_rows(t, bt, N, kBlockRows, M <= cpu::kStreamMaxRows, [&](int64_t n0, int64_t n1) {
        const int64_t nb = n1 - n0;
        float* yb = y.ptr<float>() + n0;
        int32_t* sums = reinterpret_cast<int32_t*>(yb);  // int32 and f32 share the 4 bytes of each output
        i8_.dot(xq, M, Kp, w + n0 * K, nb, K, K, sums, N);
        const int64_t off = i8_.x_offset;
        for (int64_t m = 0; m < M; ++m) {
          float* row = yb + m * N;
          for (int64_t j = 0; j < nb; ++j) {
            int32_t v;
            std::memcpy(&v, row + j, sizeof v);  // the tiles' int32 sum, read as what it is
            if (off) v -= static_cast<int32_t>(off * wsum[n0 + j]);
            row[j] = static_cast<float>(v) * sx[m];
          }
        }
        epilogue(in, yb, M, N, n0, nb);
      });
    });
  }

  // quantize_x over an int4 weight: x's rows quantised signed (the AVX2 set's rows, on either
  // set) and prepared for the set's int4 tiles (u4_prepare: their order and aux words), then the
  // tiles per block of w rows, straight to f32 in y, times sx and the epilogue while the block is
  // in cache.
  void run_i8_u4(const TensorView* in, TensorView& y, int64_t M, int64_t N, int64_t K, int nt, uint8_t* scratch) const {
    const int64_t Kp = cpu::wq::padded_k(K), G = K / kInt4Group, A = i8_.u4_aux_words(K);
    const float* x = in[0].ptr<const float>();
    const uint8_t* w = in[1].ptr<const uint8_t>();
    const uint16_t* scale = in[2].ptr<const uint16_t>();  // bf16
    uint8_t* xq = scratch;
    float* sx = reinterpret_cast<float*>(scratch + M * Kp);
    int32_t* aux = reinterpret_cast<int32_t*>(sx + M);  // 4-byte words, each set's own meaning
    const cpu::wq::QuantizeRowFn quantize = cpu::wq::i8_tiles_avx2().quantize;
    quantize_rows_of_x(M, nt, [&](int64_t m) {
      sx[m] = quantize(x + m * K, K, Kp, xq + m * Kp);
      i8_.u4_prepare(xq + m * Kp, K, aux + m * A);
    });
    const int bt = static_cast<int>(std::min<int64_t>(nt, (N + kBlockRows - 1) / kBlockRows));
    cpu::parallel_for(bt, bt, [&](int64_t t) {
      thread_rows(t, bt, N, kBlockRows, M <= cpu::kStreamMaxRows, [&](int64_t n0, int64_t n1) {
        const int64_t nb = n1 - n0;
        float* yb = y.ptr<float>() + n0;
        i8_.dot_u4(xq, M, Kp, aux, A, w + n0 * (K / 2), nb, K / 2, scale + n0 * G, G, K, yb, N);
        for (int64_t m = 0; m < M; ++m)
          for (int64_t j = 0; j < nb; ++j) yb[m * N + j] *= sx[m];
        epilogue(in, yb, M, N, n0, nb);
      });
    });
  }

  // Prefill from the weight's rows (linear_wq_tiles.h, bcast_dot): x transposed into xt once,
  // its columns split over the threads, then each thread's contiguous range of weight rows
  // (whole blocks of kBlockRows) against every row of x, and the epilogue over that range.
  void run_bcast(const TensorView* in, TensorView& y, int64_t M, int64_t N, int64_t K, int nt, float* scratch) const {
    const float* x = in[0].ptr<const float>();
    const char* w = static_cast<const char*>(in[1].data);
    float* xt = scratch;
    float* strips = xt + cpu::wq::xt_floats(tiles_, M, K);
    // An int4 weight takes bcast_u4 (its scales go with it); this one serves the others.
    const cpu::wq::BcastDotFn dot = wdtype_ == DType::f32 ? tiles_.bcast_f32
                                    : wdtype_ == DType::i8 ? tiles_.bcast_i8
                                    : int4_                ? nullptr
                                                           : tiles_.bcast_bf16;
    nt = static_cast<int>(std::min<int64_t>(nt, (N + kBlockRows - 1) / kBlockRows));
#pragma omp parallel num_threads(nt)
    {
      const int t = omp_get_thread_num(), T = omp_get_num_threads();
      const int64_t k0 = K * t / T / 8 * 8, k1 = t + 1 == T ? K : K * (t + 1) / T / 8 * 8;
      tiles_.pack_xt(x, M, K, K, k0, k1, xt);
#pragma omp barrier
      const int64_t blocks = (N + kBlockRows - 1) / kBlockRows;
      const int64_t n0 = blocks * t / T * kBlockRows, n1 = std::min(N, blocks * (t + 1) / T * kBlockRows);
      if (n0 < n1) {
        float* strip = strips + t * cpu::wq::strip_floats(tiles_, K);
        if (int4_) {
          const int64_t G = K / kInt4Group;
          tiles_.bcast_u4(xt, x, K, M, K, reinterpret_cast<const uint8_t*>(w) + n0 * (K / 2), n1 - n0, K / 2,
                          in[2].ptr<const uint16_t>() + n0 * G, G, strip, y.ptr<float>() + n0, N);
        } else {
          dot(xt, x, K, M, K, w + static_cast<size_t>(n0) * row_bytes(), n1 - n0, K, strip, y.ptr<float>() + n0, N);
        }
        epilogue(in, y.ptr<float>() + n0, M, N, n0, n1 - n0);
      }
    }
  }

  // More rows of x than this take run_bcast: an f32 weight past the streaming tiles' rows; an
  // i8, bf16 or int4 one past the dot tiles' measured crossover (kDotMaxRows, measured on i8).
  int64_t bcast_above() const { return wdtype_ == DType::f32 ? cpu::kStreamMaxRows : kDotMaxRows; }

  // Thread t's share of the N rows of w (a contiguous range of blocks of `rows` rows) to
  // fn(n0, n1): all at once when `whole` (a few rows of x: the tiles read the range as a few long
  // streams, row_tiles.h), else block by block, so that each block of w stays in cache while
  // every group of 4 rows of x runs over it.
  template <class Fn>
  static void thread_rows(int64_t t, int nt, int64_t N, int64_t rows, bool whole, Fn&& fn) {
    const int64_t blocks = (N + rows - 1) / rows, b0 = blocks * t / nt, b1 = blocks * (t + 1) / nt;
    if (whole) {
      if (b0 < b1) fn(b0 * rows, std::min(N, b1 * rows));
      return;
    }
    for (int64_t b = b0; b < b1; ++b) fn(b * rows, std::min(N, (b + 1) * rows));
  }

  // [K, N] (x @ W): the weight rows split over the threads, so each thread streams one
  // contiguous block of whole rows (its partial sums over all N stay in L1/L2), then the
  // partials are added and the epilogue runs, split by columns. Splitting the columns instead
  // reads each row in segments, one jump per row, which streamed slower on every GPT-2 shape and
  // most on 768-column weights (docs/BENCHMARKS.md, "GPT-2's Conv1D weights streamed by rows").
  // For a given thread count the sum order is fixed: y = P0 + P1 + ..., each P in the tiles' order.
  void run_kn(const TensorView* in, TensorView& y, int64_t M, int64_t N, int64_t K, int nt, float* scratch) const {
    const float* x = in[0].ptr<const float>();
    const float* w = in[1].ptr<const float>();
    float* yp = y.ptr<float>();
    if (nt <= 1) {
      tiles_.f32_kn(x, M, K, w, N, N, K, yp, N);
      epilogue(in, yp, M, N, 0, N);
      return;
    }
#pragma omp parallel num_threads(nt)
    {
      const int t = omp_get_thread_num(), T = omp_get_num_threads();
      const int64_t k0 = K * t / T, k1 = K * (t + 1) / T;
      float* part = t == 0 ? yp : scratch + (t - 1) * M * N;
      tiles_.f32_kn(x + k0, M, K, w + k0 * N, N, N, k1 - k0, part, N);
#pragma omp barrier
      const int64_t c = (N + 15) / 16, n0 = std::min(N, c * t / T * 16), n1 = std::min(N, c * (t + 1) / T * 16);
      for (int64_t m = 0; m < M; ++m) {
        float* row = yp + m * N;
        for (int u = 1; u < T; ++u) {
          const float* p = scratch + (u - 1) * M * N + m * N;
          for (int64_t n = n0; n < n1; ++n) row[n] += p[n];
        }
      }
      if (n0 < n1) epilogue(in, yp + n0, M, N, n0, n1 - n0);
    }
  }

  void run_block(const TensorView* in, TensorView& y, int64_t M, int64_t N, int64_t K, int64_t n0, int64_t n1) const {
    const float* x = in[0].ptr<const float>();
    float* yb = y.ptr<float>() + n0;
    const int64_t nb = n1 - n0;
    const void* w = static_cast<const char*>(in[1].data) + static_cast<size_t>(n0) * row_bytes();
    if (int4_) {
      const int64_t G = K / kInt4Group;
      tiles_.u4(x, M, K, static_cast<const uint8_t*>(w), nb, K / 2, in[2].ptr<const uint16_t>() + n0 * G, G, K, yb,
                N);
      epilogue(in, yb, M, N, n0, nb);
      return;
    }
    const cpu::wq::DotFn dot = wdtype_ == DType::f32 ? tiles_.f32 : wdtype_ == DType::i8 ? tiles_.i8 : tiles_.bf16;
    dot(x, M, K, w, nb, K, K, yb, N);
    epilogue(in, yb, M, N, n0, nb);
  }

  // Scale, bias, residual and activation over the outputs [n0, n0 + nb) of every row of x (an
  // int4 weight's scales are per group, applied by its tiles).
  void epilogue(const TensorView* in, float* yb, int64_t M, int64_t N, int64_t n0, int64_t nb) const {
    const float* scale = scaled_ && !int4_ ? in[2].ptr<const float>() + n0 : nullptr;
    const float* bias = ep_.has_bias ? in[ep_.bias_input].ptr<const float>() + n0 : nullptr;
    const float* res = ep_.has_residual ? in[ep_.residual_input].ptr<const float>() + n0 : nullptr;
    if (!scale && !bias && !res && !ep_.act) return;
    // One loop per step (each vectorises; a prefill's M x N outputs made the fused scalar loop a
    // tenth of an int8 linear's time), in the order scale, bias, residual, activation.
    for (int64_t m = 0; m < M; ++m) {
      float* row = yb + m * N;
      if (scale)
        for (int64_t j = 0; j < nb; ++j) row[j] *= scale[j];
      if (bias)
        for (int64_t j = 0; j < nb; ++j) row[j] += bias[j];
      if (res) {
        const float* r = res + m * N;
        for (int64_t j = 0; j < nb; ++j) row[j] += r[j];
      }
    }
    if (ep_.act) activation(yb, M, N, nb);
  }

  // The activation over the outputs [0, nb) of M rows (stride N): the elementwise evaluator's
  // vector block op where the op has one (GPT-2's GELU over 3072 outputs per row was otherwise a
  // scalar tanh per output), else ew_ref per element. Its alpha and beta are broadcast blocks,
  // filled once per call.
  void activation(float* yb, int64_t M, int64_t N, int64_t nb) const {
    const float a = static_cast<float>(ep_.alpha), b = static_cast<float>(ep_.beta);
    if (!act_fn_) {
      for (int64_t m = 0; m < M; ++m)
        for (int64_t j = 0; j < nb; ++j) yb[m * N + j] = ew_ref<float>(*ep_.act, yb[m * N + j], a, b);
      return;
    }
    alignas(32) float ab[2][cpu_ew::kBlock];
    const int params = ep_.num_act_params();
    if (params > 0) std::fill(ab[0], ab[0] + cpu_ew::kBlock, a);
    if (params > 1) std::fill(ab[1], ab[1] + cpu_ew::kBlock, b);
    for (int64_t m = 0; m < M; ++m)
      for (int64_t j = 0; j < nb; j += cpu_ew::kBlock) {
        float* row = yb + m * N + j;
        const int len = static_cast<int>(std::min<int64_t>(cpu_ew::kBlock, nb - j));
        act_fn_(row, params > 0 ? ab[0] : nullptr, params > 1 ? ab[1] : nullptr, row, len);
      }
  }

  // linear_wq may scale the weight per output row; linear has no such input.
  static bool weight_scaled(const KernelContext& ctx) {
    return ctx.node.op_name() == "linear_wq" && ctx.node.attr("has_weight_scale").b();
  }

  Epilogue ep_;
  bool scaled_;
  DType wdtype_;
  bool int4_;  // w is u8: int4, two values per byte, per-group scales (kernels/quantize.h)
  const cpu::wq::DotTiles& tiles_;
  cpu::ThreadBudget budget_;
  int max_threads_;
  bool kn_;  // matmul: the weight is stored [K, N] (x @ W), not [N, K]
  int64_t K_, N_;
  cpu_ew::BlockFn<float> act_fn_;  // the activation's vector block op, resolved once; null: none (activation())
  bool quantize_x_;  // int8 activations (linear_i8_tiles.h)
  const cpu::wq::I8Tiles& i8_;
  int64_t M_;                  // rows of x at the shapes the kernel was built for (scratch_bytes)
  std::vector<int32_t> wsum_;  // quantize_x on VNNI: sum_k w[n, k] of a constant weight
};

}  // namespace

namespace cpu {
std::unique_ptr<Kernel> make_inplace_f32(const KernelContext& ctx) {
  const bool linear = ctx.node.op_name() == "linear";
  if (!linear && ctx.node.op_name() != "matmul") return nullptr;
  if (!linear && (ctx.attr("transpose_a").b() || ctx.attr("transpose_b").b())) return nullptr;  // oneDNN's gemm
  if (ctx.in_dtype(0) != DType::f32 || ctx.in_dtype(1) != DType::f32 || ctx.out_dtype(0) != DType::f32) return nullptr;
  if (!ctx.const_inputs[1]) return nullptr;  // a weight computed per call: oneDNN's gemm
  const auto& ws = ctx.in_shapes[1];
  if (ws.size() != 2 || ctx.in_shapes[0].empty() || ws[0] * ws[1] < kStreamMinWeight) return nullptr;
  const int64_t K = linear ? ws[1] : ws[0], N = linear ? ws[0] : ws[1];
  if ((linear ? K : N) < kStreamMinVector || ctx.in_shapes[0].back() != K) return nullptr;
  const int64_t M = numel_of(ctx.in_shapes[0]) / K;
  if (M < 1) return nullptr;
  const auto& xshape = ctx.node.inputs[0]->type.shape;
  bool static_rows = true;
  for (size_t d = 0; d + 1 < xshape.size(); ++d) static_rows = static_rows && xshape[d].is_static();
  // [K, N]: a few static rows only (a symbolic count may grow past them).
  if (!linear && (M > kStreamMaxRows || !static_rows)) return nullptr;
  // Many static rows: oneDNN on its packed copy unless prepack_weights is off (kInPlaceMaxRows).
  if (linear && static_rows && M > kInPlaceMaxRows && ctx.options.prepack_weights) return nullptr;
  Epilogue ep = Epilogue::of(ctx.node, 2);
  if (ep.has_residual && numel_of(ctx.in_shapes[ep.residual_input]) != M * N) return nullptr;
  return std::make_unique<LinearWqKernel>(ctx);
}
}  // namespace cpu

void register_cpu_quantized_kernels(KernelRegistry& r) {
  r.add("linear_wq", Device::cpu, [](const KernelContext& ctx) -> std::unique_ptr<Kernel> {
    if (ctx.in_dtype(0) != DType::f32 || ctx.out_dtype(0) != DType::f32) return nullptr;
    const DType w = ctx.in_dtype(1);
    if (w != DType::i8 && w != DType::bf16 && w != DType::u8) return nullptr;
    return std::make_unique<LinearWqKernel>(ctx);
  });
}

}  // namespace updraft
