// Norms: shape functions (optional inputs, parameter shapes), reference kernels on
// hand-checked values, fast f32 kernels vs the reference across dims, shapes, strides and
// numerically awkward inputs (large offsets, large magnitudes, -inf).
#include <cmath>
#include <limits>

#include "core/error.h"
#include "kernel_test_util.h"

using namespace updraft;
using namespace updraft::testing;

namespace {

// f32 kernels vs double reference (the contract for norms: match PyTorch within 1e-5).
constexpr double kRtol = 1e-5;
constexpr double kAtol = 1e-5;
// Softmax outputs lie in [0, 1]; the AVX2 exp is within ~2 ulp, so absolute error stays ~1e-7.
constexpr double kSoftmaxAtol = 1e-6;

Attrs ln_attrs(int nd, bool hw, bool hb, double eps = 1e-5) {
  return {{"normalized_ndim", Attr(nd)}, {"eps", Attr(eps)}, {"has_weight", Attr(hw)}, {"has_bias", Attr(hb)}};
}

}  // namespace

TEST(NormShape, OptionalInputsAndParamShapes) {
  Dim s = Dim::sym("s0");
  TensorType x{DType::f32, {s, 12, 64}}, w{DType::f32, {64}}, w2{DType::f32, {12, 64}};
  EXPECT_EQ(infer("layer_norm", {x, w, w}, ln_attrs(1, true, true))[0], x);
  EXPECT_EQ(infer("layer_norm", {x, w2}, ln_attrs(2, true, false))[0], x);
  EXPECT_EQ(infer("layer_norm", {x}, ln_attrs(1, false, false))[0], x);
  EXPECT_THROW(infer("layer_norm", {x, w}, ln_attrs(1, true, true)), Error);      // bias missing
  EXPECT_THROW(infer("layer_norm", {x, w2, w2}, ln_attrs(1, true, true)), Error); // wrong param shape
  EXPECT_THROW(infer("layer_norm", {x, w, w}, ln_attrs(4, true, true)), Error);   // normalized_ndim > rank
  EXPECT_THROW(infer("layer_norm", {x, {DType::f64, {64}}, w}, ln_attrs(1, true, true)), Error);  // dtype
  EXPECT_EQ(infer("rms_norm", {x, w}, {{"normalized_ndim", Attr(1)}})[0], x);
  EXPECT_EQ(infer("softmax", {x}, {{"dim", Attr(-1)}})[0], x);
  EXPECT_THROW(infer("softmax", {x}, {{"dim", Attr(3)}}), Error);
  EXPECT_THROW(infer("softmax", {{DType::i64, {3}}}, {{"dim", Attr(0)}}), Error);
  TensorType img{DType::f32, {s, 8, 5, 5}}, c{DType::f32, {8}};
  EXPECT_EQ(infer("batch_norm", {img, c, c, c, c}, {})[0], img);
  EXPECT_EQ(infer("batch_norm", {img, c, c}, {{"has_weight", Attr(false)}, {"has_bias", Attr(false)}})[0], img);
  EXPECT_THROW(infer("batch_norm", {img, c, c}, {}), Error);                       // weight/bias missing
  EXPECT_THROW(infer("batch_norm", {img, {DType::f32, {4}}, c, c, c}, {}), Error);  // wrong channel count
  EXPECT_THROW(infer("batch_norm", {{DType::f32, {8}}, c, c, c, c}, {}), Error);   // rank 1
}

