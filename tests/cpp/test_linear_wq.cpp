// Low-precision weights (docs/quantization.md): the number formats (quantize_rows,
// quantize_int4, to_bf16),
// the fast linear_wq kernels against the reference one (rows of x for decode and prefill, K
// and N with tails, epilogues, 1 and 2 threads, each instruction set this CPU has), the
// quantize_weights pass (which linears it rewrites, which it leaves) and the text IR of the ops.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "ir/text.h"
#include "kernel_test_util.h"
#include "kernels/quantize.h"
#include "pass_test_util.h"
#include "passes/dce.h"
#include "passes/quantize_weights.h"

using namespace updraft;
using namespace updraft::testing;

namespace {

// A random f32 weight [N, K] rounded to bf16.
Tensor bf16_weight(int64_t N, int64_t K, uint32_t seed) {
  Tensor w = random_tensor(DType::f32, {N, K}, seed);
  Tensor b(DType::bf16, {N, K});
  for (int64_t i = 0; i < N * K; ++i) b.ptr<uint16_t>()[i] = f32_to_bf16(w.ptr<float>()[i]);
  return b;
}

// f32 sums of K products of magnitude <= ~4 against the reference's double sums: the error
// grows like K * 2^-24 * 4 (< 1e-4 at K = 300); 1e-3 absolute leaves room and still fails on
// any wrong element (errors of order 1).
constexpr double kRtol = 1e-4, kAtol = 1e-3;

}  // namespace

TEST(QuantizeRows, SymmetricPerRowScaleAndRounding) {
  // Row 0: max 2.54 -> scale 0.02; 0.03 / 0.02 = 1.5 rounds to even (2), -0.05 -> -2.5 -> -2.
  // Row 1: zeros -> scale 0, q 0. Row 2: inf saturates, NaN gives 0, the scale from the finite 1.27.
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  float rows[3][4] = {{2.54f, -2.54f, 0.03f, -0.05f}, {0, 0, 0, 0}, {1.27f, inf, -inf, nan}};
  int8_t q[4];
  float s = quantize_row_int8(rows[0], 4, q);
  EXPECT_FLOAT_EQ(s, 2.54f / 127.0f);
  EXPECT_EQ(q[0], 127);
  EXPECT_EQ(q[1], -127);
  EXPECT_EQ(q[2], 2);
  EXPECT_EQ(q[3], -2);
  EXPECT_EQ(quantize_row_int8(rows[1], 4, q), 0.0f);
  EXPECT_EQ(q[0], 0);
  EXPECT_FLOAT_EQ(quantize_row_int8(rows[2], 4, q), 0.01f);
  EXPECT_EQ(q[0], 127);
  EXPECT_EQ(q[1], 127);
  EXPECT_EQ(q[2], -127);
  EXPECT_EQ(q[3], 0);
}

TEST(QuantizeRows, OpMatchesTheFormatOnEveryRow) {
  Tensor w = random_tensor(DType::f32, {3, 5, 70}, 4);
  OneNode n("quantize_rows", {input(w)});
  auto outs = run_kernel_outputs(*make_kernel_for(n, Device::ref), n);
  ASSERT_EQ(outs[0].shape(), (std::vector<int64_t>{3, 5, 70}));
  ASSERT_EQ(outs[1].shape(), (std::vector<int64_t>{3, 5}));
  for (int64_t r = 0; r < 15; ++r) {
    int8_t q[70];
    float s = quantize_row_int8(w.ptr<float>() + r * 70, 70, q);
    EXPECT_EQ(outs[1].ptr<float>()[r], s);
    for (int k = 0; k < 70; ++k) ASSERT_EQ(outs[0].ptr<int8_t>()[r * 70 + k], q[k]) << r << "," << k;
  }
}

