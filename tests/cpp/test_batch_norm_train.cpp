// batch_norm_train / batch_norm_backward: the reference forward against its definition (batch
// mean and biased variance), the reference backward against central differences of the
// reference forward (f64), and the CPU kernels against the references (f32 and f64, with and
// without affine parameters, rank 2 to 4, strided inputs, threads).
#include <gtest/gtest.h>

#include <cmath>

#include "kernel_test_util.h"
#include "core/error.h"

using namespace updraft;
using namespace updraft::testing;

namespace {

Attrs train_attrs(bool hw, bool hb) { return {{"eps", 1e-5}, {"has_weight", hw}, {"has_bias", hb}}; }

std::vector<Tensor> run_ref_all(const std::string& op, std::vector<Arg> args, Attrs attrs) {
  OneNode n(op, std::move(args), std::move(attrs));
  auto k = make_kernel_for(n, Device::ref);
  return run_kernel_outputs(*k, n);
}

// sum(dy * y(x)) with y the reference forward: the loss whose gradient batch_norm_backward gives.
double loss(const std::vector<double>& x, const std::vector<int64_t>& shape, const Tensor& w, const Tensor& b,
            const std::vector<double>& dy) {
  Tensor t = from_values(DType::f64, shape, x);
  auto outs = run_ref_all("batch_norm_train", {input(t), input(w), input(b)}, train_attrs(true, true));
  std::vector<double> y = values_of(outs[0]);
  double s = 0;
  for (size_t i = 0; i < y.size(); ++i) s += y[i] * dy[i];
  return s;
}

}  // namespace

TEST(BatchNormTrain, ReferenceForwardUsesTheBatchStatistics) {
  // Channel 0 holds 1, 2, 3, 4 over N=2 and inner 2; channel 1 holds 10, 10, 10, 14.
  Tensor x = from_values(DType::f64, {2, 2, 2}, {1, 2, 10, 10, 3, 4, 10, 14});
  auto outs = run_ref_all("batch_norm_train", {input(x)}, train_attrs(false, false));
  EXPECT_EQ(values_of(outs[1]), (std::vector<double>{2.5, 11.0}));
  EXPECT_EQ(values_of(outs[2]), (std::vector<double>{1.25, 3.0}));  // biased: / 4
  std::vector<double> y = values_of(outs[0]);
  EXPECT_NEAR(y[0], (1 - 2.5) / std::sqrt(1.25 + 1e-5), 1e-12);
  EXPECT_NEAR(y[7], (14 - 11.0) / std::sqrt(3.0 + 1e-5), 1e-12);
}

TEST(BatchNormTrain, ReferenceBackwardMatchesCentralDifferences) {
  const std::vector<int64_t> shape = {3, 2, 5};
  Tensor xt = random_tensor(DType::f64, shape, 1), dyt = random_tensor(DType::f64, shape, 2);
  Tensor w = random_tensor(DType::f64, {2}, 3), b = random_tensor(DType::f64, {2}, 4);
  auto fwd = run_ref_all("batch_norm_train", {input(xt), input(w), input(b)}, train_attrs(true, true));
  std::vector<double> var = values_of(fwd[2]), invstd(2);
  for (int c = 0; c < 2; ++c) invstd[c] = 1.0 / std::sqrt(var[c] + 1e-5);
  auto bwd = run_ref_all("batch_norm_backward",
                         {input(dyt), input(xt), input(fwd[1]), input(from_values(DType::f64, {2}, invstd)), input(w)},
                         {{"has_weight", true}});
  std::vector<double> x = values_of(xt), dy = values_of(dyt), dx = values_of(bwd[0]);
  const double h = 1e-6;
  for (size_t i = 0; i < x.size(); ++i) {
    std::vector<double> up = x, down = x;
    up[i] += h;
    down[i] -= h;
    const double numeric = (loss(up, shape, w, b, dy) - loss(down, shape, w, b, dy)) / (2 * h);
    EXPECT_NEAR(dx[i], numeric, 1e-6) << "element " << i;
  }
  // dw = sum(dy * xhat), db = sum(dy): dL/dw and dL/db of the same loss.
  std::vector<double> y = values_of(fwd[0]), wv = values_of(w), bv = values_of(b), dw = values_of(bwd[1]),
                      db = values_of(bwd[2]);
  for (int c = 0; c < 2; ++c) {
    double want_dw = 0, want_db = 0;
    for (int n = 0; n < 3; ++n)
      for (int i = 0; i < 5; ++i) {
        const int64_t k = (n * 2 + c) * 5 + i;
        want_dw += dy[k] * (y[k] - bv[c]) / wv[c];
        want_db += dy[k];
      }
    EXPECT_NEAR(dw[c], want_dw, 1e-9);
    EXPECT_NEAR(db[c], want_db, 1e-12);
  }
}

