// The inner loops of the low-precision-weight linear (linear_wq.cpp, docs/quantization.md):
// raw dot products of f32 rows with rows of i8, bf16, f32 or int4 weights, widened in registers
// and accumulated in f32. Nothing here knows about bias or threads, nor about scales but an int4
// weight's per-group ones (they change inside a row's dot product, so they cannot wait for the
// epilogue), so a later int8 path (quantised activations too) can call the same tiles.
//
//   const DotTiles& t = dot_tiles(use_avx512(options));
//   t.i8(x, M, ldx, w, N, ldw, K, out, ldo);   // out[m*ldo + n] = sum_k x[m*ldx+k] * w[n*ldw+k]
//
// Layout: the weight stays [N, K] row-major (as stored by the pass, no prepacked copy), so the
// tiles vectorise over K: acc[m][n] += x[m, k:k+L] * widen(w[n, k:k+L]), and reduce each
// accumulator across lanes at the end (K >= 256 in the layers this serves, so the reduction is a
// small share). Register tiles (MT rows of x by NT rows of w): 1 x 8 for one row of x (8
// independent FMA chains, as two FMA pipes of latency 4 need), 2 x 4, 4 x 2 for more rows. A
// decode step's tiles over chunks of rows (rows_fixed) take one row per chunk instead: 1 x 4,
// 2 x 4, 3-4 x 2, where the weight's stream, not the FMA chains, is the bound.
// Each weight tile is read from memory once per block of up to 4 rows of x; a caller with more
// rows (prefill) calls bcast_*, which transposes x instead and broadcasts the weight's elements.
//
// The templates below are instantiated once per instruction set, each in its own unit compiled
// with that set's flags (linear_wq_avx2.cpp, linear_wq_avx512.cpp); every function is a template
// over the ISA's traits type, so the two units share no symbol.
#pragma once
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "ir/ops/params.h"
#include "kernels/cpu/row_tiles.h"
#include "kernels/cpu/transpose8.h"
#include "kernels/quantize.h"

