// conv2d: the oneDNN kernel against the reference over odd images (7x7, 5x9), channels
// 3/5/17, strides, padding, dilation, groups (incl. depthwise), batch 1 and 3, constant
// (prepacked) and non-constant weights, every epilogue, strided inputs and threads.
#include <gtest/gtest.h>

#include "kernel_test_util.h"
#include "core/cpu_features.h"
#include "core/error.h"
#include "ir/ops/params.h"

using namespace updraft;
using namespace updraft::testing;

namespace {

Tensor rnd(const std::vector<int64_t>& s, uint32_t seed) { return random_tensor(DType::f32, s, seed); }

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
    {1, 3, 1, 1, 5, 1, 1, 0, 1, 1},     // 1x1 image
    {1, 3, 7, 7, 4, 7, 1, 0, 1, 1},     // kernel covers the image
    {3, 16, 14, 14, 32, 3, 1, 1, 1, 1},  // a shape with blocked weights
};

std::string label(const ConvCase& c) {
  return "N" + std::to_string(c.N) + " C" + std::to_string(c.C) + " " + std::to_string(c.H) + "x" +
         std::to_string(c.W) + " O" + std::to_string(c.O) + " k" + std::to_string(c.k) + " s" +
         std::to_string(c.stride) + " p" + std::to_string(c.pad) + " d" + std::to_string(c.dil) + " g" +
         std::to_string(c.groups);
}

}  // namespace

TEST(Conv, ShapesConstantWeightsPrepacked) {
  for (const ConvCase& c : kCases) {
    SCOPED_TRACE(label(c));
    std::string name = expect_matches_ref(
        "conv2d", {input(rnd({c.N, c.C, c.H, c.W}, 1)), constant(rnd({c.O, c.C / c.groups, c.k, c.k}, 2))},
        conv_attrs(c));
    EXPECT_NE(name.find("prepacked"), std::string::npos) << name;
  }
}

TEST(Conv, ShapesNonConstantWeights) {
  for (const ConvCase& c : kCases) {
    SCOPED_TRACE(label(c));
    std::string name = expect_matches_ref(
        "conv2d", {input(rnd({c.N, c.C, c.H, c.W}, 3)), input(rnd({c.O, c.C / c.groups, c.k, c.k}, 4))},
        conv_attrs(c));
    EXPECT_EQ(name.find("prepacked"), std::string::npos) << name;
  }
}

TEST(Conv, EveryActivationWithBiasAndResidual) {
  for (const std::string& act : epilogue_activations()) {
    SCOPED_TRACE(act);
    for (const ConvCase& c : {kCases[1], kCases[5], kCases[7], kCases[10]}) {
      SCOPED_TRACE(label(c));
      Attrs a = conv_attrs(c);
      for (auto& [k, v] : epilogue_attrs(act)) a[k] = v;
      a["has_bias"] = true;
      a["has_residual"] = true;
      int64_t OH = (c.H + 2 * c.pad - c.dil * (c.k - 1) - 1) / c.stride + 1;
      int64_t OW = (c.W + 2 * c.pad - c.dil * (c.k - 1) - 1) / c.stride + 1;
      std::string name = expect_matches_ref(
          "conv2d",
          {input(rnd({c.N, c.C, c.H, c.W}, 1)), constant(rnd({c.O, c.C / c.groups, c.k, c.k}, 2)),
           constant(rnd({c.O}, 3)), input(rnd({c.N, c.O, OH, OW}, 4))},
          a);
      // The fused epilogue must not push oneDNN onto its plain-loop reference implementation.
      EXPECT_EQ(name.find(":ref:"), std::string::npos) << name;
      if (c.N * c.C * c.H * c.W > 3000) continue;  // the bias-only / residual-only variants on small shapes
      // Bias only / residual only, non-constant weights.
      Attrs b = a;
      b["has_residual"] = false;
      expect_matches_ref("conv2d",
                         {input(rnd({c.N, c.C, c.H, c.W}, 5)), input(rnd({c.O, c.C / c.groups, c.k, c.k}, 6)),
                          input(rnd({c.O}, 7))},
                         b);
      Attrs r = a;
      r["has_bias"] = false;
      expect_matches_ref("conv2d",
                         {input(rnd({c.N, c.C, c.H, c.W}, 8)), input(rnd({c.O, c.C / c.groups, c.k, c.k}, 9)),
                          input(rnd({c.N, c.O, OH, OW}, 10))},
                         r);
    }
  }
}

