// conv2d_backward_data / conv2d_backward_weight: the reference kernels against the adjoint
// identity of the forward reference conv (<conv(x, w), dy> = <x, dx> = <w, dw>, which holds for
// any dy), and the oneDNN kernels against the reference over strides, padding, dilation, groups
// (depthwise too), odd images, batch 1 and 3, strided graph inputs and threads; shape errors.
#include <gtest/gtest.h>

#include "kernel_test_util.h"
#include "core/error.h"

using namespace updraft;
using namespace updraft::testing;

namespace {

Tensor rnd(const std::vector<int64_t>& s, uint32_t seed) { return random_tensor(DType::f32, s, seed); }

struct GradCase {
  int64_t N, C, H, W, O, k, stride, pad, dil, groups;
  int64_t OH() const { return (H + 2 * pad - dil * (k - 1) - 1) / stride + 1; }
  int64_t OW() const { return (W + 2 * pad - dil * (k - 1) - 1) / stride + 1; }
  std::vector<int64_t> x() const { return {N, C, H, W}; }
  std::vector<int64_t> w() const { return {O, C / groups, k, k}; }
  std::vector<int64_t> y() const { return {N, O, OH(), OW()}; }
};

const std::vector<GradCase> kCases = {
    // N  C   H  W   O  k  s  p  d  g
    {1, 3, 7, 7, 5, 3, 1, 1, 1, 1},     {3, 3, 8, 7, 5, 3, 2, 1, 1, 1},   {1, 5, 7, 7, 17, 1, 1, 0, 1, 1},
    {3, 17, 7, 7, 5, 3, 2, 0, 1, 1},    {1, 5, 9, 7, 5, 3, 1, 2, 2, 1},   {3, 6, 7, 7, 9, 3, 1, 1, 1, 3},
    {2, 16, 7, 7, 16, 3, 1, 1, 1, 16},  // depthwise
    {1, 3, 16, 16, 8, 7, 2, 3, 1, 1},   // a stem: 7x7 stride 2 over 3 channels
    {2, 32, 14, 14, 64, 1, 2, 0, 1, 1},  // a strided 1x1 projection (the input size is not
                                         // implied by dy: 14 and 13 both map to 7)
    {3, 16, 14, 14, 32, 3, 1, 1, 1, 1},  // blocked layouts
};

std::string label(const GradCase& c) {
  return "N" + std::to_string(c.N) + " C" + std::to_string(c.C) + " " + std::to_string(c.H) + "x" +
         std::to_string(c.W) + " O" + std::to_string(c.O) + " k" + std::to_string(c.k) + " s" +
         std::to_string(c.stride) + " p" + std::to_string(c.pad) + " d" + std::to_string(c.dil) + " g" +
         std::to_string(c.groups);
}

Attrs geometry(const GradCase& c) {
  return {{"stride", std::vector<int64_t>{c.stride, c.stride}},
          {"padding", std::vector<int64_t>{c.pad, c.pad}},
          {"dilation", std::vector<int64_t>{c.dil, c.dil}},
          {"groups", c.groups}};
}
Attrs data_attrs(const GradCase& c) {
  Attrs a = geometry(c);
  a["input_size"] = std::vector<int64_t>{c.H, c.W};
  return a;
}
Attrs weight_attrs(const GradCase& c) {
  Attrs a = geometry(c);
  a["kernel"] = std::vector<int64_t>{c.k, c.k};
  return a;
}

double dot(const Tensor& a, const Tensor& b) {
  std::vector<double> va = values_of(a), vb = values_of(b);
  double s = 0;
  for (size_t i = 0; i < va.size(); ++i) s += va[i] * vb[i];
  return s;
}

Tensor run_ref(const std::string& op, std::vector<Arg> args, Attrs attrs) {
  OneNode n(op, std::move(args), std::move(attrs));
  auto k = make_kernel_for(n, Device::ref);
  return run_kernel(*k, n);
}

}  // namespace