namespace updraft::cpu::wq {

using DotFn = void (*)(const float* x, int64_t M, int64_t ldx, const void* w, int64_t N, int64_t ldw, int64_t K,
                       float* out, int64_t ldo);
// The same products with an f32 weight stored [K, N] (x @ W, GPT-2's Conv1D):
// out[m*ldo + n] = sum_k x[m*ldx + k] * w[k*ldw + n] for n < N.
using DotKnFn = void (*)(const float* x, int64_t M, int64_t ldx, const float* w, int64_t N, int64_t ldw, int64_t K,
                         float* out, int64_t ldo);

// Prefill from the weight's rows (bcast_dot below): x transposed into xt blocks once per call
// (PackXtFn, columns [k0, k1) so threads can split it), then per range of weight rows.
using PackXtFn = void (*)(const float* x, int64_t M, int64_t ldx, int64_t K, int64_t k0, int64_t k1, float* xt);
using BcastDotFn = void (*)(const float* xt, const float* x, int64_t ldx, int64_t M, int64_t K, const void* w,
                            int64_t nb, int64_t ldw, float* strip, float* out, int64_t ldo);

// An int4 weight (kernels/quantize.h's format: rows of ldw bytes, K / 2 used) with its per-group
// scales (rows of lds bf16 values): out[m*ldo + n] = sum_k x[m*ldx+k] * (q[n, k] * scale[n, k / 32]).
using DotU4Fn = void (*)(const float* x, int64_t M, int64_t ldx, const uint8_t* w, int64_t N, int64_t ldw,
                         const uint16_t* scale, int64_t lds, int64_t K, float* out, int64_t ldo);
using BcastU4Fn = void (*)(const float* xt, const float* x, int64_t ldx, int64_t M, int64_t K, const uint8_t* w,
                           int64_t nb, int64_t ldw, const uint16_t* scale, int64_t lds, float* strip, float* out,
                           int64_t ldo);

struct DotTiles {
  DotFn i8 = nullptr, bf16 = nullptr, f32 = nullptr;
  DotU4Fn u4 = nullptr;
  BcastU4Fn bcast_u4 = nullptr;
  DotKnFn f32_kn = nullptr;
  PackXtFn pack_xt = nullptr;
  BcastDotFn bcast_f32 = nullptr, bcast_i8 = nullptr, bcast_bf16 = nullptr;
  int64_t xt_cols = 0;       // rows of x per xt block: xt holds ceil(M / xt_cols) * xt_cols * K floats
  int group_rows = 0;        // NR: weight rows per broadcast tile group (strip_floats)
  const char* isa = "";
};

const DotTiles& dot_tiles_avx2();
const DotTiles& dot_tiles_avx512();  // only on a CPU with AVX-512F
inline const DotTiles& dot_tiles(bool avx512) { return avx512 ? dot_tiles_avx512() : dot_tiles_avx2(); }

// One weight element widened to f32 (tails and the scalar paths). static: each ISA's unit keeps
// its own copy (compiled with its flags), never the other unit's.
static inline float widen1(int8_t v) { return static_cast<float>(v); }
static inline float widen1(uint16_t v) {
  uint32_t u = static_cast<uint32_t>(v) << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}
static inline float widen1(float v) { return v; }

// Whether a tile prefetches the next tile's weight rows while it reads its own. An i8 or bf16
// row (K <= 2816 here: 1-5.5 KB) is shorter than the 4 KB page the L2 streamer follows, so a tile
// of 8 rows interleaves 8 short streams in 2-3 pages and the hardware prefetcher ramps up too
// late: an i8 decode linear streamed 7-11 GB/s on 2 AVX-512 cores, 14-21 with the next tile
// prefetched, the same fraction at 1 thread (docs/BENCHMARKS.md, "weight prefetch"). An f32 row
// of K >= 1024 spans whole pages, and the same prefetch made it slower (27 -> 22 GB/s). A
// decode step's tiles now read the rows from chunks (row_tiles.h), long streams the hardware
// follows, and prefetch nothing; this serves the blocks of a few rows (M of 5 to 11).
template <class W>
constexpr bool kPrefetchNextTile = sizeof(W) < sizeof(float);

// ISA traits V provide: reg, lanes, zero(), bcast(float), loadx(const float*), widen(const W*)
// for W in {int8_t, uint16_t, float}, fma(a, b, c), hsum(reg) -> float, store(float*, reg), and
// `half`: traits of 8 lanes with zero, bcast, loadx, fma and store (bcast_dot's narrow tiles).
// Output n of row m goes to out[m * ldo + n * os] (os > 1: rows taken from chunks, rows_fixed).
// next: where the following tile's rows start (w + NT * ldw for a dense weight); it is only
// prefetched (kPrefetchNextTile), never read, so past the end of the weight is harmless.
template <class V, class W, int MT, int NT>
inline void tile(const float* x, int64_t ldx, const W* w, int64_t ldw, int64_t K, float* out, int64_t ldo,
                 int64_t os, const W* next) {
  using reg = typename V::reg;
  reg acc[MT][NT];
#pragma GCC unroll 4
  for (int m = 0; m < MT; ++m) {
#pragma GCC unroll 8
    for (int n = 0; n < NT; ++n) acc[m][n] = V::zero();
  }
  // The next tile's NT rows are contiguous (NT * K elements) and this loop runs K / lanes
  // times: prefetching NT * lanes elements of it per iteration covers it as this tile ends.
  constexpr int64_t kPfStep = static_cast<int64_t>(NT) * V::lanes * sizeof(W);  // bytes per iteration
  const char* pf = reinterpret_cast<const char*>(next);
  int64_t k = 0;
  for (; k + V::lanes <= K; k += V::lanes) {
    if constexpr (kPrefetchNextTile<W>) {
      if (pf) {
#pragma GCC unroll 4
        for (int64_t b = 0; b < kPfStep; b += 64) __builtin_prefetch(pf + b, 0, 3);
        pf += kPfStep;
      }
    }
    reg xv[MT];
#pragma GCC unroll 4
    for (int m = 0; m < MT; ++m) xv[m] = V::loadx(x + m * ldx + k);
#pragma GCC unroll 8
    for (int n = 0; n < NT; ++n) {
      reg wv = V::widen(w + n * ldw + k);
#pragma GCC unroll 4
      for (int m = 0; m < MT; ++m) acc[m][n] = V::fma(xv[m], wv, acc[m][n]);
    }
  }
  for (int m = 0; m < MT; ++m)
    for (int n = 0; n < NT; ++n) {
      float s = V::hsum(acc[m][n]);
      for (int64_t kk = k; kk < K; ++kk) s += x[m * ldx + kk] * widen1(w[n * ldw + kk]);
      out[m * ldo + n * os] = s;
    }
}

// Rows [0, MT) of x (MT <= 4) against rows [0, N) of w, in the order of row_tiles.h: C x MT
// tiles over chunks when there are enough rows, NT-row tiles that prefetch the next one else.
// C where chunks paid, by a standalone loop over the 156M Llama's projections from memory (one
// core; GB/s of weight, blocks of 16 rows -> the thread's whole range; docs/BENCHMARKS.md,
// "Issue 20: [N, K] weights read as long streams (session 33)"):
// - 1 row of x, 4 chunks: i8 16 -> 25 (AVX-512) and 17.5 -> 22.6 (AVX2), bf16 16 -> 26-28, f32
//   21-22 -> 27-28.
// - 2 rows, 4 chunks: bf16 14-17 -> 22, f32 15 -> 22-23, i8 15 -> 16.6 on AVX-512; none for i8
//   on AVX2 (15.1 -> 13.9: its widening at 8 lanes, not the stream, is the bound).
// - 3-4 rows: 2 chunks for f32 (10-11 -> 13-18); none for i8 and bf16 (the same either way).
template <class V, class W, int MT>
constexpr int row_chunks() {
  if (MT == 1) return 4;
  if (MT == 2) return sizeof(W) == 1 && V::lanes == 8 ? 0 : 4;
  return sizeof(W) == sizeof(float) ? 2 : 0;
}

template <class V, class W, int MT, int NT>
inline void rows_fixed(const float* x, int64_t ldx, const W* w, int64_t N, int64_t ldw, int64_t K, float* out,
                       int64_t ldo) {
  constexpr int C = row_chunks<V, W, MT>();
  for_row_tiles<C, NT>(
      N,
      [&](int64_t n, int64_t S) { tile<V, W, MT, C>(x, ldx, w + n * ldw, S * ldw, K, out + n, ldo, S, nullptr); },
      [&](int64_t n) { tile<V, W, MT, NT>(x, ldx, w + n * ldw, ldw, K, out + n, ldo, 1, w + (n + NT) * ldw); },
      [&](int64_t n) { tile<V, W, MT, 1>(x, ldx, w + n * ldw, ldw, K, out + n, ldo, 1, nullptr); });
}

template <class V, class W>
void dot(const float* x, int64_t M, int64_t ldx, const void* wv, int64_t N, int64_t ldw, int64_t K, float* out,
         int64_t ldo) {
  const W* w = static_cast<const W*>(wv);
  for (int64_t m = 0; m < M; m += 4) {
    const float* xm = x + m * ldx;
    float* om = out + m * ldo;
    switch (M - m >= 4 ? 4 : M - m) {
      case 1: rows_fixed<V, W, 1, 8>(xm, ldx, w, N, ldw, K, om, ldo); break;
      case 2: rows_fixed<V, W, 2, 4>(xm, ldx, w, N, ldw, K, om, ldo); break;
      case 3: rows_fixed<V, W, 3, 2>(xm, ldx, w, N, ldw, K, om, ldo); break;
      default: rows_fixed<V, W, 4, 2>(xm, ldx, w, N, ldw, K, om, ldo); break;
    }
  }
}

// [K, N] weights: vectorised over n, the outputs (N floats per row of x, in L1 or L2: the
// caller gives each thread a block of whole rows of w, linear_wq.cpp) accumulating C weight rows
// per pass, one from each of C chunks of consecutive rows:
// out[m, n] += x[m, k0] w[k0, n] + ... + x[m, k_{C-1}] w[k_{C-1}, n], k_c = c * (K / C) + i,
// i ascending, then the K % C rows left one by one; the same order for every n.
// Why chunks: each chunk is one contiguous stream of memory, and a core's prefetchers serve a
// few long streams much better than the short ones that C consecutive rows are (one row of w is
// 3-12 KB here, a new stream at every pass). At one row of x on one AVX-512 core, GPT-2's Conv1D
// weights streamed at 26-29 GB/s with 4-8 chunks, 21-22 with 8 consecutive rows per pass and 17
// with 4 (the session-30 tile); a plain read of one stream gave 23-28 (docs/BENCHMARKS.md,
// "Issue 19: [K, N] weights read as long streams (session 33)"). Six chunks: at one row of x,
// 4 and 8 read 1-3 GB/s slower; at 4 rows, 4 did and 8 read the same.
constexpr int kKnChunks = 6;

template <class V, int MT, int C>
inline void kn_pass(const float* x, int64_t ldx, const float* w, int64_t N, int64_t ldw, int64_t chunk_rows,
                    float* out, int64_t ldo) {
  using reg = typename V::reg;
  reg xb[MT][C];
  for (int m = 0; m < MT; ++m)
    for (int c = 0; c < C; ++c) xb[m][c] = V::bcast(x[m * ldx + c * chunk_rows]);
  int64_t n = 0;
  for (; n + V::lanes <= N; n += V::lanes) {
    reg o[MT];
#pragma GCC unroll 4
    for (int m = 0; m < MT; ++m) o[m] = V::loadx(out + m * ldo + n);
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) {
      const reg wc = V::loadx(w + c * chunk_rows * ldw + n);
#pragma GCC unroll 4
      for (int m = 0; m < MT; ++m) o[m] = V::fma(xb[m][c], wc, o[m]);
    }
#pragma GCC unroll 4
    for (int m = 0; m < MT; ++m) V::store(out + m * ldo + n, o[m]);
  }
  for (; n < N; ++n)
    for (int m = 0; m < MT; ++m) {
      float o = out[m * ldo + n];
      for (int c = 0; c < C; ++c) o += x[m * ldx + c * chunk_rows] * w[c * chunk_rows * ldw + n];
      out[m * ldo + n] = o;
    }
}