// A plain NCHW conv runs oneDNN's gemm-based convolution, which applies eltwise post-ops one
// element at a time (~10x the conv's own time on a 1x1 conv over 56x56): there every activation
// runs after the primitive, relu and clamp in the engine's pass, the others in a oneDNN eltwise
// primitive over dst ("act_after"), and gives the reference's values.
TEST(Conv, GemmFormRunsItsActivationAfterThePrimitive) {
  const ConvCase c{1, 24, 14, 14, 48, 1, 1, 0, 1, 1};
  for (const std::string& act : epilogue_activations()) {
    if (act == "none") continue;
    SCOPED_TRACE(act);
    Attrs a = conv_attrs(c);
    for (auto& [k, v] : epilogue_attrs(act)) a[k] = v;
    a["has_bias"] = true;
    std::string name = expect_matches_ref(
        "conv2d", {input(rnd({c.N, c.C, c.H, c.W}, 1)), constant(rnd({c.O, c.C, 1, 1}, 2)), constant(rnd({c.O}, 3))}, a);
    ASSERT_NE(name.find(":gemm:"), std::string::npos) << "not the form this test is about: " << name;
    const bool engine_act = ew_op_info(*Epilogue::activation(act)).epi == EwEpi::engine;
    EXPECT_EQ(name.find(":act_after") != std::string::npos, !engine_act) << name;
  }
}

TEST(Conv, StridedInputIsPacked) {
  // x arrives as a view with its last two dims swapped in memory (a graph input).
  expect_matches_ref("conv2d", {transposed_input(rnd({3, 5, 7, 9}, 1)), constant(rnd({4, 5, 3, 3}, 2))},
                     {{"padding", std::vector<int64_t>{1, 1}}});
}

TEST(Conv, ShapeFunction) {
  Graph g;
  Value* x = g.add_input("x", {DType::f32, {Dim::sym("n"), 3, Dim::sym("h"), 7}});
  Value* w = g.add_input("w", {DType::f32, {8, 3, 3, 3}});
  Node* n = g.add_node("conv2d", {x, w}, {{"stride", std::vector<int64_t>{2, 2}}, {"padding", std::vector<int64_t>{1, 1}}});
  EXPECT_EQ(n->output()->type.shape[3], Dim(4));
  EXPECT_EQ(n->output()->type.shape[2].eval({{"h", 7}}), 4);
  EXPECT_EQ(n->output()->type.shape[2].eval({{"h", 8}}), 4);
  Value* wg = g.add_input("wg", {DType::f32, {8, 2, 3, 3}});
  EXPECT_THROW(g.add_node("conv2d", {x, wg}, {{"groups", 2}}), Error);  // 3 channels, groups 2
  Value* big = g.add_input("big", {DType::f32, {8, 3, 9, 9}});
  EXPECT_THROW(g.add_node("conv2d", {x, big}), Error);  // 9x9 kernel on a 7-wide image
  EXPECT_THROW(g.add_node("conv2d", {x, w}, {{"has_residual", true}}), Error);  // missing residual
}

TEST(Conv, OneKernelFromFourThreads) {
  for (bool constant_w : {true, false}) {
    auto b = build("conv2d",
                   {input(rnd({3, 16, 14, 14}, 1)),
                    constant_w ? constant(rnd({32, 16, 3, 3}, 2)) : input(rnd({32, 16, 3, 3}, 2)),
                    constant(rnd({32}, 3))},
                   {{"padding", std::vector<int64_t>{1, 1}}, {"has_bias", true}, {"activation", "relu"}});
    SCOPED_TRACE(constant_w ? "constant weight" : "weight input");
    expect_same_from_threads(*b, 10, kGemmRtol, kGemmAtol);
  }
}

