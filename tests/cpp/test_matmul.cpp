// linear and matmul: the oneDNN kernels against the reference over odd shapes, 1-d operands,
// broadcast batch dims, transposed (non-contiguous) operands, constant (prepacked) and
// non-constant weights, and every epilogue; plus one kernel run from 4 threads at once.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "kernel_test_util.h"
#include "core/error.h"

using namespace updraft;
using namespace updraft::testing;

namespace {

Tensor rnd(const std::vector<int64_t>& s, uint32_t seed) { return random_tensor(DType::f32, s, seed); }

}  // namespace

TEST(Linear, ShapesWithConstantAndInputWeights) {
  const std::vector<std::vector<int64_t>> xs = {{5}, {1, 5}, {3, 5}, {2, 3, 5}, {2, 1, 4, 5}};
  for (const auto& x : xs) {
    for (int64_t N : {1, 7, 17}) {
      SCOPED_TRACE(shape_str(shape_from(x)) + " N=" + std::to_string(N));
      std::string name = expect_matches_ref("linear", {input(rnd(x, 1)), constant(rnd({N, 5}, 2))}, {});
      // N = 1: oneDNN's preferred layout for a [5, 1] weight is its own, read in place (a
      // "prepacked" copy would be the same bytes).
      EXPECT_TRUE(name.find("prepacked") != std::string::npos || (N == 1 && name.find("inplace_w") != std::string::npos))
          << name;
      expect_matches_ref("linear", {input(rnd(x, 3)), input(rnd({N, 5}, 4))}, {});
    }
  }
}

// A prepacked plain weight whose rows start a multiple of 1 KiB apart (N = 256 floats) is
// packed with each row padded by a cache line (matmul.cpp, unaliased_rows): results unchanged,
// the kernel says so; other widths keep the dense layout. Only oneDNN's gemm (AVX2) reads a
// plain layout; its brgemm (AVX-512) packs a blocked one, which is never padded. ctest runs
// this test a second time with ONEDNN_MAX_CPU_ISA=AVX2 (CMakeLists.txt), where the gemm must
// be what runs, so the padding is checked on every machine.
TEST(Linear, AliasedWeightRowsArePadded) {
  const char* isa = std::getenv("ONEDNN_MAX_CPU_ISA");
  const bool capped_avx2 = isa != nullptr && std::string(isa) == "AVX2";
  auto expect_padding = [&](const std::string& name, int64_t N) {
    const bool gemm = name.find(":gemm:") != std::string::npos;
    if (capped_avx2) EXPECT_TRUE(gemm) << name;
    EXPECT_EQ(name.find("padded_rows") != std::string::npos, gemm && N % 256 == 0) << name;
  };
  for (int64_t N : {256, 512, 250}) {
    SCOPED_TRACE("N=" + std::to_string(N));
    Attrs a = epilogue_attrs("gelu");
    a["has_bias"] = true;
    a["has_residual"] = true;
    std::string name = expect_matches_ref(
        "linear", {input(rnd({6, 40}, 1)), constant(rnd({N, 40}, 2)), constant(rnd({N}, 3)), input(rnd({6, N}, 4))},
        a);
    EXPECT_NE(name.find("prepacked"), std::string::npos) << name;
    expect_padding(name, N);
    // x @ W with a constant [K, N] W (GPT-2's Conv1D) packs the same way.
    name = expect_matches_ref("matmul", {input(rnd({2, 6, 40}, 5)), constant(rnd({40, N}, 6))}, {});
    expect_padding(name, N);
  }
}

TEST(Linear, LargerKAndBias) {
  expect_matches_ref("linear", {input(rnd({33, 257}, 1)), constant(rnd({65, 257}, 2)), constant(rnd({65}, 3))},
                     {{"has_bias", true}});
  expect_matches_ref("linear", {input(rnd({4, 3, 64}, 1)), input(rnd({10, 64}, 2)), input(rnd({10}, 3))},
                     {{"has_bias", true}});
}

