// The f64 compute kernels (src/kernels/cpu/*_f64.cpp, the engine's own GEMM) against the
// reference kernels: linear and matmul (odd shapes, 1-d operands, broadcast batch dims,
// transposed operands, constant and non-constant weights, every epilogue), conv2d (groups,
// depthwise, stride, padding, padding_end, dilation, weight scale, epilogues, strided x),
// sdpa (masks, causal, all-masked rows, strided operands), each at 1 and 2 threads and on
// both micro-kernels (AVX-512 where the CPU has it, and AVX2 via KernelOptions::cpu_isa); plus the
// passes on f64 graphs (block_conv_layout leaves them plain).
//
// Tolerance: both sides accumulate in f64 and differ only in the order of the K-sum (blocks of
// kc, FMA); for inputs in [-2, 2] each product is at most 4, so the difference is bounded by
// about K * 4 * eps per K-term added; kTol(K) = 1e-14 * 4 * K (K = 257: 1e-11), used as both
// the absolute and the relative tolerance. f32 kernels need 1e-4 here.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>

#include "kernel_test_util.h"
#include "core/error.h"
#include "pass_test_util.h"
#include "passes/block_conv_layout.h"

using namespace updraft;
using namespace updraft::testing;

namespace {

double kTol(int64_t K) { return 1e-14 * 4 * static_cast<double>(std::max<int64_t>(K, 8)); }

Tensor rnd(const std::vector<int64_t>& s, uint32_t seed) { return random_tensor(DType::f64, s, seed); }

// Runs the node's CPU kernel (built for `threads` threads; 0: the runtime's default) against
// the reference on both micro-kernels; returns the name of the last CPU kernel (AVX2).
std::string check(const std::string& op, std::vector<Arg> args, Attrs attrs, double tol, int threads = 1) {
  auto b = build(op, std::move(args), std::move(attrs));
  auto ref = make_kernel_for(*b, Device::ref);
  if (!ref) return "";
  Tensor want = run_kernel(*ref, *b);
  std::string name;
  for (bool capped : {false, true}) {
    KernelContext ctx = b->context();
    ctx.num_threads = threads;
    if (capped) ctx.options.cpu_isa = CpuIsa::avx2;
    auto fast = (*KernelRegistry::get().find(op, Device::cpu))(ctx);
    EXPECT_NE(fast, nullptr) << "the cpu factory declined f64 " << op;
    if (!fast) return "";
    name = fast->name();
    EXPECT_NE(name.find("cpu_f64_"), std::string::npos) << name;
    const bool gemm_based = op != "layer_norm" && op != "rms_norm";
    if (gemm_based)
      EXPECT_NE(name.find(capped || !__builtin_cpu_supports("avx512f") ? ":avx2" : ":avx512"), std::string::npos)
          << name;
    Tensor got = run_kernel(*fast, *b);
    EXPECT_TRUE(all_close(got, want, tol, tol)) << op << " " << b->node->output()->type.str() << " via " << name;
  }
  return name;
}

}  // namespace

TEST(F64Linear, ShapesWithConstantAndInputWeights) {
  const std::vector<std::vector<int64_t>> xs = {{5}, {1, 5}, {3, 5}, {2, 3, 5}, {2, 1, 4, 5}, {13, 5}};
  for (const auto& x : xs)
    for (int64_t N : {1, 7, 17, 33}) {
      SCOPED_TRACE(shape_str(shape_from(x)) + " N=" + std::to_string(N));
      std::string name = check("linear", {input(rnd(x, 1)), constant(rnd({N, 5}, 2))}, {}, kTol(5));
      EXPECT_NE(name.find("prepacked"), std::string::npos) << name;
      check("linear", {input(rnd(x, 3)), input(rnd({N, 5}, 4))}, {}, kTol(5));
    }
}

// Larger than one K block (kc = 256) and one M block; 2 threads split the work.
TEST(F64Linear, BlocksAndThreads) {
  for (int threads : {1, 2}) {
    SCOPED_TRACE("threads " + std::to_string(threads));
    std::string name = check("linear",
                             {input(rnd({301, 517}, 1)), constant(rnd({203, 517}, 2)), constant(rnd({203}, 3)),
                              input(rnd({301, 203}, 4))},
                             {{"has_bias", true}, {"has_residual", true}, {"activation", "gelu"}}, kTol(517), threads);
    EXPECT_EQ(name.find(":1thread") == std::string::npos, threads == 2) << name;
    check("linear", {input(rnd({2, 70, 300}, 5)), input(rnd({150, 300}, 6))}, {}, kTol(300), threads);
  }
}