namespace {

// w[o, ...] * s[o] as one f32 multiply per element: what fold_conv_bn's scale means.
Tensor prescaled(const Tensor& w, const Tensor& s) {
  Tensor r(DType::f32, w.shape());
  const int64_t per_o = w.numel() / w.shape()[0];
  for (int64_t i = 0; i < w.numel(); ++i)
    r.ptr<float>()[i] = w.ptr<float>()[i] * s.ptr<float>()[i / per_o];
  return r;
}

}  // namespace

TEST(Conv, WeightScaleIsThePrescaledConvBitForBit) {
  // A folded batch norm: conv2d(x, w, s, b) {has_weight_scale}. The kernel scales while it
  // reorders the weights; the result must be the conv of w * s exactly (so the fold changes no
  // bits against multiplying the weights first), and match the reference.
  struct Layout { int64_t src, dst; };
  for (const ConvCase& c : {kCases[0], kCases[3], kCases[5], kCases[6], kCases[7], kCases[10]}) {
    for (Layout l : {Layout{0, 0}, Layout{8, 8}, Layout{0, 16}}) {
      if (l.dst && (c.O % l.dst || (l.src && c.C % l.src))) continue;
      if (l.dst && c.groups != 1) continue;
      for (bool constant_w : {true, false}) {
        SCOPED_TRACE(label(c) + " blocks " + std::to_string(l.src) + "/" + std::to_string(l.dst) +
                     (constant_w ? " constant" : " input"));
        Attrs a = conv_attrs(c);
        a["src_block"] = l.src;
        a["dst_block"] = l.dst;
        a["has_bias"] = true;
        a["activation"] = "relu";
        Tensor x = rnd({c.N, c.C, c.H, c.W}, 1), w = rnd({c.O, c.C / c.groups, c.k, c.k}, 2);
        Tensor s = rnd({c.O}, 3), b = rnd({c.O}, 4);
        auto arg = [&](const Tensor& t) { return constant_w ? constant(t) : input(t); };
        Attrs scaled = a;
        scaled["has_weight_scale"] = true;
        std::string name = expect_matches_ref("conv2d", {input(x), arg(w), arg(s), constant(b)}, scaled);
        EXPECT_NE(name.find(":scaled"), std::string::npos) << name;
        EXPECT_EQ(name.find("prepacked") != std::string::npos, constant_w) << name;
        auto with_scale = build("conv2d", {input(x), arg(w), arg(s), constant(b)}, scaled);
        auto prefolded = build("conv2d", {input(x), arg(prescaled(w, s)), constant(b)}, a);
        auto k1 = make_kernel_for(*with_scale, Device::cpu), k2 = make_kernel_for(*prefolded, Device::cpu);
        ASSERT_TRUE(k1 && k2);
        EXPECT_TRUE(same_bits(run_kernel(*k1, *with_scale), run_kernel(*k2, *prefolded)));
      }
    }
  }
}

TEST(Conv, WeightScaleShapeIsChecked) {
  Graph g;
  Value* x = g.add_input("x", {DType::f32, {1, 3, 7, 7}});
  Value* w = g.add_input("w", {DType::f32, {8, 3, 3, 3}});
  Value* s4 = g.add_input("s4", {DType::f32, {4}});
  Value* s8 = g.add_input("s8", {DType::f32, {8}});
  EXPECT_NO_THROW(g.add_node("conv2d", {x, w, s8}, {{"has_weight_scale", true}}));
  EXPECT_THROW(g.add_node("conv2d", {x, w, s4}, {{"has_weight_scale", true}}), Error);  // not [O]
  EXPECT_THROW(g.add_node("conv2d", {x, w}, {{"has_weight_scale", true}}), Error);      // missing
  EXPECT_THROW(g.add_node("conv2d", {x, w, s8, s8}, {{"has_weight_scale", true}}), Error);  // stray input
}