template <class V, int MT>
inline void kn_rows(const float* x, int64_t ldx, const float* w, int64_t N, int64_t ldw, int64_t K, float* out,
                    int64_t ldo) {
  constexpr int C = kKnChunks;
  for (int m = 0; m < MT; ++m) std::memset(out + m * ldo, 0, sizeof(float) * N);
  const int64_t rows = K / C;  // per chunk
  for (int64_t i = 0; i < rows; ++i) kn_pass<V, MT, C>(x + i, ldx, w + i * ldw, N, ldw, rows, out, ldo);
  for (int64_t k = C * rows; k < K; ++k) kn_pass<V, MT, 1>(x + k, ldx, w + k * ldw, N, ldw, 0, out, ldo);
}

template <class V>
void dot_kn(const float* x, int64_t M, int64_t ldx, const float* w, int64_t N, int64_t ldw, int64_t K, float* out,
            int64_t ldo) {
  for (int64_t m = 0; m < M; m += 4) {
    const float* xm = x + m * ldx;
    float* om = out + m * ldo;
    switch (M - m >= 4 ? 4 : M - m) {
      case 1: kn_rows<V, 1>(xm, ldx, w, N, ldw, K, om, ldo); break;
      case 2: kn_rows<V, 2>(xm, ldx, w, N, ldw, K, om, ldo); break;
      case 3: kn_rows<V, 3>(xm, ldx, w, N, ldw, K, om, ldo); break;
      default: kn_rows<V, 4>(xm, ldx, w, N, ldw, K, om, ldo); break;
    }
  }
}