TEST(F64Linear, EveryActivationWithBiasAndResidual) {
  for (const std::string& act : epilogue_activations()) {
    SCOPED_TRACE(act);
    Attrs a = epilogue_attrs(act);
    a["has_bias"] = true;
    a["has_residual"] = true;
    check("linear",
          {input(rnd({2, 3, 17}, 1)), constant(rnd({9, 17}, 2)), constant(rnd({9}, 3)), input(rnd({2, 3, 9}, 4))}, a,
          kTol(17));
    Attrs r = epilogue_attrs(act);
    r["has_residual"] = true;
    check("linear", {input(rnd({5, 17}, 5)), input(rnd({9, 17}, 6)), input(rnd({5, 9}, 7))}, r, kTol(17));
  }
}

TEST(F64Linear, StridedOperands) {
  check("linear", {input(rnd({6, 13}, 1)), transposed_input(rnd({7, 13}, 2))}, {}, kTol(13));
  // A 3-d x with its last two dims swapped: its rows do not fold into one M (copied dense).
  check("linear", {transposed_input(rnd({2, 6, 13}, 3)), input(rnd({7, 13}, 4))}, {}, kTol(13));
  check("linear",
        {transposed_input(rnd({6, 13}, 5)), transposed_input(rnd({7, 13}, 6)), transposed_input(rnd({6, 7}, 7))},
        {{"has_residual", true}, {"activation", "relu"}}, kTol(13));
  check("linear", {transposed_input(rnd({6, 13}, 8)), constant(rnd({7, 13}, 9))}, {}, kTol(13));
}

TEST(F64Linear, EmptyKGivesTheEpilogueOfZero) {
  check("linear", {input(rnd({3, 0}, 1)), constant(rnd({4, 0}, 2)), constant(rnd({4}, 3))}, {{"has_bias", true}},
        kTol(1));
}