// No conv resolves to oneDNN's reference loops (100-2000x slower than eager), in any layout the
// block_conv_layout pass can give it: a sweep of kernel sizes against small images with "same"
// and larger padding, strides, dilations and groups, 1-D (as [N, C, 1, L]) and 2-D. Each kernel
// is also checked against the reference.
// Which forms oneDNN jits depends on the ISA and the thread count: ctest runs this with every
// core, the TSan lane (scripts/sanitize.sh) with one OpenMP thread, so both are checked.
TEST(Conv, NoProblemRunsOnAReferenceImplementation) {
  struct Sweep {
    int64_t H, W, k, stride, pad, dil, groups, C = 16;
  };
  std::vector<Sweep> sweep;
  for (int64_t k : {1, 3, 7, 15})
    for (int64_t pad : {int64_t{0}, k / 2, k})
      for (int64_t stride : {1, 2})
        for (int64_t g : {1, 16}) sweep.push_back({16, 16, k, stride, pad, 1, g});
  for (int64_t pad : {0, 2, 4}) sweep.push_back({16, 16, 3, 1, pad, 2, 1});  // dilated
  for (int64_t k : {16, 32}) sweep.push_back({1, 49, k, 1, k / 2, 1, 1});  // a speech encoder's positional conv
  sweep.push_back({32, 32, 15, 1, 7, 1, 1});
  for (int64_t C : {3, 8}) sweep.push_back({16, 16, 7, 1, 7, 1, 1, C});  // padding as large as the kernel
  int via_plain = 0, pre_padded = 0;
  for (const Sweep& c : sweep) {
    const bool one_d = c.H == 1;
    const int64_t kh = one_d ? 1 : c.k, ph = one_d ? 0 : c.pad, dh = one_d ? 1 : c.dil;
    const int64_t OH = (c.H + 2 * ph - dh * (kh - 1) - 1) / c.stride + 1;
    const int64_t OW = (c.W + 2 * c.pad - c.dil * (c.k - 1) - 1) / c.stride + 1;
    if (OH <= 0 || OW <= 0) continue;
    for (int64_t block : {0, 8, 16}) {
      for (bool residual : {false, block == 16}) {
        std::string what = "C" + std::to_string(c.C) + " H" + std::to_string(c.H) + " W" + std::to_string(c.W) + " k" + std::to_string(c.k) +
                           " s" + std::to_string(c.stride) + " p" + std::to_string(c.pad) + " d" +
                           std::to_string(c.dil) + " g" + std::to_string(c.groups) + " block" + std::to_string(block) +
                           (residual ? " +residual" : "");
        SCOPED_TRACE(what);
        Attrs a = {{"stride", std::vector<int64_t>{one_d ? 1 : c.stride, c.stride}},
                   {"padding", std::vector<int64_t>{ph, c.pad}},
                   {"dilation", std::vector<int64_t>{dh, c.dil}},
                   {"groups", c.groups},
                   {"src_block", block},
                   {"dst_block", block},
                   {"activation", std::string("relu")},
                   {"has_bias", true}};
        if (block && c.C % block != 0) continue;  // the pass blocks only channel counts the block divides
        std::vector<Arg> args = {input(rnd({1, c.C, c.H, c.W}, 5)), constant(rnd({c.C, c.C / c.groups, kh, c.k}, 6)),
                                 constant(rnd({c.C}, 7))};
        if (residual) {
          a["has_residual"] = true;
          args.push_back(input(rnd({1, c.C, OH, OW}, 8)));
        }
        // f32 sums of up to 16 * 15 * 15 products in different orders: 1e-3.
        std::string name = expect_matches_ref("conv2d", std::move(args), a, 1e-3, 1e-3);
        EXPECT_EQ(name.find(":ref"), std::string::npos) << name;
        via_plain += name.find(":via_plain") != std::string::npos;
        pre_padded += name.find(":pre_padded") != std::string::npos;
      }
    }
  }
  EXPECT_GT(via_plain, 0) << "the sweep no longer reaches a problem oneDNN serves only plain";
  // oneDNN's AVX-512 blocked kernels decline some padded problems (the engine then pre-pads);
  // its AVX2 kernels serve them all, so on an AVX2-only CPU no problem needs it.
  if (cpu_has_features("avx512f"))
    EXPECT_GT(pre_padded, 0) << "the sweep no longer reaches a problem oneDNN serves only unpadded";
}