// ---- int4 weights (kernels/quantize.h): blocks of 64 values (two groups of 32, a scale each) ----
// V::dequant_u4(p, s, w) turns a block's 32 bytes and its two bf16 scales s[0], s[1] into
// 64 / lanes vectors of its weights (q * s, in k order; the scales widened from one broadcast of
// int4_scale_pair, quantize.h), which are multiplied into the accumulators as tile() does. Dequantising
// before the product keeps every row of x on the same weight vector (the M <= 4 rows of a decode
// tile share it) and the sum in tile()'s order within a block.
template <class V>
constexpr int kU4Vecs = static_cast<int>(kInt4Block) / V::lanes;

// Rows [0, MT) of x against NT rows of w (os: the outputs' stride, as tile()).
template <class V, int MT, int NT>
inline void tile_u4(const float* x, int64_t ldx, const uint8_t* w, int64_t ldw, const uint16_t* sc, int64_t lds,
                    int64_t K, float* out, int64_t ldo, int64_t os) {
  using reg = typename V::reg;
  constexpr int J = kU4Vecs<V>;
  reg acc[MT][NT];
#pragma GCC unroll 4
  for (int m = 0; m < MT; ++m)
#pragma GCC unroll 8
    for (int n = 0; n < NT; ++n) acc[m][n] = V::zero();
  for (int64_t b = 0; b < K / kInt4Block; ++b) {
    const float* xb = x + b * kInt4Block;
#pragma GCC unroll 8
    for (int n = 0; n < NT; ++n) {
      reg wd[J];
      V::dequant_u4(w + n * ldw + b * kInt4Group, sc + n * lds + 2 * b, wd);
#pragma GCC unroll 8
      for (int j = 0; j < J; ++j)
#pragma GCC unroll 4
        for (int m = 0; m < MT; ++m) acc[m][n] = V::fma(V::loadx(xb + m * ldx + j * V::lanes), wd[j], acc[m][n]);
    }
  }
  for (int m = 0; m < MT; ++m)
    for (int n = 0; n < NT; ++n) out[m * ldo + n * os] = V::hsum(acc[m][n]);
}

// Rows [0, MT) of x against rows [0, N) of w in row_tiles.h's order: one row from each of C
// chunks per tile where there are enough rows (C as the i8 tiles'), NT consecutive rows else.
// NT: 8 accumulators on AVX-512's 32 registers, 4 on AVX2's 16 (its block is 8 vectors).
template <class V, int MT>
inline void rows_u4(const float* x, int64_t ldx, const uint8_t* w, int64_t N, int64_t ldw, const uint16_t* sc,
                    int64_t lds, int64_t K, float* out, int64_t ldo) {
  constexpr int C = row_chunks<V, int8_t, MT>();
  constexpr int NT = std::max(1, (V::lanes == 16 ? 8 : 4) / MT);
  for_row_tiles<C, NT>(
      N,
      [&](int64_t n, int64_t S) {
        tile_u4<V, MT, C>(x, ldx, w + n * ldw, S * ldw, sc + n * lds, S * lds, K, out + n, ldo, S);
      },
      [&](int64_t n) { tile_u4<V, MT, NT>(x, ldx, w + n * ldw, ldw, sc + n * lds, lds, K, out + n, ldo, 1); },
      [&](int64_t n) { tile_u4<V, MT, 1>(x, ldx, w + n * ldw, ldw, sc + n * lds, lds, K, out + n, ldo, 1); });
}

