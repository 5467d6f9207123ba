// sdpa: the tiled kernel (AVX-512 tiles where the CPU has them, and the AVX2 tiles forced with
// KernelOptions::cpu_isa = avx2) against the reference: head shapes, causal with L != S,
// bool and additive masks with broadcasting, broadcast batch dims, strided q/k/v, an explicit
// scale, keys past a multiple of 16 scored as dot products, the block softmax against the row
// one, and one kernel from 4 threads.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <vector>

#include "kernel_test_util.h"
#include "ir/ops/params.h"
#include "kernels/cpu/sdpa_tiles.h"
#include "core/error.h"

using namespace updraft;
using namespace updraft::testing;

namespace {

Tensor rnd(const std::vector<int64_t>& s, uint32_t seed) { return random_tensor(DType::f32, s, seed); }

// Dot products over E in f32 (reassociated into 16 lanes) and a polynomial exp with a few ulps
// of error; the softmax weights sum to 1, so errors stay relative to the values of v.
constexpr double kAttnTol = 1e-4;

// One row through Tiles::softmax_rows: its sum, with the shift in *shift.
float softmax_row(const cpu::sdpa::Tiles& t, float* sc, int64_t n, float* shift) {
  float sum = 0;
  t.softmax_rows(sc, 0, 1, &n, shift, &sum);
  return sum;
}

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
      // Ev = 64 + 16 + 3: the wide p v tile, a one-register tile and scalar columns; L = 8k + 5
      // rows: the 8-row and 1-row score tiles.
      {{1, 2, 21, 48}, {1, 2, 30, 48}, {1, 2, 30, 83}},
      // Ev = 32 + 16 + 3: the two-register p v tile (AVX-512); E = 20: k^T's 8 x 8 blocks with
      // 4 features and 6 keys (S = 30) element by element.
      {{1, 2, 21, 20}, {1, 2, 30, 20}, {1, 2, 30, 51}},
      // Keys past a multiple of 16 scored as dot products (Tiles::scores_dots): Swin's window,
      // S = 49 = 48 + 1; S = 36 = 32 + 4 with E = 20 (16 lanes, or two of 8, and 4 features
      // one by one) and causal rows shorter than the tiled keys; S = 17 with E = 5 (no lane).
      {{2, 3, 49, 32}, {2, 3, 49, 32}, {2, 3, 49, 32}},
      {{1, 2, 21, 20}, {1, 2, 36, 20}, {1, 2, 36, 24}},
      {{3, 17, 5}, {3, 17, 5}, {3, 17, 5}},
  };
  const bool avx512 = __builtin_cpu_supports("avx512f");
  for (bool capped : {false, true}) {
    KernelOptions options;
    if (capped) options.cpu_isa = CpuIsa::avx2;
    for (const Case& c : cases) {
      for (bool causal : {false, true}) {
        SCOPED_TRACE(shape_str(shape_from(c.q)) + " " + shape_str(shape_from(c.k)) + (causal ? " causal" : "") +
                     (capped ? " cpu_isa=avx2" : ""));
        std::string name = expect_matches_ref("sdpa", {input(rnd(c.q, 1)), input(rnd(c.k, 2)), input(rnd(c.v, 3))},
                                              {{"is_causal", causal}}, kAttnTol, kAttnTol, options);
        EXPECT_EQ(name, avx512 && !capped ? "cpu_f32_sdpa_tiled_avx512" : "cpu_f32_sdpa_tiled_avx2");
      }
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

// Left padding: the padded query rows mask every key. torch's CPU sdpa gives 0 for such a row
// (the tiles gave exp(-inf + inf) = NaN); bool and additive (-inf) masks, AVX-512 and AVX2
// tiles, L = 37 (a full 32-row block and a tail) and 49 (the 49th key a dot product). A NaN score under a masked bool position
// stays NaN (torch adds the mask), so the other rows are checked against the reference.
TEST(Attention, AllMaskedRowsGiveZero) {
  for (int64_t L : {37, 49}) {  // 49 = 48 + 1: the last key scored as a dot product
    SCOPED_TRACE("L = S = " + std::to_string(L));
    const int64_t pad = 3;
    Tensor bmask(DType::boolean, {2, 1, L, L});
    Tensor fmask(DType::f32, {2, 1, L, L});
    for (int64_t b = 0; b < 2; ++b)
      for (int64_t l = 0; l < L; ++l)
        for (int64_t s = 0; s < L; ++s) {
          const bool keep = s <= l && (b == 1 || s >= pad);  // sequence 0 is left-padded by 3
          bmask.ptr<bool>()[(b * L + l) * L + s] = keep;
          fmask.ptr<float>()[(b * L + l) * L + s] = keep ? 0.f : -INFINITY;
        }
    for (bool capped : {false, true}) {
      KernelOptions options;
      if (capped) options.cpu_isa = CpuIsa::avx2;
      for (const Tensor* m : {&bmask, &fmask}) {
        SCOPED_TRACE(std::string(m == &bmask ? "bool" : "float") + (capped ? " cpu_isa=avx2" : ""));
        auto b = build("sdpa", {input(rnd({2, 2, L, 16}, 1)), input(rnd({2, 2, L, 16}, 2)), input(rnd({2, 2, L, 16}, 3)),
                                input(*m)},
                       {{"has_mask", true}});
        auto fast = make_kernel_for(*b, Device::cpu, options);
        auto ref = make_kernel_for(*b, Device::ref);
        ASSERT_TRUE(fast && ref);
        Tensor got = run_kernel(*fast, *b), want = run_kernel(*ref, *b);
        EXPECT_TRUE(all_close(got, want, kAttnTol, kAttnTol)) << fast->name();
        for (int64_t h = 0; h < 2; ++h)
          for (int64_t l = 0; l < pad; ++l)
            for (int64_t e = 0; e < 16; ++e) {
              EXPECT_EQ(got.ptr<float>()[(h * L + l) * 16 + e], 0.f) << "head " << h << " row " << l;
              EXPECT_EQ(want.ptr<float>()[(h * L + l) * 16 + e], 0.f) << "ref, head " << h << " row " << l;
            }
      }
    }
  }
}

// with_lse (training graphs' forward): each row's log-sum-exp as a second output [.., L], against
// the reference over the tile edges (37 rows: a 32-row block and a tail; 8-row tiles and 1-row
// ones), causal with L != S, an additive mask, seq_first operands, and left-padded rows whose every
// key is masked: their log-sum-exp is 0, as torch's CPU flash kernel gives (its backward then
// weighs every key exp(-inf - 0) = 0).
TEST(Attention, LogSumExp) {
  for (bool capped : {false, true}) {
    KernelOptions options;
    if (capped) options.cpu_isa = CpuIsa::avx2;
    SCOPED_TRACE(capped ? "cpu_isa=avx2" : "native");
    for (bool causal : {false, true})
      expect_matches_ref("sdpa", {input(rnd({2, 3, 37, 16}, 1)), input(rnd({2, 3, 41, 16}, 2)), input(rnd({2, 3, 41, 24}, 3))},
                         {{"is_causal", causal}, {"with_lse", true}}, kAttnTol, kAttnTol, options);
    expect_matches_ref("sdpa",
                       {input(rnd({2, 3, 9, 16}, 1)), input(rnd({2, 3, 7, 16}, 2)), input(rnd({2, 3, 7, 16}, 3)),
                        input(rnd({2, 1, 9, 7}, 4))},
                       {{"has_mask", true}, {"with_lse", true}}, kAttnTol, kAttnTol, options);
    const std::vector<int64_t> all = {0, 1, 2, 3};
    expect_matches_ref("sdpa", {input(rnd({2, 37, 3, 32}, 1)), input(rnd({2, 41, 3, 32}, 2)), input(rnd({2, 41, 3, 32}, 3))},
                       {{"seq_first", Attr(all)}, {"with_lse", true}}, kAttnTol, kAttnTol, options);
    const int64_t L = 37, pad = 3;
    Tensor mask(DType::boolean, {2, 1, L, L});
    for (int64_t b = 0; b < 2; ++b)
      for (int64_t l = 0; l < L; ++l)
        for (int64_t j = 0; j < L; ++j) mask.ptr<bool>()[(b * L + l) * L + j] = j <= l && (b == 1 || j >= pad);
    auto b = build("sdpa", {input(rnd({2, 2, L, 16}, 1)), input(rnd({2, 2, L, 16}, 2)), input(rnd({2, 2, L, 16}, 3)),
                            input(mask)},
                   {{"has_mask", true}, {"with_lse", true}});
    EXPECT_EQ(b->node->outputs[1]->type.str(), "f32[2, 2, 37]");
    auto fast = make_kernel_for(*b, Device::cpu, options);
    auto ref = make_kernel_for(*b, Device::ref);
    ASSERT_TRUE(fast && ref);
    auto got = run_kernel_outputs(*fast, *b), want = run_kernel_outputs(*ref, *b);
    EXPECT_TRUE(all_close(got[1], want[1], kAttnTol, kAttnTol));
    for (int64_t h = 0; h < 2; ++h)
      for (int64_t l = 0; l < L; ++l) {
        const float x = got[1].ptr<float>()[h * L + l];
        if (l < pad) EXPECT_EQ(x, 0.f) << "head " << h << " row " << l;
        else EXPECT_TRUE(std::isfinite(x)) << "head " << h << " row " << l;
      }
  }
}

TEST(Attention, StridedOperands) {
  // A transposed k has a non-unit inner stride (packed into scratch); q and v use strides.
  expect_matches_ref("sdpa",
                     {transposed_input(rnd({2, 9, 9}, 1)), transposed_input(rnd({2, 9, 9}, 2)),
                      transposed_input(rnd({2, 9, 9}, 3))},
                     {{"is_causal", true}}, kAttnTol, kAttnTol);
}

// Swin's window attention: q, k and v are views into one qkv projection [windows, 49, 3, heads,
// 32] (rows 3 x heads x 32 floats apart), with an additive mask [windows, 1, 49, 49] read row by
// row: k^T packed in 8 x 8 blocks from strided rows, the mask's unit-stride rows added as
// vectors, and 32-column p v tiles.
TEST(Attention, WindowedFromOneProjection) {
  const int64_t W = 3, S = 49, H = 2, E = 32, row = 3 * H * E;
  Tensor qkv = rnd({W, S, 3, H, E}, 7);
  Tensor mask = rnd({W, 1, S, S}, 8);
  for (int64_t i = 0; i < mask.numel(); i += 7) mask.ptr<float>()[i] = -100.f;  // shifted windows mask with -100
  auto view = [&](int64_t which) {
    TensorView v = TensorView::contiguous(qkv.ptr<float>() + which * H * E, DType::f32, {W, H, S, E});
    v.strides[0] = S * row;
    v.strides[1] = E;
    v.strides[2] = row;
    return strided_input(v, qkv);
  };
  for (bool capped : {false, true}) {
    KernelOptions options;
    if (capped) options.cpu_isa = CpuIsa::avx2;
    SCOPED_TRACE(capped ? "cpu_isa=avx2" : "native");
    expect_matches_ref("sdpa", {view(0), view(1), view(2), input(mask)}, {{"has_mask", true}}, kAttnTol, kAttnTol,
                       options);
  }
}

// seq_first operands ([B, S, H, E], read and written as swapped views): every subset the pass
// can make, 37 query rows (a full 32-row block and a tail), causal and masked, both tile sets.
TEST(Attention, SeqFirstOperands) {
  const std::vector<std::vector<int64_t>> subsets = {{0, 1, 2, 3}, {0, 1, 2}, {3}, {1}};
  for (bool capped : {false, true}) {
    KernelOptions options;
    if (capped) options.cpu_isa = CpuIsa::avx2;
    for (const auto& sf : subsets) {
      const SdpaLayout lay = SdpaLayout::of(sf);
      auto shape = [&](int i, std::vector<int64_t> heads_first) {  // operand i's stored shape
        return lay.logical(i, std::move(heads_first));  // the swap is its own inverse
      };
      for (bool causal : {false, true}) {
        SCOPED_TRACE(std::to_string(sf.size()) + " seq_first operands" + (causal ? " causal" : "") +
                     (capped ? " cpu_isa=avx2" : ""));
        std::vector<Arg> args = {input(rnd(shape(0, {2, 3, 37, 32}), 1)), input(rnd(shape(1, {2, 3, 41, 32}), 2)),
                                 input(rnd(shape(2, {2, 3, 41, 24}), 3))};
        Attrs attrs = {{"seq_first", Attr(sf)}, {"is_causal", causal}};
        if (!causal) {
          args.push_back(input(rnd({2, 1, 37, 41}, 4)));
          attrs["has_mask"] = true;
        }
        expect_matches_ref("sdpa", args, attrs, kAttnTol, kAttnTol, options);
      }
    }
  }
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
  Node* with_lse = g.add_node("sdpa", {q, k, v}, {{"with_lse", true}});
  ASSERT_EQ(with_lse->outputs.size(), 2u);
  EXPECT_EQ(with_lse->output(1)->type.str(), "f32[2, 5]");
}

TEST(Attention, OneKernelFromFourThreads) {
  auto b = build("sdpa", {input(rnd({2, 4, 33, 32}, 1)), input(rnd({2, 4, 45, 32}, 2)), input(rnd({2, 4, 45, 32}, 3))},
                 {{"is_causal", true}});
  expect_same_from_threads(*b, 10, kAttnTol, kAttnTol);
}

// The AVX-512 softmax row (exp512) against the AVX2 one (exp256): the same exp bits for every
// element, tails (n not a multiple of 16) included; -inf scores give 0, a NaN makes the row NaN.
// On a CPU without AVX-512F the AVX-512 tiles must never be picked (calling them would fault):
// there the test checks that the kernel chose the AVX2 tiles instead.
TEST(Attention, Avx512SoftmaxRowMatchesAvx2) {
  if (!__builtin_cpu_supports("avx512f")) {
    EXPECT_EQ(expect_matches_ref("sdpa", {input(rnd({1, 9, 16}, 1)), input(rnd({1, 9, 16}, 2)), input(rnd({1, 9, 16}, 3))},
                                 {}, kAttnTol, kAttnTol),
              "cpu_f32_sdpa_tiled_avx2");
    return;
  }
  const auto& a2 = cpu::sdpa::tiles_avx2();
  const auto& a5 = cpu::sdpa::tiles_avx512();
  for (int64_t n : {1, 7, 16, 17, 33, 128, 197}) {
    Tensor t = random_tensor(DType::f32, {n}, static_cast<uint32_t>(n));
    const float* td = static_cast<const float*>(t.data());
    std::vector<float> x(td, td + n);
    for (int64_t j = 0; j < n; j += 5) x[j] *= 40.f;  // spread: exp underflows for some
    if (n > 3) x[2] = -INFINITY;
    std::vector<float> y2 = x, y5 = x;
    float m2 = 0, m5 = 0;
    const float s2 = softmax_row(a2, y2.data(), n, &m2), s5 = softmax_row(a5, y5.data(), n, &m5);
    for (int64_t j = 0; j < n; ++j) EXPECT_EQ(y2[j], y5[j]) << "n=" << n << " j=" << j;
    EXPECT_NEAR(s5, s2, 1e-6 * s2) << "n=" << n;
    EXPECT_EQ(m5, m2) << "n=" << n;
    EXPECT_EQ(m5, *std::max_element(x.begin(), x.end())) << "n=" << n;
  }
  // Near exp's underflow (results subnormal, then 0), where the two scale by 2^n differently.
  std::vector<float> low = {0.f, -80.f, -86.5f, -87.f, -87.2f, -87.3f, -87.33f, -87.336f, -87.34f, -88.f, -100.f,
                            -1e30f, -0.f, -103.9f, -87.0001f, -86.9999f, -50.f};
  std::vector<float> l2 = low, l5 = low;
  const int64_t nl = static_cast<int64_t>(low.size());
  float shift = 1;
  softmax_row(a2, l2.data(), nl, &shift);
  softmax_row(a5, l5.data(), nl, &shift);
  for (int64_t j = 0; j < nl; ++j) EXPECT_EQ(l2[j], l5[j]) << "x=" << low[j];
  std::vector<float> bad = {1.f, NAN, 2.f, 3.f, 4.f};
  EXPECT_TRUE(std::isnan(softmax_row(a5, bad.data(), 5, &shift)));
  EXPECT_TRUE(std::isnan(shift));
  // softmax_rows over a block: each row's bits, shift and sum as a one-row call gives them, rows of
  // several lengths (causal rows), a NaN row and a fully masked one among them.
  for (const auto* t : {&a2, &a5}) {
    const int64_t ps = 64, rows = 7;
    const int64_t n[rows] = {49, 1, 16, 33, 64, 17, 40};
    Tensor r = random_tensor(DType::f32, {rows, ps}, 11);
    std::vector<float> block(r.ptr<float>(), r.ptr<float>() + rows * ps);
    for (int64_t j = 0; j < ps; ++j) block[2 * ps + j] = -INFINITY;
    block[3 * ps + 20] = NAN;
    std::vector<float> one = block;
    float shifts[rows], sums[rows];
    t->softmax_rows(block.data(), ps, rows, n, shifts, sums);
    for (int64_t i = 0; i < rows; ++i) {
      float sh = 0;
      const float sum = softmax_row(*t, one.data() + i * ps, n[i], &sh);
      EXPECT_EQ(std::isnan(sum), std::isnan(sums[i])) << t->isa << " row " << i;
      if (!std::isnan(sum)) EXPECT_EQ(sums[i], sum) << t->isa << " row " << i;
      EXPECT_EQ(std::isnan(sh), std::isnan(shifts[i])) << t->isa << " row " << i;
      if (!std::isnan(sh)) EXPECT_EQ(shifts[i], sh) << t->isa << " row " << i;
      for (int64_t j = 0; j < ps; ++j) {
        const float a = block[i * ps + j], b = one[i * ps + j];
        if (!(std::isnan(a) && std::isnan(b))) EXPECT_EQ(a, b) << t->isa << " row " << i << " j " << j;
      }
    }
    EXPECT_EQ(shifts[2], 0.f);
    EXPECT_EQ(sums[2], 0.f);
    EXPECT_TRUE(std::isnan(sums[3]));
  }
  // Every key masked: weights 0, sum 0, shifted by 0 (not -inf).
  for (const auto* t : {&a2, &a5}) {
    std::vector<float> masked(19, -INFINITY);
    shift = 1;
    EXPECT_EQ(softmax_row(*t, masked.data(), 19, &shift), 0.f) << t->isa;
    EXPECT_EQ(shift, 0.f) << t->isa;
    for (float w : masked) EXPECT_EQ(w, 0.f) << t->isa;
  }
}