TEST(F64Matmul, OneDAndBroadcastBatches) {
  struct Case {
    std::vector<int64_t> a, b;
  };
  const std::vector<Case> cases = {
      {{7}, {7}},          {{7}, {7, 5}},          {{4, 7}, {7}},          {{3, 4, 7}, {7}},
      {{7}, {2, 7, 5}},    {{4, 7}, {7, 5}},       {{2, 1, 4, 7}, {3, 7, 5}}, {{5, 7}, {2, 3, 7, 4}},
      {{2, 3, 4, 7}, {7, 9}}, {{2, 3, 4, 7}, {1, 3, 7, 9}}, {{1, 1, 7}, {7, 1}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(shape_str(shape_from(c.a)) + " @ " + shape_str(shape_from(c.b)));
    check("matmul", {input(rnd(c.a, 1)), input(rnd(c.b, 2))}, {}, kTol(7));
    check("matmul", {input(rnd(c.a, 3)), constant(rnd(c.b, 4))}, {}, kTol(7));
  }
  // A 3-d a by a constant 2-d b folds into one GEMM and packs b once.
  std::string name = check("matmul", {input(rnd({2, 5, 7}, 5)), constant(rnd({7, 9}, 6))}, {}, kTol(7));
  EXPECT_NE(name.find("prepacked"), std::string::npos) << name;
}

TEST(F64Matmul, EpilogueStridesAndThreads) {
  for (const std::string& act : epilogue_activations()) {
    SCOPED_TRACE(act);
    Attrs a = epilogue_attrs(act);
    a["has_bias"] = true;
    a["has_residual"] = true;
    check("matmul",
          {input(rnd({2, 3, 5, 11}, 1)), input(rnd({3, 11, 6}, 2)), constant(rnd({6}, 3)), input(rnd({2, 3, 5, 6}, 4))},
          a, kTol(11));
  }
  check("matmul", {transposed_input(rnd({2, 9, 11}, 1)), transposed_input(rnd({2, 11, 6}, 2))}, {}, kTol(11));
  // transpose_a / transpose_b (an attention gradient's p^T dy and q k^T): batched, broadcast, a
  // constant 2-d b packed transposed, and a 2-d transposed b under a 3-d a folded into one GEMM.
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      SCOPED_TRACE(std::string(ta ? "ta " : "") + (tb ? "tb" : ""));
      Attrs t = {{"transpose_a", ta}, {"transpose_b", tb}};
      auto a_shape = [&](std::vector<int64_t> s) {
        if (ta) std::swap(s[s.size() - 1], s[s.size() - 2]);
        return s;
      };
      auto b_shape = [&](std::vector<int64_t> s) {
        if (tb) std::swap(s[s.size() - 1], s[s.size() - 2]);
        return s;
      };
      check("matmul", {input(rnd(a_shape({2, 3, 5, 11}), 1)), input(rnd(b_shape({2, 3, 11, 6}), 2))}, t, kTol(11));
      check("matmul", {input(rnd(a_shape({2, 3, 5, 11}), 1)), input(rnd(b_shape({3, 11, 6}), 2))}, t, kTol(11));
      check("matmul", {input(rnd(a_shape({2, 5, 11}), 1)), constant(rnd(b_shape({11, 6}), 2))}, t, kTol(11));
    }
  check("matmul",
        {input(rnd({3, 8, 11}, 1)), input(rnd({3, 11, 6}, 2)), transposed_input(rnd({3, 8, 6}, 3))},
        {{"has_residual", true}}, kTol(11));
  for (int threads : {1, 2}) {
    SCOPED_TRACE("threads " + std::to_string(threads));
    std::string name =
        check("matmul", {input(rnd({4, 90, 270}, 1)), input(rnd({4, 270, 130}, 2))}, {}, kTol(270), threads);
    EXPECT_EQ(name.find(":1thread") == std::string::npos, threads == 2) << name;
    check("matmul", {input(rnd({1, 300, 270}, 1)), transposed_input(rnd({270, 50}, 2))}, {}, kTol(270), threads);
  }
}

namespace {

struct ConvCase {
  int64_t N, C, H, W, O, k, stride, pad, dil, groups;
};

Attrs conv_attrs(const ConvCase& c) {
  return {{"stride", std::vector<int64_t>{c.stride, c.stride}},
          {"padding", std::vector<int64_t>{c.pad, c.pad}},
          {"dilation", std::vector<int64_t>{c.dil, c.dil}},
          {"groups", c.groups}};
}

const std::vector<ConvCase> kCases = {
    // N  C   H  W  O   k  s  p  d  g
    {1, 3, 7, 7, 5, 3, 1, 1, 1, 1},    {3, 3, 7, 7, 5, 3, 2, 1, 1, 1},   {1, 5, 7, 7, 17, 1, 1, 0, 1, 1},
    {3, 17, 7, 7, 5, 3, 2, 0, 1, 1},   {1, 5, 9, 7, 5, 3, 1, 2, 2, 1},   {3, 6, 7, 7, 9, 3, 1, 1, 1, 3},
    {1, 17, 7, 7, 17, 3, 1, 1, 1, 17},  // depthwise
    {3, 5, 7, 7, 10, 3, 2, 1, 1, 5},    // depthwise, multiplier 2
    {2, 8, 9, 9, 8, 7, 1, 3, 1, 8},     // depthwise 7x7 (ConvNeXt)
    {1, 3, 1, 1, 5, 1, 1, 0, 1, 1},     // 1x1 image
    {1, 3, 7, 7, 4, 7, 1, 0, 1, 1},     // kernel covers the image
    {2, 4, 6, 5, 6, 1, 2, 0, 1, 2},     // 1x1 stride 2, grouped
    {1, 1, 9, 8, 4, 3, 1, 1, 2, 1},     // one input channel (K = 9)
    {3, 16, 14, 14, 32, 3, 1, 1, 1, 1},
};

std::string label(const ConvCase& c) {
  return "N" + std::to_string(c.N) + " C" + std::to_string(c.C) + " " + std::to_string(c.H) + "x" +
         std::to_string(c.W) + " O" + std::to_string(c.O) + " k" + std::to_string(c.k) + " s" +
         std::to_string(c.stride) + " p" + std::to_string(c.pad) + " d" + std::to_string(c.dil) + " g" +
         std::to_string(c.groups);
}

int64_t conv_out(int64_t size, const ConvCase& c) { return (size + 2 * c.pad - c.dil * (c.k - 1) - 1) / c.stride + 1; }

}  // namespace