template <class V>
void dot_u4(const float* x, int64_t M, int64_t ldx, const uint8_t* w, int64_t N, int64_t ldw, const uint16_t* sc,
            int64_t lds, int64_t K, float* out, int64_t ldo) {
  for (int64_t m = 0; m < M; m += 4) {
    const float* xm = x + m * ldx;
    float* om = out + m * ldo;
    switch (M - m >= 4 ? 4 : M - m) {
      case 1: rows_u4<V, 1>(xm, ldx, w, N, ldw, sc, lds, K, om, ldo); break;
      case 2: rows_u4<V, 2>(xm, ldx, w, N, ldw, sc, lds, K, om, ldo); break;
      case 3: rows_u4<V, 3>(xm, ldx, w, N, ldw, sc, lds, K, om, ldo); break;
      default: rows_u4<V, 4>(xm, ldx, w, N, ldw, sc, lds, K, om, ldo); break;
    }
  }
}

// Eight consecutive weight elements widened to f32 (the AVX2 traits' widen; templated on V so
// that each unit keeps its own copy, compiled with its flags).
template <class V>
inline __m256 widen8(const int8_t* p) {
  return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
}
template <class V>
inline __m256 widen8(const uint16_t* p) {
  const __m256i u = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  return _mm256_castsi256_ps(_mm256_slli_epi32(u, 16));
}

// ---- Prefill: x^T blocks and broadcast weight rows ----
// With many rows of x, the dot tiles above are bound by their loads and their lane reductions
// (76 GFLOP/s on 2 AVX-512 cores at M = 32 and 128, against oneDNN's 150-190 on packed f32
// weights: docs/BENCHMARKS.md, "Issue 20: int8 and bf16 prefill panels"). A GEMM micro-kernel
// needs one operand as vectors along the other's rows; packing the weight that way (transposed
// panels, the session-21 path) costs a transpose of every weight element per call, which a
// prompt's 32 rows amortise poorly, and the f32 weight had no fast path in place at all
// (oneDNN's reads a packed copy: the copy that doubled an f32 LLM's memory). Here the operands
// swap roles: x, the small one, is transposed once per call into blocks of kXtCols rows
// (xt[b][k][j] = x[b * kXtCols + j, k], zeros past M), and the weight rows are read as stored,
// one element broadcast against TV vectors of xt: per k, TV loads and NR broadcasts feed
// NR * TV FMAs, nothing reduced across lanes; an f32 weight is never copied, an i8 or bf16 one
// only widened in order into a small strip (no transpose). The accumulators hold out^T (weight
// rows by rows of x), written to out through a small transpose per tile.
// The loop order over k slices, weight rows and blocks of x: bcast_dot.
// Measured (benchmarks/cpp/kernel_throughput.cpp, BM_PrefillLinear; docs/BENCHMARKS.md, "Issue
// 20: prefill from the weight's own rows"): f32 in place level with oneDNN on its packed copy
// from M = 16 up, i8 1.1-1.6x the transposed panels.
template <class V>
constexpr int64_t kXtCols = 2 * V::lanes;                 // rows of x per xt block (TV = 2 registers)
template <class V>
constexpr int kBcastRows = V::lanes == 16 ? 8 : 6;          // NR: 16 of 32 zmm, 12 of 16 ymm accumulate
constexpr int64_t kPrefillDepth = 1024;                     // k per slice
// A widened strip's rows (K floats) are padded to an odd number of cache lines: rows a multiple
// of 4 KB apart would share their L1 sets, and the tile reads all NR of them at once.
constexpr int64_t strip_ld(int64_t K) { return ((K + 15) / 16 | 1) * 16; }
// The scratch of a bcast_* call: xt for M rows of x (whole blocks of kXtCols), and per thread a
// group of widened rows (bcast_i8 / bcast_bf16).
inline int64_t xt_floats(const DotTiles& t, int64_t M, int64_t K) {
  return (M + t.xt_cols - 1) / t.xt_cols * t.xt_cols * K;
}
inline int64_t strip_floats(const DotTiles& t, int64_t K) { return t.group_rows * strip_ld(K); }

