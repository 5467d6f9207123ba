// The register tiles of the sdpa kernel (src/kernels/cpu/attention.cpp), written once over a
// vector type so that the AVX2 build (attention.cpp, 8 lanes) and the AVX-512 build
// (attention_avx512.cpp, compiled with -mavx512f, 16 lanes) share them.
//
//   struct V { using reg = __m256; static constexpr int lanes = 8;
//              static reg zero(); static reg load(const float*); static void store(float*, reg);
//              static reg set1(float); static reg fma(reg a, reg b, reg c); static reg mul(reg, reg);
//              static float hsum(reg); };
//   scores_tile<V, R>(q, qs, kt, kts, E, scale, p, ps);        // p[r][j] = scale * (q_r . k_j), j < kts
//   scores_dots<V>(q, qs, rows, k, ks, j0, j1, E, scale, p, ps); // the same for keys [j0, j1), from k's rows
//   pv_tile<V, R>(p, S16, v, vs, n, Ev, y, ys, inv);             // y_r = inv_r * sum_{j<n} p[r][j] v_j
//
// Everything here is in an unnamed namespace on purpose: each translation unit instantiates its
// own copy with its own instruction set, and the linker must never merge an AVX-512
// instantiation into the AVX2 path (one definition rule across differently compiled units).
#pragma once
#include <cstdint>