TEST(QuantizeInt4, SymmetricPerGroupScaleRoundingAndPacking) {
  // Block 0, group 0: max 1.75 -> scale 0.25 (exact in bf16); 0.375 / 0.25 = 1.5 rounds to even
  // (2), -0.625 -> -2.5 -> -2, 1.75 -> 7, -1.75 -> -7, the rest 0. Group 1: inf saturates to 7,
  // NaN gives 0, the scale from the finite 0.875 (0.125). Block 1: zeros -> scales 0, every
  // nibble 8 (q 0). Block 2: max 0.7 -> scale bf16(0.1), and q divides by that rounded scale.
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  float b[3][kInt4Block] = {};
  b[0][0] = 0.375f, b[0][1] = -0.625f, b[0][16] = 1.75f, b[0][31] = -1.75f;
  b[0][32] = 0.875f, b[0][37] = inf, b[0][38] = -inf, b[0][52] = nan;
  uint8_t q[kInt4Group];
  uint16_t s[2];
  quantize_block_int4(b[0], q, s);
  EXPECT_EQ(bf16_to_f32(s[0]), 0.25f);
  EXPECT_EQ(bf16_to_f32(s[1]), 0.125f);
  EXPECT_EQ(int4_at(q, 0), 2);
  EXPECT_EQ(int4_at(q, 1), -2);
  EXPECT_EQ(int4_at(q, 16), 7);
  EXPECT_EQ(int4_at(q, 31), -7);
  EXPECT_EQ(int4_at(q, 2), 0);
  EXPECT_EQ(int4_at(q, 32), 7);
  EXPECT_EQ(int4_at(q, 37), 7);
  EXPECT_EQ(int4_at(q, 38), -7);
  EXPECT_EQ(int4_at(q, 52), 0);
  // Byte 0 holds element 0 (low nibble: 2 + 8) and element 32 (high nibble: 7 + 8); byte 31
  // element 31 (-7 -> 1) and element 63 (0 -> 8).
  EXPECT_EQ(q[0], 0xFA);
  EXPECT_EQ(q[31], (8 << 4) | 1);
  quantize_block_int4(b[1], q, s);
  EXPECT_EQ(s[0], 0);
  EXPECT_EQ(s[1], 0);
  for (int i = 0; i < kInt4Group; ++i) EXPECT_EQ(q[i], 0x88);
  // bf16(0.1) = 0.10009765625: 0.6505 / it = 6.4987 -> 6, where the f32 scale 0.1 would give
  // 6.505 -> 7.
  b[2][0] = 0.7f, b[2][1] = 0.6505f;
  quantize_block_int4(b[2], q, s);
  EXPECT_EQ(s[0], f32_to_bf16(0.7f / 7.0f));
  EXPECT_EQ(int4_at(q, 0), 7);
  EXPECT_EQ(int4_at(q, 1), 6);
}

TEST(QuantizeInt4, OpMatchesTheFormatOnEveryBlock) {
  Tensor w = random_tensor(DType::f32, {3, 5, 192}, 4);
  OneNode n("quantize_int4", {input(w)});
  auto outs = run_kernel_outputs(*make_kernel_for(n, Device::ref), n);
  ASSERT_EQ(outs[0].shape(), (std::vector<int64_t>{3, 5, 96}));
  ASSERT_EQ(outs[0].dtype(), DType::u8);
  ASSERT_EQ(outs[1].shape(), (std::vector<int64_t>{3, 5, 6}));
  ASSERT_EQ(outs[1].dtype(), DType::bf16);
  for (int64_t r = 0; r < 15; ++r)
    for (int64_t b = 0; b < 3; ++b) {
      uint8_t q[kInt4Group];
      uint16_t s[2];
      quantize_block_int4(w.ptr<float>() + r * 192 + b * kInt4Block, q, s);
      EXPECT_EQ(outs[1].ptr<uint16_t>()[r * 6 + 2 * b], s[0]);
      EXPECT_EQ(outs[1].ptr<uint16_t>()[r * 6 + 2 * b + 1], s[1]);
      for (int i = 0; i < kInt4Group; ++i) ASSERT_EQ(outs[0].ptr<uint8_t>()[r * 96 + b * 32 + i], q[i]) << r << "," << b;
    }
  // K not a multiple of the block (96: three groups): refused by the shape function.
  EXPECT_TRUE(OpTable::get().check("quantize_int4", {{DType::f32, {Dim(4), Dim(96)}}}, {}).has_value());
}

