// The order in which a decode linear's tiles visit the rows of an [N, K] weight (row-major, each
// row a dot product with x): the f32-x tiles (linear_wq_tiles.h: f32, i8 and bf16 weights) and
// the int8 x int8 tiles (linear_i8_tiles.h) share it.
//
// A tile reads NT rows of w at once, each row from its start to its end. NT consecutive rows are
// NT short streams (an i8 row is 1-3 KB), which a core's prefetchers pick up anew at every tile:
// the tiles prefetched the next tile in software to make up for it (kPrefetchNextTile). Many
// rows (a thread's whole share of a decode step's weight) go instead in C chunks of consecutive
// rows, one row from each chunk per tile, so the weight is read as C long streams and the
// hardware prefetchers keep up. One row of x on one core, the 156M Llama's projections from
// memory: i8 weights 16 -> 25 GB/s, f32 22 -> 28 (AVX-512; docs/BENCHMARKS.md, "Issue 20: [N, K]
// weights read as long streams (session 33)"). What it does not do: a block of a prefill's rows
// (too few rows to chunk) keeps the consecutive tiles; the outputs of a chunked tile land N / C
// apart, so the tile takes an output stride.
#pragma once
#include <cstdint>

namespace updraft::cpu {

// Rows per chunk below which chunks are short streams too: consecutive tiles instead.
constexpr int64_t kChunkMinRows = 16;

// Tiles over rows [0, N): with C > 0 and at least kChunkMinRows rows per chunk, chunked(n, S)
// for n < S = N / C (rows n, n + S, ..., n + (C - 1) S; outputs S apart); then dense(n) for NT
// consecutive rows from n, and single(n) for the rows left.
template <int C, int NT, class Chunked, class Dense, class Single>
inline void for_row_tiles(int64_t N, Chunked&& chunked, Dense&& dense, Single&& single) {
  int64_t n = 0;
  if constexpr (C > 0) {
    const int64_t S = N / C;
    if (S >= kChunkMinRows) {
      for (; n < S; ++n) chunked(n, S);
      n = C * S;
    }
  }
  for (; n + NT <= N; n += NT) dense(n);
  for (; n < N; ++n) single(n);
}

}  // namespace updraft::cpu
