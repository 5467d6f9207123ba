// int8 activations (linear_wq's quantize_x, docs/quantization.md "int8 activations"): the row
// format, each instruction set's quantiser and int8 x int8 tiles against the reference kernel
// (which they match exactly: the sums are integers, and the f32 steps after them are the same
// operations in the same order), the shape function's refusals and the quantize_activations pass.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "ir/ops/params.h"
#include "kernel_test_util.h"
#include "kernels/cpu/linear_i8_tiles.h"
#include "kernels/quantize.h"
#include "pass_test_util.h"
#include "passes/quantize_activations.h"
#include "passes/quantize_weights.h"

using namespace updraft;
using namespace updraft::testing;

namespace {

// The tile sets this CPU can run: AVX2 always, VNNI where it has AVX-512 VNNI.
std::vector<const cpu::wq::I8Tiles*> tile_sets() {
  std::vector<const cpu::wq::I8Tiles*> r = {&cpu::wq::i8_tiles_avx2()};
  if (cpu::wq::has_vnni(__builtin_cpu_supports("avx512f"))) r.push_back(&cpu::wq::i8_tiles_vnni());
  return r;
}

std::vector<CpuIsa> isas() {
  std::vector<CpuIsa> r = {CpuIsa::avx2};
  if (__builtin_cpu_supports("avx512f")) r.push_back(CpuIsa::native);
  return r;
}

// The same integer sums and the same f32 operations: only the reference's double epilogue
// (bias and residual added in double, rounded once) can differ, by an ulp of the output.
constexpr double kRtol = 1e-6, kAtol = 1e-5;

}  // namespace

TEST(QuantizeActRow, NotFiniteRowGetsNanScale) {
  const float inf = std::numeric_limits<float>::infinity();
  float good[3] = {1.27f, -0.5f, 0.0f}, bad[3] = {1.27f, inf, 0.0f};
  int8_t q[3];
  EXPECT_FLOAT_EQ(quantize_act_row_int8(good, 3, q), 0.01f);
  EXPECT_EQ(q[0], 127);
  EXPECT_EQ(q[1], -50);
  EXPECT_TRUE(std::isnan(quantize_act_row_int8(bad, 3, q)));
}

// Each instruction set's quantiser writes quantize_act_row_int8's q (plus its offset) and scale,
// ties included, and zero bytes up to padded_k.
TEST(LinearI8Tiles, QuantiserMatchesTheFormat) {
  for (const auto* t : tile_sets())
    for (int64_t K : {1, 7, 16, 37, 64, 130}) {
      SCOPED_TRACE(std::string(t->isa) + " K=" + std::to_string(K));
      Tensor x = random_tensor(DType::f32, {K}, 11);
      float* xp = x.ptr<float>();
      xp[0] = 2.54f;                   // scale 0.02
      if (K > 2) xp[1] = 0.03f;        // 1.5 -> 2 (ties to even)
      if (K > 3) xp[2] = -0.05f;       // -2.5 -> -2
      std::vector<int8_t> want(K);
      const float s = quantize_act_row_int8(xp, K, want.data());
      std::vector<uint8_t> got(cpu::wq::padded_k(K), 0xee);
      EXPECT_EQ(t->quantize(xp, K, cpu::wq::padded_k(K), got.data()), s);
      for (int64_t k = 0; k < K; ++k) EXPECT_EQ(static_cast<int>(got[k]), (want[k] + t->x_offset) & 0xff) << k;
      for (int64_t k = K; k < cpu::wq::padded_k(K); ++k) EXPECT_EQ(got[k], 0) << k;
    }
}

// Fast vs reference over row counts of x, odd shapes and N = 203 (enough rows per thread for the
// tiles' chunks, row_tiles.h, with rows left over), constant and input weights, 1 and 2 threads.
TEST(LinearWqQuantizeX, FastMatchesReference) {
  for (CpuIsa isa : isas())
    for (bool const_w : {true, false})
      for (int64_t M : {1, 2, 3, 4, 5, 32, 33})
        for (auto [N, K] : std::vector<std::pair<int64_t, int64_t>>{{19, 37}, {40, 300}, {17, 64}, {24, 130}, {203, 72}})
          for (int epi = 0; epi < 3; ++epi)
            for (int threads : {1, 2}) {
              SCOPED_TRACE(std::string(cpu_isa_name(isa)) + (const_w ? " const" : " input") + " w M=" + std::to_string(M) +
                           " N=" + std::to_string(N) + " K=" + std::to_string(K) + " epi=" + std::to_string(epi) +
                           " threads=" + std::to_string(threads));
              auto [q, s] = int8_weight(N, K, 2);
              std::vector<Arg> args = {input(random_tensor(DType::f32, {M, K}, 1)), const_w ? constant(q) : input(q),
                                       constant(s)};
              Attrs attrs = {{"has_weight_scale", Attr(true)}, {"quantize_x", Attr(true)}};
              add_linear_epilogue(args, attrs, epi, M, N);
              OneNode n("linear_wq", std::move(args), attrs);
              auto fast = make_kernel_for(n, Device::cpu, threads, isa_options(isa));
              auto ref = make_kernel_for(n, Device::ref);
              ASSERT_TRUE(fast && ref);
              EXPECT_NE(fast->name().find("i8i8"), std::string::npos) << fast->name();
              EXPECT_TRUE(all_close(run_kernel(*fast, n), run_kernel(*ref, n), kRtol, kAtol));
            }
}