TEST(ToBf16, RoundsToNearestEvenAndKeepsNan) {
  EXPECT_EQ(f32_to_bf16(1.0f), 0x3f80);
  // 1 + 2^-8 is halfway between bf16 1.0 and 1.0078125: ties to even (1.0).
  EXPECT_EQ(f32_to_bf16(1.00390625f), 0x3f80);
  // 1.0078125 + 2^-8 is halfway again: even is 1.015625 (0x3f82).
  EXPECT_EQ(f32_to_bf16(1.01171875f), 0x3f82);
  EXPECT_EQ(f32_to_bf16(-2.0f), 0xc000);
  EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(std::numeric_limits<float>::quiet_NaN()))));
  EXPECT_EQ(bf16_to_f32(f32_to_bf16(std::numeric_limits<float>::infinity())), std::numeric_limits<float>::infinity());
}

// Fast vs reference: rows of x for decode (1, 2, 4, 7) and prefill (17, 32, 36, 65; the
// broadcast tiles, with a last block's 1 or 4 rows on dot tiles), K and N off every tile width (N = 203: enough rows per thread for the tiles' chunks,
// with rows left over; K = 1100: the broadcast tiles' second k slice over a widened strip),
// with and without bias, a residual and an activation, 1 and 2 threads, each instruction set
// this CPU runs.
TEST(LinearWq, FastMatchesReference) {
  std::vector<CpuIsa> isas = {CpuIsa::avx2};
  if (__builtin_cpu_supports("avx512f")) isas.push_back(CpuIsa::native);
  for (CpuIsa isa : isas)
    for (bool int8 : {true, false})
      for (int64_t M : {1, 2, 4, 7, 17, 32, 36, 65})
        for (auto [N, K] : std::vector<std::pair<int64_t, int64_t>>{{19, 37}, {40, 300}, {203, 72}, {21, 1100}})
          for (int epi = 0; epi < 3; ++epi)
            for (int threads : {1, 2}) {
              SCOPED_TRACE(std::string(cpu_isa_name(isa)) + (int8 ? " i8" : " bf16") + " M=" + std::to_string(M) +
                           " N=" + std::to_string(N) + " K=" + std::to_string(K) + " epi=" + std::to_string(epi) +
                           " threads=" + std::to_string(threads));
              std::vector<Arg> args = {input(random_tensor(DType::f32, {M, K}, 1))};
              Attrs attrs;
              if (int8) {
                auto [q, s] = int8_weight(N, K, 2);
                args.push_back(constant(q));
                args.push_back(constant(s));
                attrs["has_weight_scale"] = Attr(true);
              } else {
                args.push_back(constant(bf16_weight(N, K, 2)));
              }
              add_linear_epilogue(args, attrs, epi, M, N);
              OneNode n("linear_wq", std::move(args), attrs);
              auto fast = make_kernel_for(n, Device::cpu, threads, isa_options(isa));
              auto ref = make_kernel_for(n, Device::ref);
              ASSERT_TRUE(fast && ref);
              EXPECT_NE(fast->name().find(isa == CpuIsa::avx2 ? "avx2" : "avx512"), std::string::npos) << fast->name();
              EXPECT_TRUE(all_close(run_kernel(*fast, n), run_kernel(*ref, n), kRtol, kAtol));
            }
}