// Columns [k0, k1) of xt (k0 a multiple of 8, so threads can split k): 8 x 8 blocks of x
// transposed in registers, rows past M as zeros.
template <class V>
void pack_xt(const float* x, int64_t M, int64_t ldx, int64_t K, int64_t k0, int64_t k1, float* xt) {
  constexpr int64_t MT = kXtCols<V>;
  for (int64_t m0 = 0; m0 < M; m0 += 8) {
    float* blk = xt + m0 / MT * K * MT + m0 % MT;
    int64_t k = k0;
    if (m0 + 8 <= M) {
      for (; k + 8 <= k1; k += 8) {
        const float* r = x + m0 * ldx + k;
        const __m256 rows[8] = {_mm256_loadu_ps(r),           _mm256_loadu_ps(r + ldx),     _mm256_loadu_ps(r + 2 * ldx),
                                _mm256_loadu_ps(r + 3 * ldx), _mm256_loadu_ps(r + 4 * ldx), _mm256_loadu_ps(r + 5 * ldx),
                                _mm256_loadu_ps(r + 6 * ldx), _mm256_loadu_ps(r + 7 * ldx)};
        store_transposed8(rows, blk + k * MT, MT);
      }
    }
    for (; k < k1; ++k)
      for (int64_t j = 0; j < 8; ++j) blk[k * MT + j] = m0 + j < M ? x[(m0 + j) * ldx + k] : 0.f;
  }
  // The rest of the last block's rows (past the last group of 8) are zeros.
  const int64_t Mp = (M + MT - 1) / MT * MT;
  for (int64_t m0 = (M + 7) / 8 * 8; m0 < Mp; m0 += 8) {
    float* blk = xt + m0 / MT * K * MT + m0 % MT;
    for (int64_t k = k0; k < k1; ++k) std::memset(blk + k * MT, 0, 8 * sizeof(float));
  }
}

// out[j * ldo + r] (+)= sum_k xt[k * xs + j] * w[r * ldw + k] for r < NR, j < mrows (<= TV * lanes
// of VT: the ISA's vector, or V::half's 8 lanes for a last block of up to 8 rows of x).
template <class VT, int NR, int TV>
inline void bcast_tile(const float* xt, int64_t xs, int64_t K, const float* w, int64_t ldw, int64_t mrows,
                       float* out, int64_t ldo, bool accumulate) {
  using reg = typename VT::reg;
  constexpr int64_t L = VT::lanes;
  reg acc[NR][TV];
#pragma GCC unroll 8
  for (int r = 0; r < NR; ++r)
#pragma GCC unroll 2
    for (int t = 0; t < TV; ++t) acc[r][t] = VT::zero();
  for (int64_t k = 0; k < K; ++k) {
    reg xv[TV];
#pragma GCC unroll 2
    for (int t = 0; t < TV; ++t) xv[t] = VT::loadx(xt + k * xs + t * L);
#pragma GCC unroll 8
    for (int r = 0; r < NR; ++r) {
      const reg b = VT::bcast(w[r * ldw + k]);
#pragma GCC unroll 2
      for (int t = 0; t < TV; ++t) acc[r][t] = VT::fma(b, xv[t], acc[r][t]);
    }
  }
  alignas(64) float tmp[NR][TV * L];
#pragma GCC unroll 8
  for (int r = 0; r < NR; ++r)
#pragma GCC unroll 2
    for (int t = 0; t < TV; ++t) VT::store(tmp[r] + t * L, acc[r][t]);
  for (int64_t j = 0; j < mrows; ++j) {
    float* o = out + j * ldo;
#pragma GCC unroll 8
    for (int r = 0; r < NR; ++r) o[r] = accumulate ? o[r] + tmp[r][j] : tmp[r][j];
  }
}

// nr (<= NR) weight rows: the largest tile that fits, so no row past the group is read.
template <class VT, int NR, int TV>
inline void bcast_rows(const float* xt, int64_t xs, int64_t K, const float* w, int64_t ldw, int nr, int64_t mrows,
                       float* out, int64_t ldo, bool accumulate) {
  if constexpr (NR > 1) {
    if (nr < NR) return bcast_rows<VT, NR - 1, TV>(xt, xs, K, w, ldw, nr, mrows, out, ldo, accumulate);
  }
  bcast_tile<VT, NR, TV>(xt, xs, K, w, ldw, mrows, out, ldo, accumulate);
}

// Rows [0, MT) of x (MT <= 4, x's own rows) against nr (<= NR) weight rows over kc elements:
// dot tiles along k (tile()), into out or added to it. MT x NT accumulators, 6-8 independent
// FMA chains for the two FMA pipes (a group's last rows, only at the end of a thread's range,
// take one weight row at a time). Not dot(): its one-row tile is 8 weight rows wide, and a
// group of AVX2's 6 would run as 6 single-chain tiles (9 rows on AVX2 took 1.16 ms that way
// against 1.04-1.05 with these).
template <class V, int MT, int NR>
inline void dot_rest(const float* x, int64_t ldx, const float* w, int64_t ldw, int nr, int64_t kc, float* out,
                     int64_t ldo, bool accumulate) {
  constexpr int NT = MT == 1 ? NR : MT == 2 ? NR / 2 : 2;
  float part[MT][NR];
  int n = 0;
  for (; n + NT <= nr; n += NT) tile<V, float, MT, NT>(x, ldx, w + n * ldw, ldw, kc, &part[0][n], NR, 1, nullptr);
  for (; n < nr; ++n) tile<V, float, MT, 1>(x, ldx, w + n * ldw, ldw, kc, &part[0][n], NR, 1, nullptr);
  for (int m = 0; m < MT; ++m)
    for (int r = 0; r < nr; ++r) out[m * ldo + r] = accumulate ? out[m * ldo + r] + part[m][r] : part[m][r];
}