TEST(NormRef, HandCheckedValues) {
  Tensor x = from_values(DType::f32, {1, 4}, {1, 2, 3, 4});
  OneNode sm("softmax", {x.view()}, {{"dim", Attr(1)}});
  auto p = values_of(run_node(*sm.node, {x.view()}, Device::ref)[0]);
  double z = std::exp(1) + std::exp(2) + std::exp(3) + std::exp(4);
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(p[i], std::exp(i + 1) / z, 1e-7);
  OneNode ls("log_softmax", {x.view()}, {{"dim", Attr(-1)}});
  EXPECT_NEAR(values_of(run_node(*ls.node, {x.view()}, Device::ref)[0])[0], 1 - std::log(z), 1e-6);
  // layer_norm of 1..4: mean 2.5, biased var 1.25.
  OneNode ln("layer_norm", {x.view()}, ln_attrs(1, false, false, 0.0));
  auto y = values_of(run_node(*ln.node, {x.view()}, Device::ref)[0]);
  EXPECT_NEAR(y[0], -1.5 / std::sqrt(1.25), 1e-6);
  EXPECT_NEAR(y[3], 1.5 / std::sqrt(1.25), 1e-6);
  // rms_norm: mean square 7.5.
  OneNode rn("rms_norm", {x.view()}, {{"normalized_ndim", Attr(1)}, {"eps", Attr(0.0)}, {"has_weight", Attr(false)}});
  EXPECT_NEAR(values_of(run_node(*rn.node, {x.view()}, Device::ref)[0])[1], 2 / std::sqrt(7.5), 1e-6);
  // batch_norm on [1, 2, 2]: channel 0 mean 1 var 4 w 2 b 1; channel 1 mean 0 var 1 w 1 b 0.
  Tensor img = from_values(DType::f32, {1, 2, 2}, {3, 5, 7, -1});
  Tensor mean = from_values(DType::f32, {2}, {1, 0}), var = from_values(DType::f32, {2}, {4, 1});
  Tensor w = from_values(DType::f32, {2}, {2, 1}), b = from_values(DType::f32, {2}, {1, 0});
  std::vector<TensorView> in = {img.view(), mean.view(), var.view(), w.view(), b.view()};
  OneNode bn("batch_norm", inputs_of(in), {{"eps", Attr(0.0)}});
  auto out = values_of(run_node(*bn.node, in, Device::ref)[0]);
  EXPECT_NEAR(out[0], (3 - 1) / 2.0 * 2 + 1, 1e-6);
  EXPECT_NEAR(out[1], (5 - 1) / 2.0 * 2 + 1, 1e-6);
  EXPECT_NEAR(out[3], -1.0, 1e-6);
}

TEST(NormCpu, SoftmaxEveryDimAndShape) {
  for (auto shape : std::vector<std::vector<int64_t>>{{7}, {1}, {3, 1}, {4, 33}, {2, 3, 17}, {3, 300, 5}, {2, 0, 4}, {64, 1000}})
    for (int dim = -1; dim >= -static_cast<int>(shape.size()); --dim)
      for (const std::string op : {"softmax", "log_softmax"}) {
        Tensor x = random_tensor(DType::f32, shape, static_cast<uint32_t>(-dim), -8, 8);
        SCOPED_TRACE(op + " dim " + std::to_string(dim) + " shape " + Attr(shape).str());
        expect_matches_ref(op, {x.view()}, {{"dim", Attr(dim)}}, kRtol, op == "softmax" ? kSoftmaxAtol : kAtol);
      }
}

TEST(NormCpu, SoftmaxLargeValuesInfAndStrides) {
  Tensor x = random_tensor(DType::f32, {5, 40}, 3, -80, 80);  // would overflow exp without the max shift
  x.ptr<float>()[7] = -std::numeric_limits<float>::infinity();  // masked position: probability 0
  x.ptr<float>()[45] = 1e30f;
  for (const std::string op : {"softmax", "log_softmax"}) {
    expect_matches_ref(op, {x.view()}, {{"dim", Attr(1)}}, kRtol, kSoftmaxAtol);
    expect_matches_ref(op, {x.view()}, {{"dim", Attr(0)}}, kRtol, kSoftmaxAtol);
  }
  OneNode n("softmax", {x.view()}, {{"dim", Attr(1)}});
  EXPECT_EQ(values_of(run_node(*n.node, {x.view()}, Device::cpu)[0])[7], 0.0);
  Tensor y = random_tensor(DType::f32, {3, 21, 13}, 4);
  auto [v, store] = transposed_copy(y);
  for (int dim : {0, 1, 2}) expect_matches_ref("softmax", {v}, {{"dim", Attr(dim)}}, kRtol, kSoftmaxAtol);
}

