// How many OpenMP threads one kernel call uses, chosen from the call's work when the kernel is
// built, and applied to the calling thread around both primitive creation and execution.
//
//   int n = cpu::threads_for_work(2.0 * M * N * K, ctx.thread_budget());  // in the factory
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

#include "kernels/kernel_options.h"  // kMinWorkPerThread, ThreadBudget

namespace updraft::cpu {

// 1 when `work` is below the budget's min_work, else up to budget.requested threads (0:
// omp_get_max_threads()), one per min_work.
inline int threads_for_work(double work, const ThreadBudget& budget) {
  int max_threads = budget.requested > 0 ? budget.requested : omp_get_max_threads();
  double n = work / budget.min_work;
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
inline int threads_for_gemm(double flops, double bytes, const ThreadBudget& budget) {
  return threads_for_work(std::max(flops, bytes * kFlopsPerByte), budget);
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