// The same for int4 weights, with f32 x and with int8 x (quantize_x): K a multiple of the block
// (N = 203 for the chunked decode tiles, K = 1152: the broadcast tiles' second k slice), every
// tile width of both ISAs (and VNNI's int4 tiles where the CPU has them).
TEST(LinearWq, Int4FastMatchesReference) {
  std::vector<CpuIsa> isas = {CpuIsa::avx2};
  if (__builtin_cpu_supports("avx512f")) isas.push_back(CpuIsa::native);
  for (CpuIsa isa : isas)
    for (bool qx : {false, true})
      for (int64_t M : {1, 2, 3, 4, 7, 17, 36})
        for (auto [N, K] : std::vector<std::pair<int64_t, int64_t>>{{19, 64}, {40, 320}, {203, 128}, {21, 1152}})
          for (int epi = 0; epi < 3; ++epi)
            for (int threads : {1, 2}) {
              SCOPED_TRACE(std::string(cpu_isa_name(isa)) + (qx ? " int8 x" : " f32 x") + " M=" + std::to_string(M) +
                           " N=" + std::to_string(N) + " K=" + std::to_string(K) + " epi=" + std::to_string(epi) +
                           " threads=" + std::to_string(threads));
              auto [q, s] = int4_weight(N, K, 2);
              std::vector<Arg> args = {input(random_tensor(DType::f32, {M, K}, 1)), constant(q), constant(s)};
              Attrs attrs{{"has_weight_scale", Attr(true)}, {"quantize_x", Attr(qx)}};
              add_linear_epilogue(args, attrs, epi, M, N);
              OneNode n("linear_wq", std::move(args), attrs);
              auto fast = make_kernel_for(n, Device::cpu, threads, isa_options(isa));
              auto ref = make_kernel_for(n, Device::ref);
              ASSERT_TRUE(fast && ref);
              const std::string want = qx ? "i4i8_" : std::string("i4_") + (isa == CpuIsa::avx2 ? "avx2" : "avx512");
              EXPECT_NE(fast->name().find(want), std::string::npos) << fast->name();
              EXPECT_TRUE(all_close(run_kernel(*fast, n), run_kernel(*ref, n), kRtol, kAtol));
            }
}

// One kernel serves every M of a compile (decode and prefill share it).
TEST(LinearWq, OneKernelRunsEveryRowCount) {
  auto [q, s] = int8_weight(24, 64, 2);
  OneNode n("linear_wq", {input(random_tensor(DType::f32, {1, 64}, 1)), constant(q), constant(s)},
            {{"has_weight_scale", Attr(true)}});
  auto fast = make_kernel_for(n, Device::cpu);
  ASSERT_TRUE(fast);
  for (int64_t M : {3, 40}) {
    OneNode other("linear_wq", {input(random_tensor(DType::f32, {M, 64}, 5)), constant(q), constant(s)},
                  {{"has_weight_scale", Attr(true)}});
    EXPECT_TRUE(fast->runs_shapes_of(other.context()));
    auto ref = make_kernel_for(other, Device::ref);
    EXPECT_TRUE(all_close(run_kernel(*fast, other), run_kernel(*ref, other), kRtol, kAtol)) << "M=" << M;
  }
}

TEST(LinearWq, ShapeFunctionRefusesMismatches) {
  auto fails = [](std::vector<TensorType> in, Attrs attrs) {
    return OpTable::get().check("linear_wq", in, attrs).has_value();
  };
  const TensorType x{DType::f32, {Dim(2), Dim(8)}}, wq{DType::i8, {Dim(4), Dim(8)}}, s{DType::f32, {Dim(4)}};
  EXPECT_FALSE(fails({x, wq, s}, {{"has_weight_scale", Attr(true)}}));
  EXPECT_TRUE(fails({x, wq}, {}));                                                  // i8 without its scale
  EXPECT_TRUE(fails({x, {DType::f32, {Dim(4), Dim(8)}}}, {}));                      // f32 weight
  EXPECT_TRUE(fails({x, {DType::bf16, {Dim(4), Dim(9)}}}, {}));                     // K differs
  EXPECT_TRUE(fails({x, wq, {DType::f32, {Dim(3)}}}, {{"has_weight_scale", Attr(true)}}));  // scale size
  EXPECT_FALSE(fails({x, {DType::bf16, {Dim(4), Dim(8)}}, s}, {{"has_bias", Attr(true)}}));
  // int4: w u8 [N, K / 2], scale bf16 [N, K / 32].
  const TensorType x64{DType::f32, {Dim(2), Dim(64)}}, w4{DType::u8, {Dim(4), Dim(32)}}, s4{DType::bf16, {Dim(4), Dim(2)}};
  const Attrs scaled{{"has_weight_scale", Attr(true)}};
  EXPECT_FALSE(fails({x64, w4, s4}, scaled));
  EXPECT_TRUE(fails({x64, w4}, {}));                                           // without its scales
  EXPECT_TRUE(fails({x64, w4, s}, scaled));                                    // a per-row scale
  EXPECT_TRUE(fails({x64, w4, {DType::f32, {Dim(4), Dim(2)}}}, scaled));       // f32 group scales
  EXPECT_TRUE(fails({x64, {DType::u8, {Dim(4), Dim(64)}}, s4}, scaled));       // K / 2 differs
  EXPECT_TRUE(fails({{DType::f32, {Dim(2), Dim(96)}}, {DType::u8, {Dim(4), Dim(48)}}, {DType::bf16, {Dim(4), Dim(3)}}},
                    scaled));                                                  // K not a multiple of 64
  EXPECT_FALSE(fails({x64, w4, s4}, {{"has_weight_scale", Attr(true)}, {"quantize_x", Attr(true)}}));
  EXPECT_TRUE(fails({x, {DType::bf16, {Dim(4), Dim(8)}}}, {{"quantize_x", Attr(true)}}));  // int8 x needs integer w
}