TEST(Linear, EveryActivationWithBiasAndResidual) {
  for (const std::string& act : epilogue_activations()) {
    SCOPED_TRACE(act);
    Attrs a = epilogue_attrs(act);
    a["has_bias"] = true;
    a["has_residual"] = true;
    std::string name = expect_matches_ref("linear",
                                          {input(rnd({2, 3, 17}, 1)), constant(rnd({9, 17}, 2)),
                                           constant(rnd({9}, 3)), input(rnd({2, 3, 9}, 4))},
                                          a);
    EXPECT_EQ(name.find(":ref:"), std::string::npos) << name;
    Attrs r = epilogue_attrs(act);
    r["has_residual"] = true;
    expect_matches_ref("linear", {input(rnd({5, 17}, 5)), input(rnd({9, 17}, 6)), input(rnd({5, 9}, 7))}, r);
  }
}

// The activation loops above and in test_conv / test_f64_kernels ask the op table which names
// it accepts; if that probe stopped finding them, those tests would quietly run "none" alone.
TEST(Linear, EpilogueActivationsAreFoundInTheOpTable) {
  std::vector<std::string> acts = epilogue_activations();
  ASSERT_GE(acts.size(), 2u);
  EXPECT_EQ(acts[0], "none");
  std::string all;
  for (const std::string& act : acts) {
    EXPECT_NO_THROW(infer("linear", {{DType::f32, {2, 4}}, {DType::f32, {3, 4}}}, epilogue_attrs(act))) << act;
    all += (all.empty() ? "" : " ") + act;
  }
  RecordProperty("activations", all);
}

TEST(Linear, StridedOperands) {
  // A transposed weight view (a graph input) runs zero-copy on the swapped-strides variant;
  // a transposed x is packed into scratch.
  expect_matches_ref("linear", {input(rnd({6, 13}, 1)), transposed_input(rnd({7, 13}, 2))}, {});
  expect_matches_ref("linear", {transposed_input(rnd({2, 6, 13}, 3)), input(rnd({7, 13}, 4))}, {});
  expect_matches_ref("linear",
                     {transposed_input(rnd({6, 13}, 5)), transposed_input(rnd({7, 13}, 6)),
                      transposed_input(rnd({6, 7}, 7))},
                     {{"has_residual", true}, {"activation", "relu"}});
}

TEST(Linear, ArityMustMatchFlags) {
  Graph g;
  Value* x = g.add_input("x", {DType::f32, {3, 4}});
  Value* w = g.add_input("w", {DType::f32, {5, 4}});
  try {
    g.add_node("linear", {x, w}, {{"has_bias", true}});
    FAIL() << "expected an arity error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("has_bias=true"), std::string::npos) << e.what();
  }
  Value* b = g.add_input("b", {DType::f32, {4}});
  EXPECT_THROW(g.add_node("linear", {x, w, b}, {{"has_bias", true}}), Error);  // bias must be [N]
  EXPECT_THROW(g.add_node("linear", {x, w}, {{"activation", "swish"}}), Error);
  Value* y = g.add_node("linear", {x, w}, {{"activation", "gelu"}})->output();
  EXPECT_EQ(y->type.str(), "f32[3, 5]");
}

TEST(Linear, SymbolicShape) {
  Graph g;
  Value* x = g.add_input("x", {DType::f32, {Dim::sym("s0"), 3, 8}});
  Value* w = g.add_input("w", {DType::f32, {16, 8}});
  EXPECT_EQ(g.add_node("linear", {x, w})->output()->type.str(), "f32[s0, 3, 16]");
}

TEST(Matmul, OneDimensionalOperands) {
  expect_matches_ref("matmul", {input(rnd({7}, 1)), input(rnd({7}, 2))}, {});
  expect_matches_ref("matmul", {input(rnd({7}, 1)), input(rnd({7, 3}, 2))}, {});
  expect_matches_ref("matmul", {input(rnd({4, 7}, 1)), input(rnd({7}, 2))}, {});
  expect_matches_ref("matmul", {input(rnd({2, 3, 4, 7}, 1)), input(rnd({7}, 2))}, {});
  expect_matches_ref("matmul", {input(rnd({7}, 1)), input(rnd({3, 7, 5}, 2))}, {});
  Graph g;
  Value* a = g.add_input("a", {DType::f32, {7}});
  EXPECT_EQ(g.add_node("matmul", {a, a})->output()->type.str(), "f32[]");
}

