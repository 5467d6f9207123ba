// The f32 linear and matmul that read a constant weight in place (kernels/cpu/linear_stream.h):
// which nodes take it (a constant 2-d weight of at least 64K elements, the vectorised dim >= 64;
// any rows of x for linear, 1 to 4 static rows for matmul's [K, N]) and which keep oneDNN's
// gemm, a [K, N] weight's rows split over threads, and its results against the reference over
// row counts (a decode step's few, a prompt's many: the broadcast tiles' blocks and their
// narrow and partial tails), odd N and K (tile, group and lane tails, k slices), every epilogue,
// each instruction set, a weight large enough to split over threads, and concurrent calls.
// linear's weight is [N, K]; matmul's (x @ W) is [K, N].
#include <gtest/gtest.h>

#include <omp.h>

#include "kernel_test_util.h"

using namespace updraft;
using namespace updraft::testing;

namespace {

Tensor rnd(const std::vector<int64_t>& s, uint32_t seed) { return random_tensor(DType::f32, s, seed); }

bool streams(const std::string& kernel) {
  return kernel.rfind("cpu_linear_f32_", 0) == 0 || kernel.rfind("cpu_matmul_stream_f32_", 0) == 0;
}

// Each case (why, inputs) matches the reference on a kernel that is not the streaming one.
using Case = std::pair<std::string, std::vector<Arg>>;
void expect_keeps_onednn(const std::string& op, std::vector<Case> cases) {
  for (Case& c : cases) {
    SCOPED_TRACE(c.first);
    std::string name = expect_matches_ref(op, std::move(c.second), {});
    EXPECT_FALSE(streams(name)) << name;
  }
}

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

// Every epilogue over a decode step's rows (1, 3) and a prompt's ([batch, seq, K]: the
// broadcast tiles' outputs).
TEST(LinearStream, EveryEpilogue) {
  for (const std::string& act : epilogue_activations())
    for (const std::vector<int64_t>& rows : std::vector<std::vector<int64_t>>{{1}, {3}, {2, 19}}) {
      SCOPED_TRACE(act + " rows=" + std::to_string(rows.back()));
      Attrs a = epilogue_attrs(act);
      a["has_bias"] = true;
      a["has_residual"] = true;
      std::vector<int64_t> xs = rows, rs = rows;
      xs.push_back(256), rs.push_back(260);
      std::string name = expect_matches_ref(
          "linear", {input(rnd(xs, 1)), constant(rnd({260, 256}, 2)), constant(rnd({260}, 3)), input(rnd(rs, 4))}, a);
      EXPECT_TRUE(streams(name)) << name;
    }
}

// A prompt's rows: the broadcast tiles (prepack_weights off, so above kInPlaceMaxRows too). Row
// counts around their blocks (32 rows on AVX-512, 16 on AVX2; a last block of up to 8 rows
// takes 8-lane tiles, up to 16 one register), N off the weight-row groups (8 / 6) and the
// threads' 16-row blocks, K past one k slice (1024: the second slice accumulates) and off the
// 8-column transposes of x, 1 to 3 threads, each ISA.
TEST(LinearStream, PromptRowsOverOddShapes) {
  std::vector<CpuIsa> isas = {CpuIsa::avx2};
  if (__builtin_cpu_supports("avx512f")) isas.push_back(CpuIsa::native);
  for (CpuIsa isa : isas)
    for (int threads : {1, 2, 3})
      // The last block of rows in every form (linear_wq_tiles.h, dot_rest_rows): whole, on
      // narrower vectors (10, 12, 19), and rows on dot tiles: 1-2 past a multiple of 8 (9, 17,
      // 18, 49 = 32 + 16 + 1) or a block of at most 4 (33, 36 = 32 + 4).
      for (int64_t M : {5, 8, 9, 10, 12, 16, 17, 18, 19, 31, 33, 36, 49, 70})
        for (auto [N, K] : std::vector<std::pair<int64_t, int64_t>>{{259, 256}, {101, 1037}, {64, 2100}}) {
          SCOPED_TRACE(std::string(cpu_isa_name(isa)) + " threads=" + std::to_string(threads) + " M=" +
                       std::to_string(M) + " N=" + std::to_string(N) + " K=" + std::to_string(K));
          const int prev = omp_get_max_threads();
          omp_set_num_threads(threads);
          KernelOptions o = isa_options(isa);
          o.prepack_weights = false;  // in place past kInPlaceMaxRows too (M = 70)
          std::string name =
              expect_matches_ref("linear", {input(rnd({M, K}, 1)), constant(rnd({N, K}, 2))}, {}, kGemmRtol, kGemmAtol, o);
          omp_set_num_threads(prev);
          EXPECT_TRUE(streams(name)) << name;
          EXPECT_NE(name.find(isa == CpuIsa::avx2 ? "avx2" : "avx512"), std::string::npos) << name;
        }
}

TEST(LinearStream, OtherLinearsKeepOneDnn) {
  std::vector<Case> cases;
  cases.push_back({"more static rows than kInPlaceMaxRows, prepacking on",
                   {input(rnd({65, 256}, 1)), constant(rnd({300, 256}, 2))}});
  cases.push_back({"a weight computed per call", {input(rnd({1, 256}, 1)), input(rnd({300, 256}, 2))}});
  cases.push_back({"a weight that sits in cache", {input(rnd({1, 128}, 1)), constant(rnd({100, 128}, 2))}});
  cases.push_back({"short rows", {input(rnd({1, 32}, 1)), constant(rnd({4096, 32}, 2))}});
  expect_keeps_onednn("linear", std::move(cases));
}

// [1024, 1024] (4 MB) is enough work for the thread rule to split the weight over 2 threads.
// A multi-thread OpenMP region on purpose: the TSan lane leaves this test out (libgomp's
// barriers are invisible to TSan; scripts/sanitize.sh).
TEST(LinearStream, LargeWeightSplitOverOpenMPThreads) {
  for (int threads : {1, 2})
    for (const std::string op : {"linear", "matmul"}) {
      SCOPED_TRACE(op + " threads " + std::to_string(threads));
      const int prev = omp_get_max_threads();
      omp_set_num_threads(threads);
      std::string name = expect_matches_ref(op, {input(rnd({2, 1024}, 5)), constant(rnd({1024, 1024}, 6)),
                                                 constant(rnd({1024}, 7))},
                                            {{"has_bias", true}});
      omp_set_num_threads(prev);
      EXPECT_TRUE(streams(name)) << name;
    }
}

// [K, N] weights split by rows over the threads: each thread's partial sums over all N, added
// into y before the epilogue, which runs split by columns. Row counts of x 1-4, K not a
// multiple of the tiles' six chunks (each thread's rows left over run one by one) and N not of
// the vector width, 2 and 3 threads (3 on purpose uneven), every epilogue with a bias and a
// residual.
TEST(LinearStream, MatmulRowsSplitOverThreads) {
  for (int threads : {2, 3})
    for (int64_t M : {1, 2, 4}) {
      const int prev = omp_get_max_threads();
      omp_set_num_threads(threads);
      for (const std::string& act : {std::string("none"), std::string("gelu_tanh"), std::string("leaky_relu")}) {
        SCOPED_TRACE("threads " + std::to_string(threads) + " M=" + std::to_string(M) + " " + act);
        Attrs a = epilogue_attrs(act);
        a["has_bias"] = true;
        a["has_residual"] = true;
        std::string name = expect_matches_ref(
            "matmul", {input(rnd({M, 1023}, 1)), constant(rnd({1023, 301}, 2)), constant(rnd({301}, 3)),
                       input(rnd({M, 301}, 4))}, a);
        EXPECT_TRUE(streams(name)) << name;
      }
      omp_set_num_threads(prev);
    }
}

// One kernel called from 4 threads at once (the TSan lane runs this).
TEST(LinearStream, ConcurrentCalls) {
  OneNode lin("linear", {input(rnd({1, 512}, 8)), constant(rnd({700, 512}, 9))}, {});
  expect_same_from_threads(lin, 20, kGemmRtol, kGemmAtol);
  OneNode mm("matmul", {input(rnd({2, 512}, 8)), constant(rnd({512, 700}, 9))}, {});
  expect_same_from_threads(mm, 20, kGemmRtol, kGemmAtol);
}

TEST(LinearStream, MatmulWithAWeightStoredKByN) {
  for (int64_t M : {1, 2, 3, 4})
    for (auto [K, N] : std::vector<std::pair<int64_t, int64_t>>{{256, 259}, {301, 300}, {1024, 64}, {67, 1031}}) {
      SCOPED_TRACE("M=" + std::to_string(M) + " K=" + std::to_string(K) + " N=" + std::to_string(N));
      std::string name = expect_matches_ref("matmul", {input(rnd({M, K}, 1)), constant(rnd({K, N}, 2))}, {});
      EXPECT_TRUE(streams(name)) << name;
    }
  // GPT-2's decode step: x [batch, 1, K]; and a 1-d x.
  for (const std::vector<int64_t>& x : {std::vector<int64_t>{2, 1, 768}, std::vector<int64_t>{768}}) {
    std::string name = expect_matches_ref("matmul", {input(rnd(x, 3)), constant(rnd({768, 2304}, 4))}, {});
    EXPECT_TRUE(streams(name)) << name;
  }
  for (const std::string& act : epilogue_activations()) {
    SCOPED_TRACE(act);
    Attrs a = epilogue_attrs(act);
    a["has_bias"] = true;
    a["has_residual"] = true;
    std::string name = expect_matches_ref(
        "matmul", {input(rnd({3, 256}, 1)), constant(rnd({256, 260}, 2)), constant(rnd({260}, 3)), input(rnd({3, 260}, 4))}, a);
    EXPECT_TRUE(streams(name)) << name;
  }
}

TEST(LinearStream, OtherMatmulsKeepOneDnn) {
  std::vector<Case> cases;
  cases.push_back({"5 rows of x", {input(rnd({5, 256}, 1)), constant(rnd({256, 300}, 2))}});
  cases.push_back({"a weight computed per call", {input(rnd({1, 256}, 1)), input(rnd({256, 300}, 2))}});
  cases.push_back({"a batched weight", {input(rnd({2, 1, 256}, 1)), constant(rnd({2, 256, 300}, 2))}});
  cases.push_back({"narrow outputs", {input(rnd({1, 4096}, 1)), constant(rnd({4096, 32}, 2))}});
  expect_keeps_onednn("matmul", std::move(cases));
}