// ---- the pass ------------------------------------------------------------------------------

namespace {

bool quantize_int8(Graph& g) { return quantize_weights(g, WeightDType::int8); }
bool quantize_bf16(Graph& g) { return quantize_weights(g, WeightDType::bf16); }
bool quantize_int4(Graph& g) { return quantize_weights(g, WeightDType::int4); }

// Linears over a 300 x 256 weight (76800 elements, above the 64K rule; one shared by two
// linears), a 64 x 256 one (below it), a matmul with a constant right operand and a linear
// whose weight is an input: only the large constant linears become linear_wq.
const char* kGraph = R"(graph(%x: f32[3, 256], %wi: f32[16, 256]) {
  %w = constant f32[300, 256] random(seed=1)
  %b = constant f32[300] random(seed=2)
  %small = constant f32[64, 256] random(seed=3)
  %m = constant f32[256, 300] random(seed=4)
  %0 = linear(%x, %w, %b) {has_bias=true, activation="relu"}
  %1 = linear(%x, %w)
  %2 = linear(%x, %small)
  %3 = matmul(%x, %m)
  %4 = linear(%x, %wi)
  return (%0, %1, %2, %3, %4)
})";

}  // namespace

TEST(PassQuantizeWeights, RewritesLargeConstantLinearsOnly) {
  // int8 error: each weight moves by at most scale/2 = max|w|/254 (max|w| ~2 here), so a sum
  // of 256 products with |x| <= 2 moves by at most ~2 * 256 * 0.008 = 4 in the worst case and
  // ~0.15 typically (random signs); 0.5 absolute on outputs of magnitude ~20.
  auto g = check_pass(kGraph, quantize_int8, Changed::yes, {}, 0.05, 0.5);
  dce(*g);
  EXPECT_EQ(ops_of(*g), "linear_wq linear_wq linear matmul linear");
  std::vector<Node*> nodes = g->nodes();
  // Both linears over %w read one converted copy; the epilogue stays on the first.
  EXPECT_EQ(nodes[0]->input(1), nodes[1]->input(1));
  EXPECT_EQ(nodes[0]->input(1)->type.dtype, DType::i8);
  EXPECT_EQ(nodes[0]->input(2)->type.str(), "f32[300]");
  EXPECT_EQ(nodes[0]->attr("activation").s(), "relu");
  EXPECT_TRUE(nodes[0]->attr("has_bias").b());
  EXPECT_TRUE(nodes[0]->attr("has_weight_scale").b());
  // No f32 copy of %w is left in the graph; the fold is recorded for refits.
  for (const Value* c : g->constants())
    if (c->type.str() == "f32[300, 256]") {
      EXPECT_EQ(g->use_count(c), 0);
    }
  ASSERT_FALSE(g->folds().empty());
  EXPECT_EQ(g->folds().back().op, "quantize_rows");
}

TEST(PassQuantizeWeights, Bf16KeepsTheWeightWithoutScale) {
  // bf16 rounds each weight by at most 2^-9 relative: ~0.4% of a ~20 output at worst.
  auto g = check_pass(kGraph, quantize_bf16, Changed::yes, {}, 0.01, 0.1);
  Node* first = g->nodes().front();
  ASSERT_EQ(first->op_name(), "linear_wq");
  EXPECT_EQ(first->input(1)->type.dtype, DType::bf16);
  EXPECT_FALSE(first->attr("has_weight_scale").b());
}