TEST(NormCpu, LayerNormAndRmsNorm) {
  struct Case { std::vector<int64_t> shape; int nd; };
  for (const Case& c : {Case{{4, 768}, 1}, Case{{3, 5, 7}, 2}, Case{{2, 3, 1}, 1}, Case{{1, 13}, 1}, Case{{0, 8}, 1},
                        Case{{6, 2, 50}, 1}, Case{{9}, 1}}) {
    Tensor x = random_tensor(DType::f32, c.shape, 1);
    // A large common offset: E[x^2] - mean^2 would cancel catastrophically here.
    for (int64_t i = 0; i < x.numel(); ++i) x.ptr<float>()[i] += 100.0f;
    std::vector<int64_t> pshape(c.shape.end() - c.nd, c.shape.end());
    Tensor w = random_tensor(DType::f32, pshape, 2, 0.5, 1.5), b = random_tensor(DType::f32, pshape, 3);
    SCOPED_TRACE("shape " + Attr(c.shape).str());
    for (bool hw : {true, false})
      for (bool hb : {true, false}) {
        std::vector<TensorView> in = {x.view()};
        if (hw) in.push_back(w.view());
        if (hb) in.push_back(b.view());
        expect_matches_ref("layer_norm", inputs_of(in), ln_attrs(c.nd, hw, hb), kRtol, kAtol);
      }
    Tensor xr = random_tensor(DType::f32, c.shape, 4);
    expect_matches_ref("rms_norm", {xr.view(), w.view()}, {{"normalized_ndim", Attr(c.nd)}}, kRtol, kAtol);
    expect_matches_ref("rms_norm", {xr.view()}, {{"normalized_ndim", Attr(c.nd)}, {"has_weight", Attr(false)}},
                           kRtol, kAtol);
  }
  Tensor big = random_tensor(DType::f32, {256, 1024}, 8);  // parallel path
  Tensor w = random_tensor(DType::f32, {1024}, 9), b = random_tensor(DType::f32, {1024}, 10);
  expect_matches_ref("layer_norm", {big.view(), w.view(), b.view()}, ln_attrs(1, true, true), kRtol, kAtol);
  auto [v, store] = transposed_copy(random_tensor(DType::f32, {2, 31, 17}, 11));
  Tensor w17 = random_tensor(DType::f32, {17}, 12);
  expect_matches_ref("layer_norm", {v, w17.view(), w17.view()}, ln_attrs(1, true, true), kRtol, kAtol);
  expect_matches_ref("rms_norm", {v, w17.view()}, {{"normalized_ndim", Attr(1)}}, kRtol, kAtol);
}

TEST(NormCpu, BatchNormInference) {
  for (auto shape : std::vector<std::vector<int64_t>>{{2, 8, 5, 5}, {3, 4}, {1, 3, 1, 1}, {2, 5, 17}, {0, 3, 2, 2}, {4, 16, 56, 56}}) {
    int64_t ch = shape[1];
    Tensor x = random_tensor(DType::f32, shape, 1);
    Tensor mean = random_tensor(DType::f32, {ch}, 2), var = random_tensor(DType::f32, {ch}, 3, 0.1, 3.0);
    Tensor w = random_tensor(DType::f32, {ch}, 4), b = random_tensor(DType::f32, {ch}, 5);
    SCOPED_TRACE("shape " + Attr(shape).str());
    expect_matches_ref("batch_norm", {x.view(), mean.view(), var.view(), w.view(), b.view()}, {}, kRtol, kAtol);
    expect_matches_ref("batch_norm", {x.view(), mean.view(), var.view()},
                           {{"has_weight", Attr(false)}, {"has_bias", Attr(false)}}, kRtol, kAtol);
    expect_matches_ref("batch_norm", {x.view(), mean.view(), var.view(), b.view()},
                           {{"has_weight", Attr(false)}}, kRtol, kAtol);
  }
  // A channels-last input seen through NCHW strides takes the packing path.
  Tensor x = random_tensor(DType::f32, {2, 6, 7}, 6);
  auto [v, store] = transposed_copy(x);
  Tensor mean = random_tensor(DType::f32, {6}, 7), var = random_tensor(DType::f32, {6}, 8, 0.1, 2.0);
  expect_matches_ref("batch_norm", {v, mean.view(), var.view()},
                         {{"has_weight", Attr(false)}, {"has_bias", Attr(false)}}, kRtol, kAtol);
}