// Both gradients are adjoints of the forward conv: <conv(x, w), dy> = <x, dx(dy, w)> =
// <w, dw(dy, x)>. The forward reference conv is tested against PyTorch's definition
// (test_conv.cpp), so this ties the gradient references to it without a second oracle.
TEST(ConvBackward, ReferenceKernelsAreTheForwardsAdjoints) {
  for (const GradCase& c : kCases) {
    SCOPED_TRACE(label(c));
    Tensor x = rnd(c.x(), 1), w = rnd(c.w(), 2), dy = rnd(c.y(), 3);
    Attrs fwd = geometry(c);
    Tensor y = run_ref("conv2d", {input(x), input(w)}, fwd);
    Tensor dx = run_ref("conv2d_backward_data", {input(dy), input(w)}, data_attrs(c));
    Tensor dw = run_ref("conv2d_backward_weight", {input(dy), input(x)}, weight_attrs(c));
    ASSERT_EQ(dx.shape(), c.x());
    ASSERT_EQ(dw.shape(), c.w());
    const double want = dot(y, dy);
    EXPECT_NEAR(dot(x, dx), want, 1e-4 * (1 + std::abs(want)));
    EXPECT_NEAR(dot(w, dw), want, 1e-4 * (1 + std::abs(want)));
  }
}

TEST(ConvBackward, DataMatchesReference) {
  for (const GradCase& c : kCases) {
    SCOPED_TRACE(label(c));
    std::string name = expect_matches_ref("conv2d_backward_data", {input(rnd(c.y(), 4)), input(rnd(c.w(), 5))},
                                          data_attrs(c));
    EXPECT_EQ(name.find("ref"), std::string::npos) << name;
  }
}

TEST(ConvBackward, WeightMatchesReference) {
  for (const GradCase& c : kCases) {
    SCOPED_TRACE(label(c));
    std::string name = expect_matches_ref("conv2d_backward_weight", {input(rnd(c.y(), 6)), input(rnd(c.x(), 7))},
                                          weight_attrs(c));
    EXPECT_EQ(name.find("ref"), std::string::npos) << name;
  }
}

// Graph inputs may arrive as strided torch views (a transposed dy, a permuted saved input).
TEST(ConvBackward, StridedInputs) {
  const GradCase c = kCases[9];
  Tensor dy = rnd(c.y(), 8), w = rnd(c.w(), 9), x = rnd(c.x(), 10);
  expect_matches_ref("conv2d_backward_data", {transposed_input(dy), transposed_input(w)}, data_attrs(c));
  expect_matches_ref("conv2d_backward_weight", {transposed_input(dy), transposed_input(x)}, weight_attrs(c));
}

TEST(ConvBackward, SameResultFromManyThreads) {
  const GradCase c = kCases[9];
  OneNode data("conv2d_backward_data", {input(rnd(c.y(), 11)), input(rnd(c.w(), 12))}, data_attrs(c));
  expect_same_from_threads(data, 3, kGemmRtol, kGemmAtol);
  OneNode weight("conv2d_backward_weight", {input(rnd(c.y(), 13)), input(rnd(c.x(), 14))}, weight_attrs(c));
  expect_same_from_threads(weight, 3, kGemmRtol, kGemmAtol);
}

TEST(ConvBackward, ShapeErrorsNameTheProblem) {
  const GradCase c = kCases[8];  // 14x14, 1x1 stride 2 -> 7x7
  auto t = [](std::vector<int64_t> s) { return TensorType{DType::f32, shape_from(s)}; };
  Attrs bad = data_attrs(c);
  bad["input_size"] = std::vector<int64_t>{20, 20};  // maps to 10x10, not dy's 7x7
  try {
    infer("conv2d_backward_data", {t(c.y()), t(c.w())}, bad);
    FAIL() << "an input size the forward does not map to dy's size was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("maps 20 to 10, but dy has 7"), std::string::npos) << e.what();
  }
  EXPECT_THROW(infer("conv2d_backward_weight", {t(c.y()), t({2, 32, 14})}, weight_attrs(c)), Error);
  EXPECT_THROW(infer("conv2d_backward_data", {TensorType{DType::f64, shape_from(c.y())}, TensorType{DType::f64, shape_from(c.w())}},
                     data_attrs(c)),
               Error);
  // Both sizes that map to dy's are accepted; the attribute decides.
  Attrs odd = data_attrs(c);
  odd["input_size"] = std::vector<int64_t>{13, 13};
  EXPECT_EQ(infer("conv2d_backward_data", {t(c.y()), t(c.w())}, odd)[0].shape, shape_from({2, 32, 13, 13}));
}
