// How many OpenMP threads one kernel call uses, chosen from the call's work when the kernel is
// built, and applied to the calling thread around both primitive creation and execution.
//
//   int n = cpu::threads_for_work(2.0 * M * N * K, ctx.num_threads);  // in the factory
//   { cpu::ScopedThreads t(n); /* create the oneDNN primitive */ }
//   void run(...) const { cpu::ScopedThreads t(threads_); prim.execute(...); }
//
// Why: a team of 2+ threads costs a fork/join per call, a few microseconds on an idle machine,
// but when another process keeps the other cores busy the join waits for a thread the
// scheduler has not run yet, up to a scheduler time slice (milliseconds) per region. Small
// steps (an MLP layer at batch 1) therefore run on the calling thread alone: no region at all.
// oneDNN (OpenMP build) sizes its work split from omp_get_max_threads() when a primitive is
// created and runs `parallel(nthr, ...)` inline when nthr is 1, so the same count must be set
// at creation and at execution. omp_set_num_threads changes the calling thread's ICV only, so
// concurrent callers on other threads are unaffected.
#pragma once
#include <omp.h>

#include <algorithm>
#include <cstdint>

namespace updraft::cpu {

// Work (flops, or element operations for memory-bound kernels) below which a second thread
// does not pay for its fork/join: about 25 us of AVX2/AVX-512 f32 compute on one core.
constexpr double kMinWorkPerThread = 2.0 * 1024 * 1024;

// kMinWorkPerThread, or UPDRAFT_MIN_WORK_PER_THREAD when set to a positive number (read once;
// a tuning knob for benchmarks on idle or shared machines, docs/BENCHMARKS.md).
double min_work_per_thread();

// 1 for small work, else up to `requested` threads (0: omp_get_max_threads()).
inline int threads_for_work(double work, int requested) {
  int max_threads = requested > 0 ? requested : omp_get_max_threads();
  double n = work / min_work_per_thread();
  if (n < 2) return 1;
  return n >= max_threads ? max_threads : std::max(1, static_cast<int>(n));
}

// Flops that one byte of memory traffic is worth when a step is memory-bound: one core streams
// roughly 10-15 GB/s from DRAM or a shared L3 against its ~80 GFLOP/s of f32 FMAs, so a step
// that reads a megabyte (a batch-1 Linear(512)'s weight) takes ~70 us, above the fork/join
// threshold, though it does only 0.5 Mflop. Conservative: 4, not the ~6 the ratio gives.
constexpr double kFlopsPerByte = 4.0;

// For a gemm-like step: its time is set by its flops or by the bytes it must stream (the
// weight, for a linear at small M), whichever is larger.
inline int threads_for_gemm(double flops, double bytes, int requested) {
  return threads_for_work(std::max(flops, bytes * kFlopsPerByte), requested);
}

// Sets the calling thread's OpenMP thread count for a scope; restores it afterwards.
class ScopedThreads {
 public:
  explicit ScopedThreads(int n) : prev_(omp_get_max_threads()), n_(n) {
    if (n_ != prev_) omp_set_num_threads(n_);
  }
  ~ScopedThreads() {
    if (n_ != prev_) omp_set_num_threads(prev_);
  }
  ScopedThreads(const ScopedThreads&) = delete;
  ScopedThreads& operator=(const ScopedThreads&) = delete;

 private:
  int prev_, n_;
};

// for (i = 0; i < n; ++i) f(i) over `nt` threads (static schedule). With nt <= 1 the loop runs
// on the calling thread without entering an OpenMP region: `parallel for if (false)` still
// builds a one-thread team per call (~1000 instructions, more than a small kernel's work).
template <typename F>
void parallel_for(int64_t n, int nt, F&& f) {
  if (nt <= 1 || n <= 1) {
    for (int64_t i = 0; i < n; ++i) f(i);
    return;
  }
#pragma omp parallel for num_threads(nt) schedule(static)
  for (int64_t i = 0; i < n; ++i) f(i);
}

}  // namespace updraft::cpu