// ---- f64 (cpu/norm_f64.cpp) ----
// Tolerance: the same formulas in double as the reference; the row sums are pairwise (the
// reference's are running sums) and exp/log are the same C library calls, so results differ by
// a few ulp: relative 1e-12, absolute 1e-14 for values near zero (outputs are O(1)).
namespace {
constexpr double kF64Rtol = 1e-12;
constexpr double kF64Atol = 1e-14;

// Inputs with a common offset of 1e4: the reference's running-sum mean errs by ~1e4 * eps * a
// few tens, which (x - mean) turns into an absolute error of up to ~1e-11 in the output. A
// one-pass variance (E[x^2] - mean^2) would err by ~1e8 * eps, ~1e-8: still caught.
constexpr double kF64OffsetAtol = 1e-10;

void expect_f64_matches_ref(const std::string& op, const std::vector<TensorView>& inputs, const Attrs& attrs,
                            double atol = kF64Atol) {
  OneNode n(op, inputs_of(inputs), attrs);
  EXPECT_EQ(n.kernel_name(Device::cpu), "cpu_f64_" + op);
  auto want = run_node(*n.node, inputs, Device::ref);
  for (int threads : {1, 2}) {
    auto got = run_node(*n.node, inputs, Device::cpu, nullptr, threads);
    EXPECT_TRUE(all_close(got[0], want[0], kF64Rtol, atol)) << op << " threads " << threads;
  }
}
}  // namespace

TEST(NormCpuF64, Softmax) {
  for (auto shape : std::vector<std::vector<int64_t>>{{7}, {1}, {3, 1}, {4, 33}, {2, 3, 17}, {3, 300, 5}, {2, 0, 4}, {64, 1000}})
    for (int dim = -1; dim >= -static_cast<int>(shape.size()); --dim)
      for (const std::string op : {"softmax", "log_softmax"}) {
        Tensor x = random_tensor(DType::f64, shape, static_cast<uint32_t>(-dim), -8, 8);
        SCOPED_TRACE(op + " dim " + std::to_string(dim) + " shape " + Attr(shape).str());
        expect_f64_matches_ref(op, {x.view()}, {{"dim", Attr(dim)}});
      }
  Tensor x = random_tensor(DType::f64, {5, 40}, 3, -700, 700);  // would overflow exp without the max shift
  x.ptr<double>()[7] = -std::numeric_limits<double>::infinity();  // masked position: probability 0
  x.ptr<double>()[45] = 1e300;
  for (int i = 120; i < 160; ++i) x.ptr<double>()[i] = -std::numeric_limits<double>::infinity();  // all masked: NaN
  x.ptr<double>()[170] = NAN;
  for (const std::string op : {"softmax", "log_softmax"})
    for (int dim : {0, 1}) expect_f64_matches_ref(op, {x.view()}, {{"dim", Attr(dim)}});
  OneNode n("softmax", {x.view()}, {{"dim", Attr(1)}});
  auto y = values_of(run_node(*n.node, {x.view()}, Device::cpu)[0]);
  EXPECT_EQ(y[7], 0.0);
  EXPECT_TRUE(std::isnan(y[120]));
  EXPECT_TRUE(std::isnan(y[161]));
  Tensor s = random_tensor(DType::f64, {3, 21, 13}, 4);
  auto [v, store] = transposed_copy(s);
  for (int dim : {0, 1, 2}) expect_f64_matches_ref("softmax", {v}, {{"dim", Attr(dim)}});
}

// softmax with zero_masked_rows (torch's _safe_softmax): a line of all -inf gives 0s, a line with
// a NaN stays NaN, a line with some -inf is an ordinary softmax; along the last dim (rows) and a
// middle one (columns), f32 and f64, fast kernels against the reference.
TEST(NormCpu, SoftmaxZeroMaskedRows) {
  const double inf = std::numeric_limits<double>::infinity();
  for (DType dt : {DType::f32, DType::f64}) {
    Tensor x = random_tensor(dt, {6, 40}, 5, -8, 8);
    auto set = [&](int64_t i, double v) {
      if (dt == DType::f32) x.ptr<float>()[i] = static_cast<float>(v);
      else x.ptr<double>()[i] = v;
    };
    for (int j = 0; j < 40; ++j) set(2 * 40 + j, -inf);  // row 2: every key masked
    for (int j = 0; j < 40; ++j) set(4 * 40 + j, j == 9 ? NAN : -inf);  // row 4: masked but a NaN
    for (int j = 0; j < 20; ++j) set(5 * 40 + j, -inf);  // row 5: half masked
    for (int i = 0; i < 6; ++i) set(i * 40 + 33, -inf);  // column 33: every row masked (dim 0)
    const Attrs safe = {{"dim", Attr(1)}, {"zero_masked_rows", Attr(true)}};
    SCOPED_TRACE(dtype_name(dt));
    for (int dim : {1, 0}) {
      const Attrs a = {{"dim", Attr(dim)}, {"zero_masked_rows", Attr(true)}};
      if (dt == DType::f32) expect_matches_ref("softmax", {x.view()}, a, kRtol, kSoftmaxAtol);
      else expect_f64_matches_ref("softmax", {x.view()}, a);
    }
    for (Device dev : {Device::ref, Device::cpu}) {
      OneNode n("softmax", {x.view()}, safe);
      auto y = values_of(run_node(*n.node, {x.view()}, dev)[0]);
      for (int j = 0; j < 40; ++j) EXPECT_EQ(y[2 * 40 + j], 0.0) << j;
      EXPECT_TRUE(std::isnan(y[4 * 40]));
      EXPECT_EQ(y[5 * 40], 0.0);
      EXPECT_GT(y[5 * 40 + 30], 0.0);
      OneNode plain("softmax", {x.view()}, {{"dim", Attr(1)}});
      EXPECT_TRUE(std::isnan(values_of(run_node(*plain.node, {x.view()}, dev)[0])[2 * 40]));  // torch's softmax
      OneNode cols("softmax", {x.view()}, {{"dim", Attr(0)}, {"zero_masked_rows", Attr(true)}});
      auto c = values_of(run_node(*cols.node, {x.view()}, dev)[0]);
      EXPECT_EQ(c[33], 0.0);
      EXPECT_EQ(c[5 * 40 + 33], 0.0);
    }
  }
}

