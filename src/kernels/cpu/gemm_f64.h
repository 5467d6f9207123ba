// The engine's own float64 GEMM, and the f64 compute kernels built on it (gemm_f64.cpp:
// linear, matmul; conv_f64.cpp: conv2d; sdpa_f64.cpp: sdpa).
//
// Why our own: oneDNN 3.2 has no f64 on the CPU, so without these a float64 model's linears,
// convs and attention went to PyTorch and the model was cut into many partitions.
//
// The GEMM is the usual blocked scheme (Goto / BLIS): C[M, N] = A[M, K] B[K, N], K cut into
// blocks of kc, M into blocks of mc, N into blocks of nc. For each block A is packed into
// panels of MR rows (column-major inside a panel: k-major, MR values per k) and B into panels
// of NR columns (NR values per k), zero-padded at the edges; a register-tiled micro-kernel
// computes an MR x NR tile of C from one A panel and one B panel, streaming kc steps of
// "load NR values of B, broadcast MR values of A, FMA". Operands are read through arbitrary
// row / column strides while packing, so transposed or strided views cost no copy. A constant
// operand (a weight) is packed once, when the kernel is built (PackedMatrix); the run then
// reads its panels directly.
//
// Micro-kernels: AVX2 + FMA (6 x 8, 12 accumulators; the engine's baseline) and AVX-512
// (12 x 16, 24 accumulators, gemm_f64_avx512.cpp), picked when a kernel is built: the CPU's
// AVX-512F unless KernelOptions::cpu_isa (avx2) caps the engine's own kernels at the baseline (as the
// f32 attention tiles do). Accumulation is in f64 throughout; a tile is summed over K in
// order of kc blocks, so results differ from a plain dot product by reassociation only.
//
// Epilogue: applied to each MR x NR tile right after its last K block, while it is in cache:
// C = act(C + bias + residual), bias per column (linear, matmul) or per row (conv2d, whose
// GEMM rows are output channels); the activation is the epilogue's elementwise op with its
// reference formula (kernels/elementwise_ops.h), in double, as the reference kernels use it.
//
// Threads: the (batch, M block, N block) work items are split over cpu::parallel_for; each
// thread packs into its own slice of the caller's scratch (gemm_scratch_doubles per thread).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ir/ops/params.h"
#include "kernels/kernel_options.h"

namespace updraft::cpu::f64 {

// One instruction set's micro-kernel. c[i * ldc + j] (+)= sum_k a[k * mr + i] * b[k * nr + j]
// for i < m, j < n (m <= mr, n <= nr; the packed panels are zero-padded to mr / nr).
// `accumulate`: add to C (a later K block) instead of overwriting it.
struct MicroKernel {
  const char* isa;  // "avx2" or "avx512", part of the kernel names
  int mr, nr;
  void (*fn)(int64_t kc, const double* a, const double* b, double* c, int64_t ldc, int m, int n, bool accumulate);
};
const MicroKernel& micro_avx2();    // gemm_f64.cpp
const MicroKernel& micro_avx512();  // gemm_f64_avx512.cpp; call only where the CPU has AVX-512F
// AVX-512 where the CPU has it, unless options.cpu_isa caps the engine's kernels at AVX2 (so a
// test can compare both paths).
const MicroKernel& pick_micro(const KernelOptions& options);

// Blocking. kc: one A panel (mr x kc) and one B panel (kc x nr) stay in L1; mc x kc of A in
// L2; kc x nc of B in L2/L3.
constexpr int64_t kKc = 256;
int64_t mc_for(const MicroKernel& uk);  // a multiple of mr
constexpr int64_t kNcMax = 2048;

// A matrix operand: element (i, j) at p[i * rs + j * cs] (strides in elements, any sign
// except that a broadcast dim may have stride 0).
struct Operand {
  const double* p = nullptr;
  int64_t rs = 0, cs = 0;
};

// A whole [rows, cols] operand packed once in the micro-kernel's panel layout, as the A side
// (panels of mr rows) or the B side (panels of nr columns). Block of K starting at k0 (a
// multiple of kKc) holds, for panel t, kc * width values at offset k0 * padded + t * kc * width,
// where `padded` is the other dim rounded up to the panel width.
struct PackedMatrix {
  bool a_side = false;
  int64_t rows = 0, cols = 0, width = 0, padded = 0;
  std::shared_ptr<double> data;
  const double* panel(int64_t k0, int64_t kc, int64_t idx) const {
    return data.get() + k0 * padded + idx * kc * width;
  }
};
// rows x cols of `src` as the A side (rows = M, cols = K) or the B side (rows = K, cols = N).
// `row_scale` (A side only, may be null): row i is multiplied by row_scale[i] first (the conv
// weight scale), rounded once to f64 as multiplying the weights would be.
PackedMatrix pack_whole(const MicroKernel& uk, bool a_side, int64_t rows, int64_t cols, Operand src,
                        const double* row_scale = nullptr);

// The epilogue's activation (ir/ops/params.h) on x by its elementwise formula
// (kernels/elementwise_ops.h), or x when it has none.
double activate(const Epilogue& e, double x);

// act(C + bias + residual) on each finished tile: the node's epilogue with its operands.
struct TileEpilogue {
  const double* bias = nullptr;  // per column, or per row when bias_per_row
  int64_t bias_stride = 1;
  bool bias_per_row = false;
  const double* res = nullptr;  // residual, element (i, j) at res[i * res_rs + j * res_cs]
  int64_t res_rs = 0, res_cs = 1;
  Epilogue attrs;  // the activation (its bias/residual flags are the pointers above)
  bool empty() const { return !bias && !res && !attrs.act; }
};

// Up to 8 batch dims: the problem repeats over them; operand offsets per batch index are
// sum(index[d] * stride[d]) (stride 0: broadcast). C, residual and the packed operands
// follow the same rule (a packed operand must have stride 0 on every batch dim).
struct Batch {
  int nd = 0;
  int64_t size[8] = {};
  int64_t a[8] = {}, b[8] = {}, c[8] = {}, res[8] = {};
  int64_t count() const {
    int64_t n = 1;
    for (int d = 0; d < nd; ++d) n *= size[d];
    return n;
  }
};

struct Problem {
  int64_t M = 0, N = 0, K = 0;
  Operand a, b;                          // ignored where the packed form is given
  const PackedMatrix* a_packed = nullptr;
  const PackedMatrix* b_packed = nullptr;
  const double* a_row_scale = nullptr;  // A's row i times a_row_scale[i] (unpacked A only)
  double* c = nullptr;
  int64_t ldc = 0;  // C is row-major with row stride ldc
  TileEpilogue ep;
  Batch batch;
};

// Doubles of scratch one thread needs for problems with these K and N (and M when A is not
// packed). The scratch passed to gemm holds that many per thread, 64-byte aligned slices.
int64_t gemm_scratch_doubles(const MicroKernel& uk);
// C = act(A B + bias + residual) over the batch, with `threads` threads (1: the calling thread
// only). `scratch`: threads * gemm_scratch_doubles(uk) doubles.
void gemm(const MicroKernel& uk, const Problem& p, int threads, double* scratch);

// K == 0 (or an empty A/B): C = act(0 + bias + residual); gemm handles it (every tile gets the
// epilogue of a zero sum).

}  // namespace updraft::cpu::f64
