// Pooling: max_pool2d, avg_pool2d (include/exclude padding, ceil_mode) and
// adaptive_avg_pool2d (uniform windows via oneDNN, others via the plain kernel) against the
// reference, over odd images and unbatched inputs.
#include <gtest/gtest.h>

#include <cmath>

#include "kernel_test_util.h"
#include "core/error.h"

using namespace updraft;
using namespace updraft::testing;

namespace {

Tensor rnd(const std::vector<int64_t>& s, uint32_t seed) { return random_tensor(DType::f32, s, seed); }

// Pooling sums at most a few dozen values (or picks one): f32 rounding only.
constexpr double kPoolTol = 1e-5;

std::vector<int64_t> v2(int64_t a, int64_t b) { return {a, b}; }

}  // namespace

TEST(Pool, MaxPool) {
  struct Case {
    std::vector<int64_t> x;
    int64_t k, s, p, d;
    bool ceil;
  };
  const std::vector<Case> cases = {
      {{1, 3, 7, 7}, 2, 2, 0, 1, false}, {{1, 3, 7, 7}, 2, 2, 0, 1, true},  {{3, 5, 7, 7}, 3, 2, 1, 1, false},
      {{3, 5, 7, 7}, 3, 2, 1, 1, true},  {{1, 17, 9, 7}, 3, 1, 1, 2, false}, {{2, 3, 8, 8}, 3, 3, 1, 1, true},
      {{5, 7, 7}, 3, 2, 1, 1, false},    {{1, 1, 1, 1}, 1, 1, 0, 1, false},  {{2, 4, 10, 10}, 2, 3, 1, 2, true},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(shape_str(shape_from(c.x)) + " k" + std::to_string(c.k) + " s" + std::to_string(c.s) + " p" +
                 std::to_string(c.p) + " d" + std::to_string(c.d) + (c.ceil ? " ceil" : ""));
    std::string name = expect_matches_ref("max_pool2d", {input(rnd(c.x, 1))},
                                          {{"kernel", v2(c.k, c.k)},
                                           {"stride", v2(c.s, c.s)},
                                           {"padding", v2(c.p, c.p)},
                                           {"dilation", v2(c.d, c.d)},
                                           {"ceil_mode", c.ceil}},
                                          kPoolTol, kPoolTol);
    EXPECT_EQ(name.rfind("onednn_f32_max_pool2d", 0), 0u) << name;
  }
}

// oneDNN 3.2 has no jit pooling for plain NCHW on AVX2; the kernel then pools in the blocked
// layout between two reorders (pool.cpp) rather than take the scalar `simple_nchw` loop.
TEST(Pool, PlainInputsStillGetAJitPool) {
  // AVX2 is the engine's baseline, and every AVX2 CPU has a layout of its own (nChw8c, or NHWC
  // with AVX-512).
  ASSERT_NE(preferred_channel_block(), 0);
  for (const char* op : {"max_pool2d", "avg_pool2d"}) {
    SCOPED_TRACE(op);
    std::string name = expect_matches_ref(op, {input(rnd({1, 20, 28, 28}, 1))},
                                          {{"kernel", v2(3, 3)}, {"stride", v2(2, 2)}, {"padding", v2(1, 1)}},
                                          kPoolTol, kPoolTol);
    EXPECT_NE(name.find(":jit"), std::string::npos) << name;
  }
}

TEST(Pool, MaxPoolStridedInputAndDefaultStride) {
  expect_matches_ref("max_pool2d", {transposed_input(rnd({2, 3, 7, 9}, 1))},
                     {{"kernel", v2(3, 3)}, {"stride", std::vector<int64_t>{}}}, kPoolTol, kPoolTol);
}

TEST(Pool, CeilModeShapes) {
  Graph g;
  Value* x = g.add_input("x", {DType::f32, {1, 3, 7, 7}});
  auto out = [&](int64_t k, int64_t s, int64_t p, bool ceil) {
    return g.add_node("max_pool2d", {x}, {{"kernel", v2(k, k)}, {"stride", v2(s, s)}, {"padding", v2(p, p)},
                                           {"ceil_mode", ceil}})
        ->output()
        ->type.shape[2]
        .value();
  };
  EXPECT_EQ(out(2, 2, 0, false), 3);
  EXPECT_EQ(out(2, 2, 0, true), 4);
  EXPECT_EQ(out(3, 2, 1, true), 4);  // PyTorch: the last window must start inside the input
  EXPECT_EQ(out(2, 3, 1, true), 3);
  EXPECT_THROW(out(2, 2, 2, false), Error);  // padding more than half the kernel
  // Symbolic: the ceil-mode rule still evaluates like PyTorch.
  Value* xs = g.add_input("xs", {DType::f32, {1, 3, Dim::sym("h"), 7}});
  Dim h = g.add_node("max_pool2d", {xs}, {{"kernel", v2(3, 3)}, {"stride", v2(2, 2)}, {"padding", v2(1, 1)},
                                            {"ceil_mode", true}})
              ->output()
              ->type.shape[2];
  EXPECT_EQ(h.eval({{"h", 7}}), 4);
  EXPECT_EQ(h.eval({{"h", 8}}), 5);
  EXPECT_EQ(h.eval({{"h", 9}}), 5);
}