TEST(PassQuantizeWeights, Int4GroupsAndInt8WhereKIsNotAMultipleOf64) {
  // int4 error: each weight moves by at most its group's scale/2 = max|g|/14 (~0.14 here), so
  // the ~20-magnitude outputs of 256 products move by ~1 typically (random signs): 3 absolute.
  auto g = check_pass(kGraph, quantize_int4, Changed::yes, {}, 0.2, 3.0);
  Node* first = g->nodes().front();
  ASSERT_EQ(first->op_name(), "linear_wq");
  EXPECT_EQ(first->input(1)->type.str(), "u8[300, 128]");
  EXPECT_EQ(first->input(2)->type.str(), "bf16[300, 8]");
  EXPECT_EQ(g->folds().back().op, "quantize_int4");
  // K = 300 (not a multiple of 64, the int4 block): stored int8 instead.
  auto odd = parse_graph(R"(graph(%x: f32[2, 300]) {
  %w = constant f32[256, 300] random(seed=1)
  %0 = linear(%x, %w)
  return (%0)
})");
  ASSERT_TRUE(quantize_int4(*odd));
  EXPECT_EQ(odd->nodes().back()->input(1)->type.str(), "i8[256, 300]");
}

TEST(PassQuantizeWeights, F32ChangesNothing) {
  auto g = parse_graph(kGraph);
  EXPECT_FALSE(quantize_weights(*g, WeightDType::f32));
}

// The fast kernels on the rewritten graph against the f32 graph on the reference kernels.
TEST(PassQuantizeWeights, FastKernelsAgreeWithF32Graph) {
  auto original = parse_graph(kGraph);
  auto g = parse_graph(kGraph);
  ASSERT_TRUE(quantize_int8(*g));
  auto inputs = random_inputs(*original);
  expect_same_outputs(interpret(*original, inputs, Device::ref), interpret(*g, inputs, Device::cpu), 0.05, 0.5);
}

// ---- text IR -------------------------------------------------------------------------------

TEST(TextIrLinearWq, RoundTrips) {
  const std::string text = R"(graph(%x: f32[s0, 4], %y: f32[s0, 64]) {
  %q = constant i8[2, 4] [1, -2, 127, -127, 0, 5, -6, 7]
  %s = constant f32[2] [0.5, 0.25]
  %h = constant bf16[2, 4] bits[0x3f80, 0xc000, 0x3f00, 0x0000, 0x3f80, 0x3f80, 0xbf80, 0x4000]
  %b = constant f32[2] [1.0, -1.0]
  %0 = linear_wq(%x, %q, %s, %b) {has_weight_scale=true, has_bias=true, activation="silu"}
  %1 = linear_wq(%x, %h)
  %2, %3 = quantize_rows(%x)
  %4 = to_bf16(%x)
  %q4 = constant u8[2, 32] random(seed=3)
  %s4 = constant bf16[2, 2] bits[0x3f00, 0x3e80, 0x3f80, 0x4000]
  %5 = linear_wq(%y, %q4, %s4) {has_weight_scale=true}
  %6, %7 = quantize_int4(%y)
  return (%0, %1, %2, %3, %4, %5, %6, %7)
})";
  auto g = parse_graph(text);
  std::string once = print_graph(*g);
  auto g2 = parse_graph(once);
  EXPECT_EQ(print_graph(*g2), once);
  EXPECT_NE(once.find("linear_wq"), std::string::npos);
  EXPECT_EQ(g2->outputs()[0]->type.str(), "f32[s0, 2]");
  EXPECT_EQ(g2->outputs()[2]->type.str(), "i8[s0, 4]");
  EXPECT_EQ(g2->outputs()[3]->type.str(), "f32[s0]");
  EXPECT_EQ(g2->outputs()[4]->type.str(), "bf16[s0, 4]");
  EXPECT_EQ(g2->outputs()[5]->type.str(), "f32[s0, 2]");
  EXPECT_EQ(g2->outputs()[6]->type.str(), "u8[s0, 32]");
  EXPECT_EQ(g2->outputs()[7]->type.str(), "bf16[s0, 2]");
}