TEST(F64Conv, ShapesConstantAndInputWeights) {
  for (const ConvCase& c : kCases) {
    SCOPED_TRACE(label(c));
    const int64_t K = c.C / c.groups * c.k * c.k;
    std::string name = check("conv2d", {input(rnd({c.N, c.C, c.H, c.W}, 1)), constant(rnd({c.O, c.C / c.groups, c.k, c.k}, 2))},
                             conv_attrs(c), kTol(K));
    EXPECT_NE(name.find("prepacked"), std::string::npos) << name;
    check("conv2d", {input(rnd({c.N, c.C, c.H, c.W}, 3)), input(rnd({c.O, c.C / c.groups, c.k, c.k}, 4))},
          conv_attrs(c), kTol(K));
  }
}

TEST(F64Conv, EpiloguesAndWeightScale) {
  for (const std::string& act : epilogue_activations()) {
    SCOPED_TRACE(act);
    for (const ConvCase& c : {kCases[1], kCases[5], kCases[7], kCases[8], kCases[11]}) {
      SCOPED_TRACE(label(c));
      const int64_t K = c.C / c.groups * c.k * c.k;
      Attrs a = conv_attrs(c);
      for (auto& [k, v] : epilogue_attrs(act)) a[k] = v;
      a["has_bias"] = true;
      a["has_residual"] = true;
      a["has_weight_scale"] = true;
      const std::vector<int64_t> y = {c.N, c.O, conv_out(c.H, c), conv_out(c.W, c)};
      check("conv2d",
            {input(rnd({c.N, c.C, c.H, c.W}, 1)), constant(rnd({c.O, c.C / c.groups, c.k, c.k}, 2)),
             constant(rnd({c.O}, 3)), constant(rnd({c.O}, 4)), input(rnd(y, 5))},
            a, kTol(K));
      // Non-constant weight and scale: scaled as A is packed per call.
      check("conv2d",
            {input(rnd({c.N, c.C, c.H, c.W}, 6)), input(rnd({c.O, c.C / c.groups, c.k, c.k}, 7)),
             input(rnd({c.O}, 8)), input(rnd({c.O}, 9)), transposed_input(rnd(y, 10))},
            a, kTol(K));
    }
  }
}

TEST(F64Conv, PaddingEndStridedInputAndThreads) {
  // TF-style "same" padding folded in: 1 before, 2 after.
  check("conv2d", {input(rnd({2, 3, 8, 9}, 1)), constant(rnd({5, 3, 4, 4}, 2))},
        {{"padding", std::vector<int64_t>{1, 1}}, {"padding_end", std::vector<int64_t>{2, 2}}}, kTol(48));
  check("conv2d", {input(rnd({2, 4, 8, 9}, 1)), constant(rnd({4, 1, 3, 3}, 2))},
        {{"padding", std::vector<int64_t>{0, 1}}, {"padding_end", std::vector<int64_t>{1, 0}}, {"groups", 4}}, kTol(9));
  check("conv2d", {transposed_input(rnd({3, 5, 7, 9}, 1)), constant(rnd({4, 5, 3, 3}, 2))},
        {{"padding", std::vector<int64_t>{1, 1}}}, kTol(45));
  check("conv2d", {transposed_input(rnd({3, 5, 7, 9}, 1)), constant(rnd({4, 5, 1, 1}, 2))}, {}, kTol(5));
  check("conv2d", {transposed_input(rnd({2, 6, 7, 9}, 1)), constant(rnd({6, 1, 3, 3}, 2))},
        {{"groups", 6}, {"padding", std::vector<int64_t>{1, 1}}}, kTol(9));
  for (int threads : {1, 2}) {
    SCOPED_TRACE("threads " + std::to_string(threads));
    // Batch 1: one (image, group) item, the GEMM threaded; batch 3: items over the threads.
    for (int64_t n : {1, 3}) {
      std::string name = check("conv2d", {input(rnd({n, 32, 20, 20}, 1)), constant(rnd({48, 32, 3, 3}, 2))},
                               {{"padding", std::vector<int64_t>{1, 1}}}, kTol(288), threads);
      EXPECT_EQ(name.find(":1thread") == std::string::npos, threads == 2) << name;
    }
    check("conv2d", {input(rnd({1, 64, 30, 30}, 1)), constant(rnd({64, 1, 7, 7}, 2))},
          {{"padding", std::vector<int64_t>{3, 3}}, {"groups", 64}}, kTol(49), threads);
  }
}