TEST(Pool, AvgPool) {
  struct Case {
    std::vector<int64_t> x;
    int64_t k, s, p;
    bool ceil, include;
  };
  const std::vector<Case> cases = {
      {{1, 3, 7, 7}, 2, 2, 0, false, true}, {{3, 5, 7, 7}, 3, 2, 1, false, true}, {{3, 5, 7, 7}, 3, 2, 1, false, false},
      {{1, 3, 7, 7}, 2, 2, 0, true, false}, {{3, 5, 7, 7}, 3, 2, 1, true, false},  {{1, 17, 9, 7}, 3, 1, 1, false, false},
      {{5, 7, 7}, 3, 2, 1, false, true},    {{2, 3, 8, 8}, 3, 3, 1, true, false},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(shape_str(shape_from(c.x)) + " k" + std::to_string(c.k) + " s" + std::to_string(c.s) + " p" +
                 std::to_string(c.p) + (c.ceil ? " ceil" : "") + (c.include ? " include_pad" : ""));
    std::string name = expect_matches_ref(
        "avg_pool2d", {input(rnd(c.x, 2))},
        {{"kernel", v2(c.k, c.k)}, {"stride", v2(c.s, c.s)}, {"padding", v2(c.p, c.p)}, {"ceil_mode", c.ceil},
         {"count_include_pad", c.include}},
        kPoolTol, kPoolTol);
    EXPECT_EQ(name.rfind("onednn_f32_avg_pool2d", 0), 0u) << name;
  }
}

TEST(Pool, PoolsInChannelLayouts) {
  // x and y in nChw8c, nChw16c and channels-last (block = the channel count), as
  // block_conv_layout leaves a pool between convs; the max pool's NaN and -inf (a strided plane
  // in these layouts) as PyTorch has them. Always a jit pool: on an AVX2 CPU (ctest's .avx2
  // run) nChw16c has none, and the kernel pools in nChw8c between two reorders.
  for (int64_t block : {8, 16, 24}) {
    SCOPED_TRACE("block " + std::to_string(block));
    const int64_t C = block == 16 ? 32 : 24;
    Tensor x = rnd({2, C, 9, 9}, 3);
    float* p = x.ptr<float>();
    p[5] = NAN;
    p[700] = -INFINITY;
    for (int64_t i = 0; i < 81; ++i) p[2 * C * 81 - 1 - i * C] = -INFINITY;  // one of the last pixels' channels
    for (bool ceil : {false, true}) {
      const Attrs win = {{"kernel", v2(3, 3)}, {"stride", v2(2, 2)}, {"padding", v2(1, 1)}, {"ceil_mode", ceil},
                         {"block", block}};
      std::string name = expect_matches_ref("max_pool2d", {input(x)}, win, kPoolTol, kPoolTol);
      EXPECT_EQ(name.rfind("onednn_f32_max_pool2d:jit", 0), 0u) << name;
      EXPECT_NE(name.find(":block" + std::to_string(block)), std::string::npos) << name;
      Attrs avg = win;
      avg["count_include_pad"] = false;
      name = expect_matches_ref("avg_pool2d", {input(rnd({2, C, 9, 9}, 4))}, avg, kPoolTol, kPoolTol);
      EXPECT_EQ(name.rfind("onednn_f32_avg_pool2d:jit", 0), 0u) << name;
    }
  }
}

TEST(Pool, AvgPoolCeilIncludePadFallsBackToReference) {
  // ceil_mode windows that overhang the padded input: PyTorch's divisor excludes the overhang,
  // oneDNN's include-padding average does not, so the oneDNN factory declines.
  auto b = build("avg_pool2d", {input(rnd({1, 3, 7, 7}, 1))},
                 {{"kernel", v2(2, 2)}, {"stride", v2(2, 2)}, {"ceil_mode", true}, {"count_include_pad", true}});
  EXPECT_EQ((*KernelRegistry::get().find("avg_pool2d", Device::cpu))(b->context()), nullptr);
  auto k = KernelRegistry::get().create(b->context(), Device::cpu);
  EXPECT_EQ(k->name(), "ref_avg_pool2d");
  // The reference itself: the corner window covers one real element and no padding.
  Tensor out = run_kernel(*k, *b);
  EXPECT_FLOAT_EQ(out.ptr<float>()[15], b->args[0].owned.ptr<float>()[48]);
}

TEST(Pool, AdaptiveAvgPool) {
  struct Case {
    std::vector<int64_t> x, out;
    const char* impl;
  };
  const std::vector<Case> cases = {
      {{2, 3, 7, 7}, {1, 1}, "onednn"},  {{2, 3, 8, 6}, {4, 3}, "onednn"}, {{2, 3, 7, 7}, {3, 3}, "cpu_f32"},
      {{1, 5, 9, 7}, {4, 5}, "cpu_f32"}, {{5, 7, 7}, {2, 3}, "cpu_f32"},    {{1, 2, 3, 3}, {5, 5}, "cpu_f32"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(shape_str(shape_from(c.x)) + " -> " + shape_str(shape_from(c.out)));
    std::string name = expect_matches_ref("adaptive_avg_pool2d", {input(rnd(c.x, 3))}, {{"output_size", c.out}},
                                          kPoolTol, kPoolTol);
    EXPECT_EQ(name.rfind(c.impl, 0), 0u) << name;
  }
  expect_matches_ref("adaptive_avg_pool2d", {transposed_input(rnd({2, 3, 7, 9}, 4))},
                     {{"output_size", v2(3, 4)}}, kPoolTol, kPoolTol);
}
