// The f64 GEMM driver: packing, blocking, threads and the tile epilogue (gemm_f64.h), and the
// AVX2 + FMA micro-kernel (6 x 8, 12 ymm accumulators).
#include "kernels/cpu/gemm_f64.h"

#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "core/error.h"
#include "kernels/cpu/gemm_f64_ukr.h"
#include "kernels/cpu/threads.h"
#include "kernels/elementwise_ops.h"

namespace updraft::cpu::f64 {

namespace {
struct Avx2 {
  using reg = __m256d;
  static constexpr int lanes = 4;
  static reg zero() { return _mm256_setzero_pd(); }
  static reg load(const double* p) { return _mm256_loadu_pd(p); }
  static void store(double* p, reg v) { _mm256_storeu_pd(p, v); }
  static reg set1(double x) { return _mm256_set1_pd(x); }
  static reg fma(reg a, reg b, reg c) { return _mm256_fmadd_pd(a, b, c); }
  static reg add(reg a, reg b) { return _mm256_add_pd(a, b); }
};

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
int64_t round_up(int64_t a, int64_t b) { return ceil_div(a, b) * b; }

// Panels of `width` rows of A (rows [r0, r0 + rlen), K range [k0, k0 + kc)) into dst, k-major
// inside a panel, zero past rlen.
void pack_a(double* dst, Operand a, int64_t r0, int64_t rlen, int64_t k0, int64_t kc, int width,
            const double* row_scale) {
  for (int64_t t = 0; t * width < rlen; ++t) {
    double* d = dst + t * kc * width;
    for (int i = 0; i < width; ++i) {
      const int64_t r = r0 + t * width + i;
      if (t * width + i >= rlen) {
        for (int64_t k = 0; k < kc; ++k) d[k * width + i] = 0;
        continue;
      }
      const double* s = a.p + r * a.rs + k0 * a.cs;
      if (row_scale) {
        const double sc = row_scale[r];
        for (int64_t k = 0; k < kc; ++k) d[k * width + i] = s[k * a.cs] * sc;
      } else {
        for (int64_t k = 0; k < kc; ++k) d[k * width + i] = s[k * a.cs];
      }
    }
  }
}

// Panels of `width` columns of B (columns [c0, c0 + clen), K range [k0, k0 + kc)), width
// values per k, zero past clen. Reads along whichever of B's dims has the smaller stride.
void pack_b(double* dst, Operand b, int64_t c0, int64_t clen, int64_t k0, int64_t kc, int width) {
  const bool rows_inner = std::llabs(b.cs) <= std::llabs(b.rs);
  for (int64_t t = 0; t * width < clen; ++t) {
    double* d = dst + t * kc * width;
    const int64_t n = std::min<int64_t>(width, clen - t * width);
    const double* s = b.p + k0 * b.rs + (c0 + t * width) * b.cs;
    if (rows_inner) {
      for (int64_t k = 0; k < kc; ++k) {
        const double* sk = s + k * b.rs;
        double* dk = d + k * width;
        if (b.cs == 1) std::memcpy(dk, sk, sizeof(double) * n);
        else
          for (int64_t j = 0; j < n; ++j) dk[j] = sk[j * b.cs];
        for (int64_t j = n; j < width; ++j) dk[j] = 0;
      }
    } else {
      for (int64_t j = 0; j < width; ++j) {
        if (j >= n) {
          for (int64_t k = 0; k < kc; ++k) d[k * width + j] = 0;
          continue;
        }
        const double* sj = s + j * b.cs;
        for (int64_t k = 0; k < kc; ++k) d[k * width + j] = sj[k * b.rs];
      }
    }
  }
}

// The switch on the activation taken once per row, not per element.
template <EwOp A>
void activate_row_t(double* c, int n, double alpha, double beta) {
  if constexpr (ew_op_info(A).epi != EwEpi::no)
    for (int j = 0; j < n; ++j) c[j] = EwRef<A>::template eval<double>(c[j], alpha, beta);
}

void activate_row(EwOp a, double* c, int n, double alpha, double beta) {
  switch (a) {
#define UPDRAFT_EW_OP(name, ...) \
  case EwOp::name: return activate_row_t<EwOp::name>(c, n, alpha, beta);
#include "ir/elementwise_ops.def"
    case EwOp::count_: return;
  }
}

// act(C + bias + residual) over an m x n tile at (row r0, column c0) of the problem.
void tile_epilogue(const TileEpilogue& ep, const double* res, double* c, int64_t ldc, int64_t r0, int64_t c0, int m,
                   int n) {
  for (int i = 0; i < m; ++i) {
    double* ci = c + i * ldc;
    const int64_t r = r0 + i;
    if (ep.bias) {
      if (ep.bias_per_row) {
        const double bv = ep.bias[r * ep.bias_stride];
        for (int j = 0; j < n; ++j) ci[j] += bv;
      } else {
        const double* bp = ep.bias + c0 * ep.bias_stride;
        for (int j = 0; j < n; ++j) ci[j] += bp[j * ep.bias_stride];
      }
    }
    if (res) {
      const double* rp = res + r * ep.res_rs + c0 * ep.res_cs;
      for (int j = 0; j < n; ++j) ci[j] += rp[j * ep.res_cs];
    }
    if (ep.attrs.act) activate_row(*ep.attrs.act, ci, n, ep.attrs.alpha, ep.attrs.beta);
  }
}

}  // namespace

const MicroKernel& micro_avx2() {
  static const MicroKernel k{"avx2", 6, 8, micro<Avx2, 6, 2>};
  return k;
}

const MicroKernel& pick_micro(const KernelOptions& options) {
  return use_avx512(options) ? micro_avx512() : micro_avx2();
}

int64_t mc_for(const MicroKernel& uk) { return uk.mr * (144 / uk.mr); }

double activate(const Epilogue& e, double x) { return e.act ? ew_ref<double>(*e.act, x, e.alpha, e.beta) : x; }

PackedMatrix pack_whole(const MicroKernel& uk, bool a_side, int64_t rows, int64_t cols, Operand src,
                        const double* row_scale) {
  PackedMatrix p;
  p.a_side = a_side;
  p.rows = rows;
  p.cols = cols;
  p.width = a_side ? uk.mr : uk.nr;
  const int64_t K = a_side ? cols : rows, other = a_side ? rows : cols;
  p.padded = round_up(std::max<int64_t>(other, 1), p.width);
  const size_t n = static_cast<size_t>(std::max<int64_t>(K, 1) * p.padded);
  void* mem = std::aligned_alloc(64, (n * sizeof(double) + 63) / 64 * 64);
  UPDRAFT_CHECK(mem != nullptr, "kernels", "f64 gemm: cannot allocate the packed weight");
  p.data = std::shared_ptr<double>(static_cast<double*>(mem), [](double* q) { std::free(q); });
  for (int64_t k0 = 0; k0 < K; k0 += kKc) {
    const int64_t kc = std::min(kKc, K - k0);
    if (a_side) pack_a(p.data.get() + k0 * p.padded, src, 0, rows, k0, kc, uk.mr, row_scale);
    else pack_b(p.data.get() + k0 * p.padded, src, 0, cols, k0, kc, uk.nr);
  }
  return p;
}

int64_t gemm_scratch_doubles(const MicroKernel& uk) { return round_up(mc_for(uk) * kKc + kKc * kNcMax, 8); }

void gemm(const MicroKernel& uk, const Problem& p, int threads, double* scratch) {
  const int64_t M = p.M, N = p.N, K = p.K, MR = uk.mr, NR = uk.nr;
  if (M <= 0 || N <= 0) return;
  const int64_t nb = p.batch.count();
  if (nb == 0) return;
  int64_t mc = mc_for(uk), nc = std::min(kNcMax, round_up(N, NR));
  // Enough work items for the threads: narrower N blocks first, then shorter M blocks.
  auto items = [&] { return nb * ceil_div(M, mc) * ceil_div(N, nc); };
  while (threads > 1 && items() < threads && nc > NR) nc = round_up(nc / 2, NR);
  while (threads > 1 && items() < threads && mc > MR) mc = round_up(mc / 2, MR);
  const int64_t mblocks = ceil_div(M, mc), nblocks = ceil_div(N, nc);
  const int64_t per_thread = gemm_scratch_doubles(uk);
  const int nt = static_cast<int>(std::min<int64_t>(threads, items()));
  parallel_for(items(), nt, [&](int64_t item) {
    // Slot 0 when the loop runs inline: the caller may itself be one thread of an outer
    // region (sdpa's batches) that handed this call its own single slice.
    double* bufA = scratch + (nt > 1 ? static_cast<int64_t>(omp_get_thread_num()) : 0) * per_thread;
    double* bufB = bufA + mc_for(uk) * kKc;
    const int64_t ni = item % nblocks, mi = (item / nblocks) % mblocks, bi = item / (nblocks * mblocks);
    int64_t ao = 0, bo = 0, co = 0, ro = 0;
    int64_t rem = bi;
    for (int d = p.batch.nd - 1; d >= 0; --d) {
      const int64_t idx = rem % p.batch.size[d];
      rem /= p.batch.size[d];
      ao += idx * p.batch.a[d];
      bo += idx * p.batch.b[d];
      co += idx * p.batch.c[d];
      ro += idx * p.batch.res[d];
    }
    const int64_t i0 = mi * mc, mlen = std::min(mc, M - i0), j0 = ni * nc, nlen = std::min(nc, N - j0);
    double* C = p.c + co;
    const double* res = p.ep.res ? p.ep.res + ro : nullptr;
    if (K == 0) {
      for (int64_t i = 0; i < mlen; ++i) std::fill(C + (i0 + i) * p.ldc + j0, C + (i0 + i) * p.ldc + j0 + nlen, 0.0);
      tile_epilogue(p.ep, res, C + i0 * p.ldc + j0, p.ldc, i0, j0, static_cast<int>(mlen), static_cast<int>(nlen));
      return;
    }
    const Operand a{p.a.p + ao, p.a.rs, p.a.cs}, b{p.b.p + bo, p.b.rs, p.b.cs};
    for (int64_t k0 = 0; k0 < K; k0 += kKc) {
      const int64_t kc = std::min(kKc, K - k0);
      const bool last = k0 + kc >= K;
      const double* Ap = bufA;
      if (p.a_packed) Ap = p.a_packed->panel(k0, kc, i0 / MR);
      else pack_a(bufA, a, i0, mlen, k0, kc, uk.mr, p.a_row_scale);
      const double* Bp = bufB;
      if (p.b_packed) Bp = p.b_packed->panel(k0, kc, j0 / NR);
      else pack_b(bufB, b, j0, nlen, k0, kc, uk.nr);
      for (int64_t jr = 0; jr < nlen; jr += NR) {
        const int n = static_cast<int>(std::min(NR, nlen - jr));
        const double* bp = Bp + (jr / NR) * kc * NR;
        for (int64_t ir = 0; ir < mlen; ir += MR) {
          const int m = static_cast<int>(std::min(MR, mlen - ir));
          double* ct = C + (i0 + ir) * p.ldc + j0 + jr;
          uk.fn(kc, Ap + (ir / MR) * kc * MR, bp, ct, p.ldc, m, n, k0 > 0);
          if (last && !p.ep.empty()) tile_epilogue(p.ep, res, ct, p.ldc, i0 + ir, j0 + jr, m, n);
        }
      }
    }
  });
}

}  // namespace updraft::cpu::f64