TEST(BatchNormTrain, CpuKernelsMatchReference) {
  for (DType dt : {DType::f32, DType::f64}) {
    for (const std::vector<int64_t>& shape : std::vector<std::vector<int64_t>>{{8, 5}, {3, 7, 300}, {2, 16, 9, 33}}) {
      for (bool affine : {false, true}) {
        SCOPED_TRACE(std::string(dtype_name(dt)) + " " + shape_str(shape_from(shape)) + (affine ? " affine" : ""));
        const int64_t C = shape[1];
        // A large channel mean: the variance must not come from E[x^2] - mean^2.
        std::vector<double> xv = values_of(random_tensor(DType::f64, shape, 5));
        for (double& v : xv) v = 100.0 + v;
        Tensor x = from_values(dt, shape, xv);
        Tensor w = random_tensor(dt, {C}, 6), b = random_tensor(dt, {C}, 7);
        std::vector<Arg> fwd_args = {input(x)};
        if (affine) fwd_args.insert(fwd_args.end(), {input(w), input(b)});
        OneNode fwd("batch_norm_train", fwd_args, train_attrs(affine, affine));
        EXPECT_TRUE(cpu_matches_ref(fwd, 1e-5, 1e-5));
        auto stats = run_kernel_outputs(*make_kernel_for(fwd, Device::ref), fwd);
        std::vector<double> var = values_of(stats[2]), invstd;
        for (double v : var) invstd.push_back(1.0 / std::sqrt(v + 1e-5));
        std::vector<Arg> bwd_args = {input(random_tensor(dt, shape, 8)), input(x), input(stats[1]),
                                     input(from_values(dt, {C}, invstd))};
        if (affine) bwd_args.push_back(input(w));
        OneNode bwd("batch_norm_backward", bwd_args, {{"has_weight", affine}});
        EXPECT_TRUE(cpu_matches_ref(bwd, 1e-4, 1e-5));
      }
    }
  }
}

TEST(BatchNormTrain, StridedInputsAndThreads) {
  Tensor x = random_tensor(DType::f32, {4, 6, 40}, 9), dy = random_tensor(DType::f32, {4, 6, 40}, 10);
  OneNode fwd("batch_norm_train", {transposed_input(x)}, train_attrs(false, false));
  EXPECT_TRUE(cpu_matches_ref(fwd, 1e-5, 1e-5));
  expect_same_from_threads(fwd, 3, 1e-5, 1e-5);
  auto stats = run_kernel_outputs(*make_kernel_for(fwd, Device::ref), fwd);
  std::vector<double> invstd;
  for (double v : values_of(stats[2])) invstd.push_back(1.0 / std::sqrt(v + 1e-5));
  OneNode bwd("batch_norm_backward",
              {transposed_input(dy), transposed_input(x), input(stats[1]), input(from_values(DType::f32, {6}, invstd))},
              {{"has_weight", false}});
  EXPECT_TRUE(cpu_matches_ref(bwd, 1e-4, 1e-5));
  expect_same_from_threads(bwd, 3, 1e-4, 1e-5);
}

TEST(BatchNormTrain, ShapeErrorsNameTheProblem) {
  auto t = [](std::vector<int64_t> s) { return TensorType{DType::f32, shape_from(s)}; };
  EXPECT_THROW(infer("batch_norm_train", {t({5})}, train_attrs(false, false)), Error);
  EXPECT_THROW(infer("batch_norm_train", {t({2, 3, 4}), t({4})}, train_attrs(true, false)), Error);
  try {
    infer("batch_norm_backward", {t({2, 3, 4}), t({2, 3, 5}), t({3}), t({3})}, {{"has_weight", false}});
    FAIL() << "dy and x of different shapes were accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("must have one shape"), std::string::npos) << e.what();
  }
  auto outs = infer("batch_norm_train", {t({2, 3, 4, 4}), t({3}), t({3})}, train_attrs(true, true));
  ASSERT_EQ(outs.size(), 3u);
  EXPECT_EQ(outs[1].shape, shape_from({3}));
}

// An empty batch reads nothing: the statistics are NaN (0 / 0), as the reference gives.
TEST(BatchNormTrain, EmptyBatch) {
  OneNode fwd("batch_norm_train", {input(Tensor(DType::f32, {0, 3, 4}))}, train_attrs(false, false));
  EXPECT_TRUE(cpu_matches_ref(fwd, 0, 0));
  auto outs = run_kernel_outputs(*make_kernel_for(fwd, Device::cpu), fwd);
  EXPECT_TRUE(std::isnan(values_of(outs[1])[0]));
}