namespace updraft::cpu::sdpa {

// One instruction set's tiles, as plain function pointers (the kernel picks a table when it is
// built). Wide score tiles take `score_rows` rows, pv tiles 4; the `_one` forms take one row.
struct Tiles {
  const char* isa;  // "avx2" or "avx512", part of the kernel's name
  int score_rows;
  // Scores of keys [0, kts) from kt = k^T [E, kts] (kts a multiple of 16), into p rows of
  // stride ps.
  void (*scores_wide)(const float* q, int64_t qs, const float* kt, int64_t kts, int64_t E, float scale, float* p,
                      int64_t ps);
  void (*scores_one)(const float* q, int64_t qs, const float* kt, int64_t kts, int64_t E, float scale, float* p,
                     int64_t ps);
  // Scores of keys [j0, j1) for `rows` rows as dot products of q's and k's rows: a few keys past
  // a multiple of 16 (Swin's 49 = 48 + 1), where a 16-key tile would compute 16.
  void (*scores_dots)(const float* q, int64_t qs, int64_t rows, const float* k, int64_t ks, int64_t j0, int64_t j1,
                      int64_t E, float scale, float* p, int64_t ps);
  void (*pv_four)(const float* p, int64_t S16, const float* v, int64_t vs, int64_t n, int64_t Ev, float* y,
                  int64_t ys, const float* inv);
  void (*pv_one)(const float* p, int64_t S16, const float* v, int64_t vs, int64_t n, int64_t Ev, float* y,
                 int64_t ys, const float* inv);
  // For each of `rows` rows of p (stride ps), in place over its first n[r] scores:
  // sc[j] = exp(sc[j] - shift[r]), shift[r] the row's max (NaN-propagating), sum[r] their sum. A
  // row of -inf (every key masked) becomes 0s with sum 0, shifted by 0. The AVX-512 form runs
  // every row's shift, then every row's exps, in two inlined loops, whose exps do not wait on one
  // another: row by row, each row's last vector waited for its exp's chain of dependent
  // instructions (a row of 49 scores took as long as one of 64). Each value has the bits a
  // one-row call gives it.
  void (*softmax_rows)(float* p, int64_t ps, int64_t rows, const int64_t* n, float* shift, float* sum);
};
const Tiles& tiles_avx2();    // attention.cpp
const Tiles& tiles_avx512();  // attention_avx512.cpp; call only where the CPU has AVX-512F

namespace {

// p[r][j] = scale * (q_r . k_j) for R query rows (row stride qs, p's row stride ps) and every
// key j < kts, from kt = k^T [E, kts] (zero past S). Keys go 16 at a time (16 / lanes registers a row); each k^T
// load feeds R rows of FMAs, and q is read as a broadcast from memory. The scale multiplies
// the finished dot products (one multiply per score, not one per q element per key block).
template <class V, int R>
void scores_tile(const float* q, int64_t qs, const float* kt, int64_t kts, int64_t E, float scale, float* p,
                 int64_t ps) {
  constexpr int K = 16 / V::lanes;
  const typename V::reg vscale = V::set1(scale);
  for (int64_t j = 0; j < kts; j += 16) {
    typename V::reg acc[R][K];
    for (int r = 0; r < R; ++r)
      for (int c = 0; c < K; ++c) acc[r][c] = V::zero();
    const float* kc = kt + j;
    for (int64_t e = 0; e < E; ++e, kc += kts) {
      typename V::reg kv[K];
      for (int c = 0; c < K; ++c) kv[c] = V::load(kc + c * V::lanes);
      for (int r = 0; r < R; ++r) {
        const typename V::reg qv = V::set1(q[r * qs + e]);
        for (int c = 0; c < K; ++c) acc[r][c] = V::fma(qv, kv[c], acc[r][c]);
      }
    }
    for (int r = 0; r < R; ++r)
      for (int c = 0; c < K; ++c) V::store(p + r * ps + j + c * V::lanes, V::mul(acc[r][c], vscale));
  }
}

// p[r][j] = scale * (q_r . k_j) for `rows` rows and keys j in [j0, j1), each a dot product over
// E along q's and k's rows (lanes of E, then a horizontal sum). Rows are independent, so their
// sums overlap in the pipeline.
template <class V>
void scores_dots(const float* q, int64_t qs, int64_t rows, const float* k, int64_t ks, int64_t j0, int64_t j1,
                 int64_t E, float scale, float* p, int64_t ps) {
  const int64_t Ev = E / V::lanes * V::lanes;
  for (int64_t j = j0; j < j1; ++j) {
    const float* kj = k + j * ks;
    for (int64_t r = 0; r < rows; ++r) {
      const float* qr = q + r * qs;
      typename V::reg acc = V::zero();
      for (int64_t e = 0; e < Ev; e += V::lanes) acc = V::fma(V::load(qr + e), V::load(kj + e), acc);
      float d = V::hsum(acc);
      for (int64_t e = Ev; e < E; ++e) d += qr[e] * kj[e];
      p[r * ps + j] = d * scale;
    }
  }
}

// Columns [e, e + NV * lanes) of y_r = inv_r * sum_{j < n} p[r][j] v_j for R rows (p row stride
// S16, v row stride vs, y row stride ys).
template <class V, int R, int NV>
void pv_columns(const float* p, int64_t S16, const float* v, int64_t vs, int64_t n, int64_t e, float* y, int64_t ys,
                const float* inv) {
  typename V::reg acc[R][NV];
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < NV; ++c) acc[r][c] = V::zero();
  const float* vr = v + e;
  for (int64_t j = 0; j < n; ++j, vr += vs) {
    typename V::reg vv[NV];
    for (int c = 0; c < NV; ++c) vv[c] = V::load(vr + c * V::lanes);
    for (int r = 0; r < R; ++r) {
      const typename V::reg pv = V::set1(p[r * S16 + j]);
      for (int c = 0; c < NV; ++c) acc[r][c] = V::fma(pv, vv[c], acc[r][c]);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < NV; ++c)
      V::store(y + r * ys + e + c * V::lanes, V::mul(acc[r][c], V::set1(inv[r])));
}

// All Ev columns: tiles of NV_WIDE registers a row (at most 16 accumulators for R = 4), then
// two registers (AVX-512: 32 columns, a head dim of 32 as in Swin, with 8 accumulators in flight
// rather than 4 of a one-register tile), then one, then scalar columns.
template <class V, int R>
void pv_tile(const float* p, int64_t S16, const float* v, int64_t vs, int64_t n, int64_t Ev, float* y, int64_t ys,
             const float* inv) {
  constexpr int NV_WIDE = V::lanes == 16 ? 4 : 2;  // 64 columns (AVX-512) or 16 (AVX2) a tile
  int64_t e = 0;
  for (; e + NV_WIDE * V::lanes <= Ev; e += NV_WIDE * V::lanes) pv_columns<V, R, NV_WIDE>(p, S16, v, vs, n, e, y, ys, inv);
  if constexpr (NV_WIDE > 2)
    for (; e + 2 * V::lanes <= Ev; e += 2 * V::lanes) pv_columns<V, R, 2>(p, S16, v, vs, n, e, y, ys, inv);
  for (; e + V::lanes <= Ev; e += V::lanes) pv_columns<V, R, 1>(p, S16, v, vs, n, e, y, ys, inv);
  for (; e < Ev; ++e)
    for (int r = 0; r < R; ++r) {
      float acc = 0.f;
      for (int64_t j = 0; j < n; ++j) acc += p[r * S16 + j] * v[j * vs + e];
      y[r * ys + e] = acc * inv[r];
    }
}

}  // namespace
}  // namespace updraft::cpu::sdpa
