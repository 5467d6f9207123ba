// Thread counts per kernel (src/kernels/cpu/threads.h): the work rule, ScopedThreads restoring
// the caller's OpenMP setting, parallel_for covering every index once on any thread count, and
// oneDNN kernels built for one thread when their work is small (checked through the kernel
// name) while still matching the reference.
#include <gtest/gtest.h>
#include <omp.h>

#include <atomic>
#include <vector>

#include "kernel_test_util.h"
#include "kernels/cpu/threads.h"

using namespace updraft;
using namespace updraft::testing;

namespace {

TEST(KernelThreads, WorkRule) {
  EXPECT_EQ(cpu::threads_for_work(0, {0}), 1);
  EXPECT_EQ(cpu::threads_for_work(2.0 * 512 * 512, {0}), 1);  // a batch-1 Linear(512): one thread
  EXPECT_EQ(cpu::threads_for_work(1e12, {3}), 3);            // capped by the requested count
  EXPECT_EQ(cpu::threads_for_work(1e12, {1}), 1);
  EXPECT_EQ(cpu::threads_for_work(1e12, {0}), omp_get_max_threads());
  EXPECT_EQ(cpu::threads_for_work(2.5 * cpu::kMinWorkPerThread, {8}), 2);
}

// A gemm's work is its flops or its streamed bytes (in flop units), whichever is larger: a
// batch-1 Linear(512) does 0.5 Mflop but streams a 1 MB weight, so it gets two threads; a
// batch-1 Linear(128) (64 KB) stays on one; compute-bound shapes follow the flops.
TEST(KernelThreads, GemmRuleCountsStreamedBytes) {
  auto linear_threads = [](double M, double K, double N) {
    return cpu::threads_for_gemm(2 * M * K * N, 4 * (M * K + K * N + M * N), {8});
  };
  EXPECT_EQ(linear_threads(1, 512, 512), 2);
  EXPECT_EQ(linear_threads(1, 128, 128), 1);
  EXPECT_EQ(linear_threads(1, 768, 3072), 8);  // 9.4 MB of weight (GPT-2 decode's MLP): all
  EXPECT_EQ(linear_threads(1024, 1024, 1024), 8);
  EXPECT_EQ(cpu::threads_for_gemm(3 * cpu::kMinWorkPerThread, 0, {8}), 3);  // bytes never lower it
}

TEST(KernelThreads, ScopedThreadsRestores) {
  const int before = omp_get_max_threads();
  {
    cpu::ScopedThreads t(1);
    EXPECT_EQ(omp_get_max_threads(), 1);
    {
      cpu::ScopedThreads u(3);
      EXPECT_EQ(omp_get_max_threads(), 3);
    }
    EXPECT_EQ(omp_get_max_threads(), 1);
  }
  EXPECT_EQ(omp_get_max_threads(), before);
}

TEST(KernelThreads, ParallelForCoversEveryIndexOnce) {
  for (int nt : {1, 2, 3}) {
    for (int64_t n : {0, 1, 2, 7, 1001}) {
      std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
      cpu::parallel_for(n, nt, [&](int64_t i) { hits[static_cast<size_t>(i)]++; });
      for (int64_t i = 0; i < n; ++i) EXPECT_EQ(hits[static_cast<size_t>(i)].load(), 1) << "nt=" << nt << " n=" << n;
    }
  }
}

Tensor rnd(std::vector<int64_t> shape, uint32_t seed) { return random_tensor(DType::f32, std::move(shape), seed); }

// A batch-1 Linear(128) (a 64 KB weight) runs on one thread; a large one keeps all threads
// (when there are several). Both match the reference, also from four threads at once.
TEST(KernelThreads, SmallOneDnnStepsRunOnOneThread) {
  const int before = omp_get_max_threads();
  auto small = build("linear", {input(rnd({1, 128}, 1)), constant(rnd({128, 128}, 2))}, {});
  auto kernel = make_kernel_for(*small, Device::cpu);
  std::string name = kernel->name();
  EXPECT_NE(name.find(":1thread"), std::string::npos) << name;
  run_kernel(*kernel, *small);
  EXPECT_EQ(omp_get_max_threads(), before);  // creation and run() restore the caller's setting
  expect_same_from_threads(*small, 5, kGemmRtol, kGemmAtol);

  auto big = build("linear", {input(rnd({256, 512}, 3)), constant(rnd({512, 512}, 4))}, {});
  name = make_kernel_for(*big, Device::cpu)->name();
  if (omp_get_max_threads() > 1) EXPECT_EQ(name.find(":1thread"), std::string::npos) << name;
  expect_same_from_threads(*big, 3, kGemmRtol, kGemmAtol);
}

}  // namespace

// Elementwise kernels run with the compile's thread count (ctx.num_threads) whatever the
// caller's OpenMP setting, and restore the caller's setting afterwards; large tensors (past
// the serial threshold) match the reference either way.
TEST(KernelThreads, ElementwiseHonoursTheCompileThreadCount) {
  const int before = omp_get_max_threads();
  omp_set_num_threads(3);
  auto b = build("add", {input(rnd({300, 400}, 5)), input(rnd({400}, 6))}, {});
  auto ref = make_kernel_for(*b, Device::ref);
  const Tensor want = run_kernel(*ref, *b);
  for (int threads : {1, 2, 0}) {
    KernelContext ctx = b->context();
    ctx.num_threads = threads;
    auto k = (*KernelRegistry::get().find("add", Device::cpu))(ctx);
    ASSERT_NE(k, nullptr);
    EXPECT_TRUE(all_close(run_kernel(*k, *b), want, 0, 0)) << "num_threads=" << threads;
    EXPECT_EQ(omp_get_max_threads(), 3);
  }
  omp_set_num_threads(before);
}