// The lanes of the broadcast tile that serves a block of m rows of x (bcast_slice): two vectors,
// one, or V::half's 8 lanes; none for no rows.
template <class V>
constexpr int64_t bcast_lanes(int64_t m) {
  return m > V::lanes ? 2 * V::lanes : m > V::half::lanes ? V::lanes : m > 0 ? V::half::lanes : 0;
}
// How many of a last block's m rows take dot tiles over x's own rows instead (dot_rest): a block
// of at most 4 rows entirely (no broadcast pass at all), else the r rows past a multiple of 8
// where the rest's narrower broadcast tile saves at least 8 lanes per row moved: a row on dot
// tiles costs about what 8 broadcast lanes do. So 17 or 18 rows on AVX-512 run as 16 + 1-2, not
// 32 lanes, and 9 as 8 + 1; 10 stays on 16 lanes (as 8 + 2: 1.30 ms against 1.20-1.25).
// Measured in docs/BENCHMARKS.md, "Issue 19: the last rows of a prefill" (Swin-T's 49 rows,
// 32 + 17, cost what 64 did before).
template <class V>
constexpr int dot_rest_rows(int64_t m) {
  if (m <= 4) return static_cast<int>(m);
  const int r = static_cast<int>(m % 8);
  return r >= 1 && 8 * r <= bcast_lanes<V>(m) - bcast_lanes<V>(m - r) ? r : 0;
}

// One slice [k0, k0 + kc) of NR (nr) weight rows at src (stride lds, f32) against every block of
// xt, into out's columns [0, nr); the slices after the first accumulate. x (stride ldx) is xt's
// source, read for a last block's rest (below).
template <class V>
inline void bcast_slice(const float* xt, const float* x, int64_t ldx, int64_t M, int64_t K, int64_t k0, int64_t kc,
                        const float* src, int64_t lds, int nr, float* out, int64_t ldo) {
  constexpr int64_t MT = kXtCols<V>, L = V::lanes;
  constexpr int NR = kBcastRows<V>;
  using H = typename V::half;
  const bool acc = k0 > 0;
  for (int64_t m0 = 0; m0 < M; m0 += MT) {
    int64_t mrows = std::min(MT, M - m0);
    const int rest = dot_rest_rows<V>(mrows);
    mrows -= rest;
    const float* xb = xt + m0 * K + k0 * MT;
    float* ob = out + m0 * ldo;
    // A last block of a few rows takes narrower vectors: fewer lanes wasted on zeros.
    if (mrows > L)
      bcast_rows<V, NR, 2>(xb, MT, kc, src, lds, nr, mrows, ob, ldo, acc);
    else if (mrows > H::lanes)
      bcast_rows<V, NR, 1>(xb, MT, kc, src, lds, nr, mrows, ob, ldo, acc);
    else if (mrows > 0)
      bcast_rows<H, NR, 1>(xb, MT, kc, src, lds, nr, mrows, ob, ldo, acc);
    const float* xr = x + (m0 + mrows) * ldx + k0;
    float* orr = ob + mrows * ldo;
    switch (rest) {
      case 1: dot_rest<V, 1, NR>(xr, ldx, src, lds, nr, kc, orr, ldo, acc); break;
      case 2: dot_rest<V, 2, NR>(xr, ldx, src, lds, nr, kc, orr, ldo, acc); break;
      case 3: dot_rest<V, 3, NR>(xr, ldx, src, lds, nr, kc, orr, ldo, acc); break;
      case 4: dot_rest<V, 4, NR>(xr, ldx, src, lds, nr, kc, orr, ldo, acc); break;
      default: break;
    }
  }
}

