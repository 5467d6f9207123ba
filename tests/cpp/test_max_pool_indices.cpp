// max_pool2d_indices / max_pool2d_backward: ATen's rules on hand-made planes (ties keep the
// first maximum, a NaN wins, padding is skipped, overlapping windows sum their gradients), and
// the CPU kernels (threads, strided inputs) against the reference.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "kernel_test_util.h"
#include "core/error.h"

using namespace updraft;
using namespace updraft::testing;

namespace {

Attrs window(int64_t k, int64_t s, int64_t p, int64_t d = 1, bool ceil = false) {
  return {{"kernel", std::vector<int64_t>{k, k}},
          {"stride", std::vector<int64_t>{s, s}},
          {"padding", std::vector<int64_t>{p, p}},
          {"dilation", std::vector<int64_t>{d, d}},
          {"ceil_mode", ceil}};
}

std::vector<Tensor> run_on(Device dev, const std::string& op, std::vector<Arg> args, Attrs attrs) {
  OneNode n(op, std::move(args), std::move(attrs));
  return run_kernel_outputs(*make_kernel_for(n, dev), n);
}

}  // namespace

TEST(MaxPoolIndices, TiesNaNAndPaddingFollowATen) {
  const double nan = std::nan("");
  // One 3x3 plane, 2x2 windows, stride 1: zeros tie (first wins), a NaN wins its windows.
  Tensor x = from_values(DType::f32, {1, 1, 3, 3}, {0, 0, 5, 0, 0, 5, nan, 1, 1});
  for (Device d : {Device::ref, Device::cpu}) {
    auto outs = run_on(d, "max_pool2d_indices", {input(x)}, window(2, 1, 0));
    std::vector<double> y = values_of(outs[0]), idx = values_of(outs[1]);
    EXPECT_EQ(idx, (std::vector<double>{0, 2, 6, 5})) << device_name(d);
    EXPECT_EQ(y[0], 0);
    EXPECT_EQ(y[1], 5);  // 5 at 2 first, the 5 at 5 is not larger
    EXPECT_TRUE(std::isnan(y[2]));
    EXPECT_EQ(y[3], 5);
  }
  // Padding 1, kernel 3, stride 2: the corner window's first in-image position is 0.
  Tensor neg = from_values(DType::f32, {1, 1, 2, 2}, {-4, -3, -2, -1});
  auto outs = run_on(Device::ref, "max_pool2d_indices", {input(neg)}, window(3, 2, 1));
  EXPECT_EQ(values_of(outs[1]), (std::vector<double>{3}));
  EXPECT_EQ(values_of(outs[0]), (std::vector<double>{-1}));
}

TEST(MaxPoolIndices, BackwardSumsOverlappingWindows) {
  // The 5 at position 2 is the maximum of two windows: it gets both gradients.
  Tensor dy = from_values(DType::f32, {1, 1, 2, 2}, {1, 10, 100, 1000});
  Tensor idx = from_values(DType::i64, {1, 1, 2, 2}, {0, 2, 2, 5});
  for (Device d : {Device::ref, Device::cpu}) {
    auto dx = run_on(d, "max_pool2d_backward", {input(dy), input(idx)}, {{"input_size", std::vector<int64_t>{3, 3}}});
    EXPECT_EQ(values_of(dx[0]), (std::vector<double>{1, 0, 110, 0, 0, 1000, 0, 0, 0})) << device_name(d);
  }
}

TEST(MaxPoolIndices, CpuMatchesReference) {
  struct Case {
    std::vector<int64_t> shape;
    Attrs attrs;
  };
  const std::vector<Case> cases = {{{2, 3, 9, 11}, window(3, 2, 1)},       {{3, 4, 8, 8}, window(2, 2, 0)},
                                   {{2, 5, 10, 7}, window(3, 2, 1, 2)},    {{2, 3, 9, 9}, window(2, 2, 0, 1, true)},
                                   {{8, 64, 56, 56}, window(3, 2, 1)}};
  for (DType dt : {DType::f32, DType::f64}) {
    for (const Case& c : cases) {
      SCOPED_TRACE(std::string(dtype_name(dt)) + " " + shape_str(shape_from(c.shape)));
      Tensor x = random_tensor(dt, c.shape, 3);
      OneNode fwd("max_pool2d_indices", {input(x)}, c.attrs);
      EXPECT_TRUE(cpu_matches_ref(fwd, 0, 0));
      auto outs = run_kernel_outputs(*make_kernel_for(fwd, Device::ref), fwd);
      Attrs back = {{"input_size", std::vector<int64_t>{c.shape[2], c.shape[3]}}};
      OneNode bwd("max_pool2d_backward", {input(random_tensor(dt, outs[0].shape(), 4)), input(outs[1])}, back);
      EXPECT_TRUE(cpu_matches_ref(bwd, 0, 0));
    }
  }
  // A strided (transposed-in-memory) input and several threads.
  OneNode strided("max_pool2d_indices", {transposed_input(random_tensor(DType::f32, {3, 4, 12, 12}, 5))},
                  window(3, 2, 1));
  EXPECT_TRUE(cpu_matches_ref(strided, 0, 0));
  expect_same_from_threads(strided, 3, 0, 0);
}

TEST(MaxPoolIndices, VectorColumnsKeepTheScalarRules) {
  // The CPU kernel's f32 planes take interior columns eight at a time: values on a coarse grid
  // (many ties), NaNs and -inf mixed in, over strides 1-3, dilation 2, padding and ceil mode,
  // with planes wide enough for several vectors and edge columns either side.
  const std::vector<Attrs> windows = {window(3, 2, 1), window(3, 1, 1), window(2, 2, 0), window(3, 3, 1),
                                      window(3, 2, 1, 2), window(3, 2, 0, 1, true), window(5, 1, 2)};
  for (const Attrs& w : windows) {
    Tensor x = random_tensor(DType::f32, {2, 3, 29, 61}, 7);
    float* v = x.ptr<float>();
    for (int64_t i = 0; i < x.numel(); ++i) {
      v[i] = std::round(v[i] * 2.0f) / 2.0f;
      if (i % 97 == 5) v[i] = std::nanf("");
      if (i % 89 == 3) v[i] = -std::numeric_limits<float>::infinity();
    }
    for (int64_t i = 0; i < 61; ++i) v[2 * 29 * 61 + i] = -std::numeric_limits<float>::infinity();  // a row of -inf
    OneNode fwd("max_pool2d_indices", {input(x)}, w);
    EXPECT_TRUE(cpu_matches_ref(fwd, 0, 0));
  }
}

TEST(MaxPoolIndices, ShapeErrors) {
  auto t = [](DType d, std::vector<int64_t> s) { return TensorType{d, shape_from(s)}; };
  EXPECT_THROW(infer("max_pool2d_indices", {t(DType::f32, {3, 8, 8})}, window(2, 2, 0)), Error);
  EXPECT_THROW(infer("max_pool2d_backward", {t(DType::f32, {1, 2, 4, 4}), t(DType::f32, {1, 2, 4, 4})},
                     {{"input_size", std::vector<int64_t>{8, 8}}}),
               Error);
  auto outs = infer("max_pool2d_indices", {t(DType::f32, {1, 2, 9, 9})}, window(3, 2, 1));
  ASSERT_EQ(outs.size(), 2u);
  EXPECT_EQ(outs[1].dtype, DType::i64);
  EXPECT_EQ(outs[1].shape, shape_from({1, 2, 5, 5}));
}
