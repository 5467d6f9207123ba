// sdpa: the tiled AVX2 kernel against the reference: head shapes, causal with L != S,
// bool and additive masks with broadcasting, broadcast batch dims, strided q/k/v, an explicit
// scale, and one kernel from 4 threads.
#include <gtest/gtest.h>

#include "compute_test_helpers.h"
#include "core/error.h"

using namespace updraft;
using namespace updraft::testing;

namespace {

Tensor rnd(const std::vector<int64_t>& s, uint32_t seed) { return random_tensor(DType::f32, s, seed); }

// Dot products over E in f32 (reassociated into 16 lanes) and a polynomial exp with a few ulps
// of error; the softmax weights sum to 1, so errors stay relative to the values of v.
constexpr double kAttnTol = 1e-4;

}  // namespace

TEST(Attention, Shapes) {
  struct Case {
    std::vector<int64_t> q, k, v;
  };
  const std::vector<Case> cases = {
      {{1, 1, 1, 8}, {1, 1, 1, 8}, {1, 1, 1, 8}},       {{2, 3, 5, 16}, {2, 3, 7, 16}, {2, 3, 7, 16}},
      {{2, 4, 9, 64}, {2, 4, 9, 64}, {2, 4, 9, 64}},    {{3, 17, 5}, {3, 13, 5}, {3, 13, 3}},
      {{2, 3, 5, 16}, {1, 3, 7, 16}, {1, 3, 7, 16}},    {{6, 33}, {9, 33}, {9, 20}},
      {{2, 2, 40, 32}, {2, 2, 70, 32}, {2, 2, 70, 24}},
  };
  for (const Case& c : cases) {
    for (bool causal : {false, true}) {
      SCOPED_TRACE(shape_str(shape_from(c.q)) + " " + shape_str(shape_from(c.k)) + (causal ? " causal" : ""));
      std::string name = expect_matches_ref("sdpa", {input(rnd(c.q, 1)), input(rnd(c.k, 2)), input(rnd(c.v, 3))},
                                            {{"is_causal", causal}}, kAttnTol, kAttnTol);
      EXPECT_EQ(name, "cpu_f32_sdpa_tiled_avx2");
    }
  }
}

TEST(Attention, ExplicitScale) {
  expect_matches_ref("sdpa", {input(rnd({2, 5, 16}, 1)), input(rnd({2, 7, 16}, 2)), input(rnd({2, 7, 16}, 3))},
                     {{"scale", 0.7}}, kAttnTol, kAttnTol);
}

TEST(Attention, BoolMaskBroadcast) {
  // A padding-style mask [B, 1, 1, S] and a full [L, S] mask; every row keeps key 0 so no
  // row is fully masked.
  Tensor pad_mask = random_tensor(DType::boolean, {2, 1, 1, 7}, 5);
  for (int b = 0; b < 2; ++b) pad_mask.ptr<bool>()[b * 7] = true;
  expect_matches_ref("sdpa",
                     {input(rnd({2, 3, 5, 16}, 1)), input(rnd({2, 3, 7, 16}, 2)), input(rnd({2, 3, 7, 16}, 3)),
                      input(pad_mask)},
                     {{"has_mask", true}}, kAttnTol, kAttnTol);
  Tensor full = random_tensor(DType::boolean, {5, 7}, 6);
  for (int l = 0; l < 5; ++l) full.ptr<bool>()[l * 7] = true;
  expect_matches_ref("sdpa",
                     {input(rnd({2, 3, 5, 16}, 1)), input(rnd({2, 3, 7, 16}, 2)), input(rnd({2, 3, 7, 16}, 3)),
                      constant(full)},
                     {{"has_mask", true}}, kAttnTol, kAttnTol);
}

TEST(Attention, AdditiveMask) {
  expect_matches_ref("sdpa",
                     {input(rnd({2, 3, 5, 16}, 1)), input(rnd({2, 3, 7, 16}, 2)), input(rnd({2, 3, 7, 16}, 3)),
                      input(rnd({2, 1, 5, 7}, 4))},
                     {{"has_mask", true}}, kAttnTol, kAttnTol);
  // A strided (transposed-storage) additive mask is read through its strides.
  expect_matches_ref("sdpa",
                     {input(rnd({3, 5, 16}, 1)), input(rnd({3, 7, 16}, 2)), input(rnd({3, 7, 16}, 3)),
                      transposed_input(rnd({3, 5, 7}, 4))},
                     {{"has_mask", true}}, kAttnTol, kAttnTol);
}

TEST(Attention, StridedOperands) {
  // A transposed k has a non-unit inner stride (packed into scratch); q and v use strides.
  expect_matches_ref("sdpa",
                     {transposed_input(rnd({2, 9, 9}, 1)), transposed_input(rnd({2, 9, 9}, 2)),
                      transposed_input(rnd({2, 9, 9}, 3))},
                     {{"is_causal", true}}, kAttnTol, kAttnTol);
}

TEST(Attention, ShapeErrors) {
  Graph g;
  Value* q = g.add_input("q", {DType::f32, {2, 5, 16}});
  Value* k = g.add_input("k", {DType::f32, {2, 7, 16}});
  Value* v = g.add_input("v", {DType::f32, {2, 7, 8}});
  EXPECT_EQ(g.add_node("sdpa", {q, k, v})->output()->type.str(), "f32[2, 5, 8]");
  Value* bad_k = g.add_input("bk", {DType::f32, {2, 7, 15}});
  EXPECT_THROW(g.add_node("sdpa", {q, bad_k, v}), Error);
  Value* m = g.add_input("m", {DType::boolean, {5, 7}});
  EXPECT_THROW(g.add_node("sdpa", {q, k, v, m}), Error);  // has_mask not set
  EXPECT_THROW(g.add_node("sdpa", {q, k, v, m}, {{"has_mask", true}, {"is_causal", true}}), Error);
  Value* bad_m = g.add_input("bm", {DType::boolean, {5, 6}});
  EXPECT_THROW(g.add_node("sdpa", {q, k, v, bad_m}, {{"has_mask", true}}), Error);
}

TEST(Attention, OneKernelFromFourThreads) {
  auto b = build("sdpa", {input(rnd({2, 4, 33, 32}, 1)), input(rnd({2, 4, 45, 32}, 2)), input(rnd({2, 4, 45, 32}, 3))},
                 {{"is_causal", true}});
  expect_same_from_threads(*b, 10, kAttnTol, kAttnTol);
}