// One kernel serves every M of a compile, its scratch asked per M.
TEST(LinearWqQuantizeX, OneKernelRunsEveryRowCount) {
  auto [q, s] = int8_weight(24, 96, 2);
  const Attrs attrs = {{"has_weight_scale", Attr(true)}, {"quantize_x", Attr(true)}};
  OneNode n("linear_wq", {input(random_tensor(DType::f32, {1, 96}, 1)), constant(q), constant(s)}, attrs);
  auto fast = make_kernel_for(n, Device::cpu);
  ASSERT_TRUE(fast);
  for (int64_t M : {3, 40}) {
    OneNode other("linear_wq", {input(random_tensor(DType::f32, {M, 96}, 5)), constant(q), constant(s)}, attrs);
    EXPECT_TRUE(fast->runs_shapes_of(other.context()));
    EXPECT_GE(fast->scratch_bytes_for(other.context()), static_cast<size_t>(M * 128));
    auto ref = make_kernel_for(other, Device::ref);
    EXPECT_TRUE(all_close(run_kernel(*fast, other), run_kernel(*ref, other), kRtol, kAtol)) << "M=" << M;
  }
}

// A row of x with an inf or NaN gives NaN outputs (eager's are not finite either); the other
// rows are unaffected.
TEST(LinearWqQuantizeX, NotFiniteRowGivesNan) {
  auto [q, s] = int8_weight(8, 64, 2);
  for (CpuIsa isa : isas()) {
    Tensor x = random_tensor(DType::f32, {3, 64}, 1);
    x.ptr<float>()[64 + 5] = std::numeric_limits<float>::infinity();
    OneNode n("linear_wq", {input(x), constant(q), constant(s)},
              {{"has_weight_scale", Attr(true)}, {"quantize_x", Attr(true)}});
    Tensor y = run_kernel(*make_kernel_for(n, Device::cpu, 0, isa_options(isa)), n);
    for (int64_t j = 0; j < 8; ++j) {
      EXPECT_TRUE(std::isfinite(y.ptr<float>()[j]));
      EXPECT_TRUE(std::isnan(y.ptr<float>()[8 + j]));
      EXPECT_TRUE(std::isfinite(y.ptr<float>()[16 + j]));
    }
  }
}

TEST(LinearWqQuantizeX, ShapeFunctionRefusesWhatItCannotRun) {
  auto fails = [](std::vector<TensorType> in, Attrs attrs) {
    return OpTable::get().check("linear_wq", in, attrs).has_value();
  };
  const TensorType x{DType::f32, {Dim(2), Dim(8)}}, wq{DType::i8, {Dim(4), Dim(8)}}, s{DType::f32, {Dim(4)}};
  const Attrs on = {{"has_weight_scale", Attr(true)}, {"quantize_x", Attr(true)}};
  EXPECT_FALSE(fails({x, wq, s}, on));
  EXPECT_TRUE(fails({x, {DType::bf16, {Dim(4), Dim(8)}}}, {{"quantize_x", Attr(true)}}));  // bf16 weight
  const int64_t big = kQuantizeXMaxK + 1;
  EXPECT_TRUE(fails({{DType::f32, {Dim(2), Dim(big)}}, {DType::i8, {Dim(4), Dim(big)}}, s}, on));  // int32 bound
}

// ---- the pass ------------------------------------------------------------------------------

namespace {

// After quantize_weights(int8): two i8 linear_wq (one with an epilogue), a small f32 linear and
// a matmul; and a bf16 linear_wq written by hand.
const char* kGraph = R"(graph(%x: f32[5, 256]) {
  %w = constant f32[300, 256] random(seed=1)
  %b = constant f32[300] random(seed=2)
  %small = constant f32[64, 256] random(seed=3)
  %h = constant f32[256, 256] random(seed=5)
  %hb = to_bf16(%h)
  %0 = linear(%x, %w, %b) {has_bias=true, activation="relu"}
  %1 = linear(%x, %w)
  %2 = linear(%x, %small)
  %3 = linear_wq(%x, %hb)
  return (%0, %1, %2, %3)
})";

bool int8_weights_and_activations(Graph& g) {
  quantize_weights(g, WeightDType::int8);
  return quantize_activations(g);
}

}  // namespace

TEST(PassQuantizeActivations, MarksTheInt8LinearsOnly) {
  // Error against the f32 graph: the weights' rounding (PassQuantizeWeights: 0.5 absolute on
  // outputs of ~20) plus x's, each |x| <= 1 moving by at most max|x| / 254 per element: about
  // as much again, so 1.0 absolute.
  auto g = check_pass(kGraph, int8_weights_and_activations, Changed::yes, {}, 0.05, 1.0);
  int marked = 0, i8 = 0;
  for (const Node* n : g->nodes()) {
    if (n->op_name() != "linear_wq") continue;
    const bool is_i8 = n->input(1)->type.dtype == DType::i8;
    i8 += is_i8;
    marked += n->attr("quantize_x").b();
    EXPECT_EQ(n->attr("quantize_x").b(), is_i8) << n->input(1)->type.str();
  }
  EXPECT_EQ(i8, 2);
  EXPECT_EQ(marked, 2);
  auto again = parse_graph(kGraph);
  EXPECT_FALSE(quantize_activations(*again));  // no i8 linear_wq yet: nothing to mark
}