TEST(F64Sdpa, MasksCausalScaleAndBroadcast) {
  const double tol = kTol(64);
  check("sdpa", {input(rnd({2, 3, 5, 16}, 1)), input(rnd({2, 3, 7, 16}, 2)), input(rnd({2, 3, 7, 12}, 3))}, {}, tol);
  check("sdpa", {input(rnd({2, 3, 9, 16}, 1)), input(rnd({2, 3, 7, 16}, 2)), input(rnd({2, 3, 7, 16}, 3))},
        {{"is_causal", true}}, tol);
  check("sdpa", {input(rnd({3, 5, 16}, 1)), input(rnd({1, 7, 16}, 2)), input(rnd({3, 7, 16}, 3))},
        {{"scale", 0.3}}, tol);
  check("sdpa",
        {input(rnd({2, 3, 5, 16}, 1)), input(rnd({2, 3, 7, 16}, 2)), input(rnd({2, 3, 7, 16}, 3)),
         input(rnd({2, 1, 5, 7}, 4))},
        {{"has_mask", true}}, tol);
  check("sdpa",
        {input(rnd({3, 5, 16}, 1)), input(rnd({3, 7, 16}, 2)), input(rnd({3, 7, 16}, 3)),
         transposed_input(rnd({3, 5, 7}, 4))},
        {{"has_mask", true}}, tol);
  check("sdpa",
        {transposed_input(rnd({2, 9, 9}, 1)), transposed_input(rnd({2, 9, 9}, 2)), transposed_input(rnd({2, 9, 9}, 3))},
        {{"is_causal", true}}, tol);
  // with_lse: each row's log-sum-exp as a second output, causal and masked.
  check("sdpa", {input(rnd({2, 3, 9, 16}, 1)), input(rnd({2, 3, 7, 16}, 2)), input(rnd({2, 3, 7, 16}, 3))},
        {{"is_causal", true}, {"with_lse", true}}, tol);
  check("sdpa",
        {input(rnd({2, 3, 5, 16}, 1)), input(rnd({2, 3, 7, 16}, 2)), input(rnd({2, 3, 7, 16}, 3)),
         input(rnd({2, 1, 5, 7}, 4))},
        {{"has_mask", true}, {"with_lse", true}}, tol);
  for (int threads : {1, 2}) {
    // 12 heads over the threads; one head with the GEMMs threaded.
    check("sdpa", {input(rnd({1, 12, 64, 64}, 1)), input(rnd({1, 12, 64, 64}, 2)), input(rnd({1, 12, 64, 64}, 3))},
          {}, tol, threads);
    check("sdpa", {input(rnd({1, 200, 64}, 1)), input(rnd({1, 200, 64}, 2)), input(rnd({1, 200, 64}, 3))}, {}, tol,
          threads);
  }
}