TEST(NormCpuF64, LayerNormRmsNormBatchNorm) {
  struct Case { std::vector<int64_t> shape; int nd; };
  for (const Case& c : {Case{{4, 768}, 1}, Case{{3, 5, 7}, 2}, Case{{2, 3, 1}, 1}, Case{{1, 13}, 1}, Case{{0, 8}, 1},
                        Case{{256, 301}, 1}, Case{{9}, 1}}) {
    Tensor x = random_tensor(DType::f64, c.shape, 1);
    for (int64_t i = 0; i < x.numel(); ++i) x.ptr<double>()[i] += 1e4;  // a large common offset
    std::vector<int64_t> pshape(c.shape.end() - c.nd, c.shape.end());
    Tensor w = random_tensor(DType::f64, pshape, 2, 0.5, 1.5), b = random_tensor(DType::f64, pshape, 3);
    SCOPED_TRACE("shape " + Attr(c.shape).str());
    for (bool hw : {true, false})
      for (bool hb : {true, false}) {
        std::vector<TensorView> in = {x.view()};
        if (hw) in.push_back(w.view());
        if (hb) in.push_back(b.view());
        expect_f64_matches_ref("layer_norm", in, ln_attrs(c.nd, hw, hb), kF64OffsetAtol);
      }
    Tensor xr = random_tensor(DType::f64, c.shape, 4);
    expect_f64_matches_ref("rms_norm", {xr.view(), w.view()}, {{"normalized_ndim", Attr(c.nd)}});
    expect_f64_matches_ref("rms_norm", {xr.view()}, {{"normalized_ndim", Attr(c.nd)}, {"has_weight", Attr(false)}});
  }
  auto [v, store] = transposed_copy(random_tensor(DType::f64, {2, 31, 17}, 11));
  Tensor w17 = random_tensor(DType::f64, {17}, 12);
  expect_f64_matches_ref("layer_norm", {v, w17.view(), w17.view()}, ln_attrs(1, true, true));
  for (auto shape : std::vector<std::vector<int64_t>>{{2, 8, 5, 5}, {3, 4}, {2, 5, 17}, {0, 3, 2, 2}, {4, 16, 33, 33}}) {
    int64_t ch = shape[1];
    Tensor x = random_tensor(DType::f64, shape, 1);
    Tensor mean = random_tensor(DType::f64, {ch}, 2), var = random_tensor(DType::f64, {ch}, 3, 0.1, 3.0);
    Tensor w = random_tensor(DType::f64, {ch}, 4), b = random_tensor(DType::f64, {ch}, 5);
    SCOPED_TRACE("shape " + Attr(shape).str());
    expect_f64_matches_ref("batch_norm", {x.view(), mean.view(), var.view(), w.view(), b.view()}, {});
    expect_f64_matches_ref("batch_norm", {x.view(), mean.view(), var.view()},
                           {{"has_weight", Attr(false)}, {"has_bias", Attr(false)}});
  }
}