// out[m * ldo + n] = sum_k x[m, k] * widen(w[n * ldw + k]) for m < M, n < nb, with x given as
// xt (pack_xt over all of K). An f32 weight's rows are read in place, k slice by k slice over all
// of the range (the slice of xt stays in L2 for every row; each row's slice is a 4 KB stream or
// longer). An i8 or bf16 weight's rows are widened a group at a time, whole, into `strip`
// (strip_floats(K) floats), and the slices run over the strip: widening a slice of each row
// instead read 1-2 KB pieces of rows 2-5 KB long, short streams the prefetchers lost, and a
// 5632 x 2048 i8 weight ran at 60-110 GFLOP/s where 2816 x 1024 ran at 170-180.
template <class V, class W>
void bcast_dot(const float* xt, const float* x, int64_t ldx, int64_t M, int64_t K, const void* wv, int64_t nb,
               int64_t ldw, float* strip, float* out, int64_t ldo) {
  constexpr int64_t L = V::lanes;
  constexpr int NR = kBcastRows<V>;
  const W* w = static_cast<const W*>(wv);
  if constexpr (std::is_same_v<W, float>) {
    for (int64_t k0 = 0; k0 < K || k0 == 0; k0 += kPrefillDepth) {  // K = 0: one pass writing zeros
      const int64_t kc = std::min(kPrefillDepth, K - k0);
      for (int64_t g = 0; g < nb; g += NR)
        bcast_slice<V>(xt, x, ldx, M, K, k0, kc, w + g * ldw + k0, ldw,
                       static_cast<int>(std::min<int64_t>(NR, nb - g)), out + g, ldo);
    }
  } else {
    const int64_t lds = strip_ld(K);
    constexpr int64_t kLineElems = 64 / sizeof(W);
    for (int64_t g = 0; g < nb; g += NR) {
      const int nr = static_cast<int>(std::min<int64_t>(NR, nb - g));
      // The group's rows are one contiguous stream; the next group's is prefetched meanwhile
      // (past the weight's end is harmless: a prefetch never faults).
      for (int r = 0; r < nr; ++r) {
        const W* row = w + (g + r) * ldw;
        float* s = strip + r * lds;
        for (int64_t k = 0; k < K; k += kLineElems) __builtin_prefetch(row + NR * ldw + k, 0, 3);
        int64_t k = 0;
        for (; k + L <= K; k += L) V::store(s + k, V::widen(row + k));
        for (; k < K; ++k) s[k] = widen1(row[k]);
      }
      for (int64_t k0 = 0; k0 < K || k0 == 0; k0 += kPrefillDepth)
        bcast_slice<V>(xt, x, ldx, M, K, k0, std::min(kPrefillDepth, K - k0), strip + k0, lds, nr, out + g, ldo);
    }
  }
}

// bcast_dot over an int4 weight: each group of NR rows dequantised whole into the strip (q * s,
// as tile_u4 computes it), then the same slices as an i8 weight's.
template <class V>
void bcast_u4(const float* xt, const float* x, int64_t ldx, int64_t M, int64_t K, const uint8_t* w, int64_t nb,
              int64_t ldw, const uint16_t* sc, int64_t lds, float* strip, float* out, int64_t ldo) {
  using reg = typename V::reg;
  constexpr int NR = kBcastRows<V>;
  constexpr int J = kU4Vecs<V>;
  const int64_t ld = strip_ld(K);
  for (int64_t g = 0; g < nb; g += NR) {
    const int nr = static_cast<int>(std::min<int64_t>(NR, nb - g));
    for (int r = 0; r < nr; ++r) {
      const uint8_t* row = w + (g + r) * ldw;
      const uint16_t* s = sc + (g + r) * lds;
      float* dst = strip + r * ld;
      for (int64_t b = 0; b < K / 2; b += 64) __builtin_prefetch(row + NR * ldw + b, 0, 3);
      for (int64_t q = 0; q < K / kInt4Block; ++q) {
        reg wd[J];
        V::dequant_u4(row + q * kInt4Group, s + 2 * q, wd);
        for (int j = 0; j < J; ++j) V::store(dst + q * kInt4Block + j * V::lanes, wd[j]);
      }
    }
    for (int64_t k0 = 0; k0 < K || k0 == 0; k0 += kPrefillDepth)
      bcast_slice<V>(xt, x, ldx, M, K, k0, std::min(kPrefillDepth, K - k0), strip + k0, ld, nr, out + g, ldo);
  }
}

template <class V>
DotTiles make_dot_tiles(const char* isa) {
  DotTiles t;
  t.i8 = dot<V, int8_t>;
  t.bf16 = dot<V, uint16_t>;
  t.f32 = dot<V, float>;
  t.f32_kn = dot_kn<V>;
  t.pack_xt = pack_xt<V>;
  t.xt_cols = kXtCols<V>;
  t.bcast_f32 = bcast_dot<V, float>;
  t.bcast_i8 = bcast_dot<V, int8_t>;
  t.bcast_bf16 = bcast_dot<V, uint16_t>;
  t.u4 = dot_u4<V>;
  t.bcast_u4 = bcast_u4<V>;
  t.group_rows = kBcastRows<V>;
  t.isa = isa;
  return t;
}

}  // namespace updraft::cpu::wq
