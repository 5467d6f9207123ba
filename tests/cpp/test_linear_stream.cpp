// The streaming f32 linear (kernels/cpu/linear_stream.h): which linears take it (a constant
// weight of at least 64K elements, K >= 64, 1 to 4 static rows of x) and which keep oneDNN's
// gemm, and its results against the reference over row counts, odd N and K (tile and lane
// tails), every epilogue, a weight large enough to split over threads, and concurrent calls.
#include <gtest/gtest.h>

#include <omp.h>

#include "kernel_test_util.h"

using namespace updraft;
using namespace updraft::testing;

namespace {

Tensor rnd(const std::vector<int64_t>& s, uint32_t seed) { return random_tensor(DType::f32, s, seed); }

bool streams(const std::string& kernel) { return kernel.rfind("cpu_linear_stream_f32_", 0) == 0; }

}  // namespace

TEST(LinearStream, FewRowsOfXTakeItOverOddShapes) {
  for (int64_t M : {1, 2, 3, 4})
    for (auto [N, K] : std::vector<std::pair<int64_t, int64_t>>{{259, 256}, {300, 301}, {64, 1024}, {1031, 67}}) {
      SCOPED_TRACE("M=" + std::to_string(M) + " N=" + std::to_string(N) + " K=" + std::to_string(K));
      std::string name = expect_matches_ref("linear", {input(rnd({M, K}, 1)), constant(rnd({N, K}, 2))}, {});
      EXPECT_TRUE(streams(name)) << name;
    }
  // A decode step's x is [batch, 1, K].
  std::string name = expect_matches_ref("linear", {input(rnd({2, 1, 512}, 3)), constant(rnd({384, 512}, 4))}, {});
  EXPECT_TRUE(streams(name)) << name;
}

TEST(LinearStream, EveryEpilogue) {
  for (const std::string& act : epilogue_activations())
    for (int64_t M : {1, 3}) {
      SCOPED_TRACE(act + " M=" + std::to_string(M));
      Attrs a = epilogue_attrs(act);
      a["has_bias"] = true;
      a["has_residual"] = true;
      std::string name = expect_matches_ref(
          "linear", {input(rnd({M, 256}, 1)), constant(rnd({260, 256}, 2)), constant(rnd({260}, 3)), input(rnd({M, 260}, 4))},
          a);
      EXPECT_TRUE(streams(name)) << name;
    }
}

TEST(LinearStream, OtherLinearsKeepOneDnn) {
  struct Case {
    std::string why;
    std::vector<Arg> args;
  };
  std::vector<Case> cases;
  cases.push_back({"5 rows of x", {input(rnd({5, 256}, 1)), constant(rnd({300, 256}, 2))}});
  cases.push_back({"a weight computed per call", {input(rnd({1, 256}, 1)), input(rnd({300, 256}, 2))}});
  cases.push_back({"a weight that sits in cache", {input(rnd({1, 128}, 1)), constant(rnd({100, 128}, 2))}});
  cases.push_back({"short rows", {input(rnd({1, 32}, 1)), constant(rnd({4096, 32}, 2))}});
  for (Case& c : cases) {
    SCOPED_TRACE(c.why);
    std::string name = expect_matches_ref("linear", std::move(c.args), {});
    EXPECT_FALSE(streams(name)) << name;
  }
}

// [1024, 1024] (4 MB) is enough work for the thread rule to split its rows over 2 threads.
TEST(LinearStream, LargeWeightSplitOverThreadsAndConcurrentCalls) {
  for (int threads : {1, 2}) {
    SCOPED_TRACE("threads " + std::to_string(threads));
    const int prev = omp_get_max_threads();
    omp_set_num_threads(threads);
    std::string name = expect_matches_ref("linear", {input(rnd({2, 1024}, 5)), constant(rnd({1024, 1024}, 6)),
                                                     constant(rnd({1024}, 7))},
                                          {{"has_bias", true}});
    omp_set_num_threads(prev);
    EXPECT_TRUE(streams(name)) << name;
  }
  OneNode n("linear", {input(rnd({1, 512}, 8)), constant(rnd({700, 512}, 9))}, {});
  expect_same_from_threads(n, 20, kGemmRtol, kGemmAtol);
}