// Left padding: rows whose every key is masked give 0 (PyTorch's CPU sdpa), bool and additive.
TEST(F64Sdpa, AllMaskedRowsGiveZero) {
  const int64_t L = 37, pad = 3;
  Tensor bmask(DType::boolean, {2, 1, L, L});
  Tensor fmask(DType::f64, {2, 1, L, L});
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t l = 0; l < L; ++l)
      for (int64_t s = 0; s < L; ++s) {
        const bool keep = s <= l && (b == 1 || s >= pad);
        bmask.ptr<bool>()[(b * L + l) * L + s] = keep;
        fmask.ptr<double>()[(b * L + l) * L + s] = keep ? 0.0 : -INFINITY;
      }
  for (const Tensor* m : {&bmask, &fmask}) {
    SCOPED_TRACE(m == &bmask ? "bool" : "float");
    auto b = build("sdpa", {input(rnd({2, 2, L, 16}, 1)), input(rnd({2, 2, L, 16}, 2)), input(rnd({2, 2, L, 16}, 3)),
                            input(*m)},
                   {{"has_mask", true}});
    auto fast = make_kernel_for(*b, Device::cpu);
    auto ref = make_kernel_for(*b, Device::ref);
    ASSERT_TRUE(fast && ref);
    Tensor got = run_kernel(*fast, *b), want = run_kernel(*ref, *b);
    EXPECT_TRUE(all_close(got, want, kTol(37), kTol(37))) << fast->name();
    for (int64_t h = 0; h < 2; ++h)
      for (int64_t l = 0; l < pad; ++l)
        for (int64_t e = 0; e < 16; ++e) EXPECT_EQ(got.ptr<double>()[(h * L + l) * 16 + e], 0.0) << "row " << l;
  }
}

TEST(F64Kernels, OneKernelFromFourThreads) {
  auto b = build("linear", {input(rnd({40, 70}, 1)), constant(rnd({30, 70}, 2)), constant(rnd({30}, 3))},
                 {{"has_bias", true}, {"activation", "silu"}});
  expect_same_from_threads(*b, 20, kTol(70), kTol(70));
  auto c = build("conv2d", {input(rnd({2, 8, 9, 9}, 1)), constant(rnd({12, 8, 3, 3}, 2))},
                 {{"padding", std::vector<int64_t>{1, 1}}});
  expect_same_from_threads(*c, 10, kTol(72), kTol(72));
}

// block_conv_layout blocks f32 convs only: an f64 graph keeps plain NCHW (the f64 kernels read
// plain layouts only), and runs on the f64 kernels as it did.
TEST(F64Passes, BlockConvLayoutLeavesF64Plain) {
  const char* text = R"(graph(%x: f64[2, 16, 12, 12]) {
  %w0 = constant f64[32, 16, 3, 3] random(seed=1)
  %w1 = constant f64[32, 32, 1, 1] random(seed=2)
  %0 = conv2d(%x, %w0) {padding=[1, 1], activation="relu"}
  %1 = conv2d(%0, %w1) {activation="relu"}
  return (%1)
})";
  auto g = check_pass(text, [](Graph& gr) { return block_conv_layout(gr, 16); }, Changed::no, {}, 1e-12, 1e-12);
  for (const Node* n : g->nodes())
    if (n->op_name() == "conv2d") EXPECT_EQ(n->attr("dst_block").i(), 0);
  auto plain = parse_graph(text);
  auto inputs = random_inputs(*plain);
  expect_same_outputs(interpret(*plain, inputs, Device::ref), interpret(*g, inputs, Device::cpu), kTol(144), kTol(144));
}

// f64 layer_norm / rms_norm read dense rows in place (norm_f64.cpp); a strided x is copied.
TEST(F64Norm, LayerAndRmsNormMatchTheReference) {
  for (int threads : {1, 2}) {
    for (bool strided : {false, true}) {
      SCOPED_TRACE("threads " + std::to_string(threads) + (strided ? " strided" : ""));
      auto x = [&](uint32_t seed) { return strided ? transposed_input(rnd({300, 40}, seed)) : input(rnd({3, 100, 40}, seed)); };
      const int64_t cols = 40;
      check("layer_norm", {x(1), constant(rnd({cols}, 2)), constant(rnd({cols}, 3))},
            {{"normalized_ndim", int64_t{1}}, {"eps", 1e-5}}, 1e-13, threads);
      check("layer_norm", {x(4)}, {{"normalized_ndim", int64_t{1}}, {"has_weight", false}, {"has_bias", false}}, 1e-13,
            threads);
      check("rms_norm", {x(5), input(rnd({cols}, 6))}, {{"normalized_ndim", int64_t{1}}, {"eps", 1e-6}}, 1e-13, threads);
    }
  }
  check("layer_norm", {input(rnd({2, 3, 4, 5}, 1)), constant(rnd({4, 5}, 2)), constant(rnd({4, 5}, 3))},
        {{"normalized_ndim", int64_t{2}}}, 1e-13);
}