TEST(Matmul, BroadcastBatchDims) {
  struct Case {
    std::vector<int64_t> a, b;
  };
  const std::vector<Case> cases = {
      {{3, 5, 6}, {3, 6, 4}},           {{3, 5, 6}, {6, 4}},          {{5, 6}, {3, 6, 4}},
      {{2, 3, 5, 6}, {6, 4}},           {{3, 1, 5, 6}, {1, 2, 6, 4}}, {{2, 1, 3, 4, 5}, {1, 4, 3, 5, 6}},
      {{1, 1, 5, 6}, {2, 3, 6, 4}},     {{4, 1, 6}, {4, 6, 1}},       {{2, 1, 1, 3, 5}, {2, 6, 1, 5, 2}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(shape_str(shape_from(c.a)) + " @ " + shape_str(shape_from(c.b)));
    expect_matches_ref("matmul", {input(rnd(c.a, 1)), input(rnd(c.b, 2))}, {});
    expect_matches_ref("matmul", {input(rnd(c.a, 3)), constant(rnd(c.b, 4))}, {});
  }
}

TEST(Matmul, TransposedOperands) {
  expect_matches_ref("matmul", {transposed_input(rnd({5, 6}, 1)), input(rnd({6, 4}, 2))}, {});
  expect_matches_ref("matmul", {input(rnd({5, 6}, 1)), transposed_input(rnd({6, 4}, 2))}, {});
  expect_matches_ref("matmul", {transposed_input(rnd({3, 5, 6}, 1)), transposed_input(rnd({3, 6, 4}, 2))}, {});
  expect_matches_ref("matmul", {transposed_input(rnd({2, 3, 5, 6}, 1)), transposed_input(rnd({1, 3, 6, 4}, 2))}, {});
}

TEST(Matmul, TransposedOperandsWithEpilogue) {
  expect_matches_ref("matmul",
                     {transposed_input(rnd({2, 3, 5, 6}, 1)), transposed_input(rnd({1, 3, 6, 4}, 2)),
                      input(rnd({4}, 3)), input(rnd({2, 3, 5, 4}, 4))},
                     {{"has_bias", true}, {"has_residual", true}, {"activation", "silu"}});
}

TEST(Matmul, EveryActivationWithBiasAndResidual) {
  for (const std::string& act : epilogue_activations()) {
    SCOPED_TRACE(act);
    Attrs a = epilogue_attrs(act);
    a["has_bias"] = true;
    a["has_residual"] = true;
    std::string name = expect_matches_ref("matmul",
                                          {input(rnd({3, 1, 5, 6}, 1)), constant(rnd({2, 6, 4}, 2)),
                                           constant(rnd({4}, 3)), input(rnd({3, 2, 5, 4}, 4))},
                                          a);
    // The fused epilogue must not push oneDNN onto its plain-loop reference implementation.
    EXPECT_EQ(name.find(":ref:"), std::string::npos) << name;
  }
}

TEST(Matmul, ShapeErrors) {
  Graph g;
  Value* a = g.add_input("a", {DType::f32, {3, 4, 5}});
  Value* b = g.add_input("b", {DType::f32, {2, 5, 6}});
  EXPECT_THROW(g.add_node("matmul", {a, b}), Error);  // batch 3 vs 2
  Value* c = g.add_input("c", {DType::f32, {6, 2}});
  EXPECT_THROW(g.add_node("matmul", {a, c}), Error);  // K 5 vs 6
}

// One kernel, four threads, each with its own scratch and output: the results must all equal
// the single-threaded reference (oneDNN primitives with a user scratchpad are reentrant).
TEST(Matmul, OneKernelFromFourThreads) {
  for (bool transposed : {false, true}) {
    std::vector<Arg> args;
    args.push_back(transposed ? transposed_input(rnd({4, 33, 40}, 1)) : input(rnd({4, 33, 40}, 1)));
    args.push_back(constant(rnd({24, 40}, 2)));
    args.push_back(constant(rnd({24}, 3)));
    args.push_back(input(rnd({4, 33, 24}, 4)));
    auto b = build("linear", std::move(args), {{"has_bias", true}, {"has_residual", true}, {"activation", "gelu"}});
    SCOPED_TRACE(transposed ? "transposed input" : "contiguous input");
    expect_same_from_threads(*b, 20, kGemmRtol, kGemmAtol);
  }
}
