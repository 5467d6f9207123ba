// Elementwise integer/bool kernels and casts against the reference; fused_elementwise's
// program parser and its cpu kernel against the reference interpreter.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "core/error.h"
#include "ir/elementwise_program.h"
#include "kernel_test_util.h"

using namespace updraft;
using namespace updraft::testing;

namespace {

TEST(ElementwiseInt, ArithmeticAndComparesMatchRef) {
  for (DType dt : {DType::i64, DType::i32}) {
    for (auto [sa, sb] : std::vector<std::pair<std::vector<int64_t>, std::vector<int64_t>>>{
             {{100003}, {100003}}, {{7, 33}, {33}}, {{7, 33}, {7, 1}}, {{7, 33}, {}}, {{0}, {1}}, {{1}, {1}}}) {
      Tensor a = random_tensor(dt, sa, 1, -50, 50);
      Tensor b = random_tensor(dt, sb, 2, -50, 50);
      for (const char* op : {"add", "sub", "mul", "maximum", "minimum", "eq", "ne", "lt", "le", "gt", "ge",
                             "bitwise_and", "bitwise_or"})
        EXPECT_TRUE(cpu_matches_ref(op, {a.view(), b.view()}, {}, kExact, kExact)) << op << " " << dtype_name(dt);
      for (const char* op : {"neg", "abs", "relu", "sign", "logical_not"})
        EXPECT_TRUE(cpu_matches_ref(op, {a.view()}, {}, kExact, kExact)) << op;
      // Divisors of both signs (no zero): rounding toward -inf on every sign combination.
      Tensor nz = random_tensor(dt, sb, 3, 1, 9), neg = random_tensor(dt, sb, 4, -9, -1);
      for (const char* op : {"floor_divide", "remainder"}) {
        EXPECT_TRUE(cpu_matches_ref(op, {a.view(), nz.view()}, {}, kExact, kExact)) << op;
        EXPECT_TRUE(cpu_matches_ref(op, {a.view(), neg.view()}, {}, kExact, kExact)) << op;
      }
      // Reference-only on cpu (declined by the fast path): still correct through the fallback.
      EXPECT_TRUE(cpu_matches_ref("clamp", {a.view()}, {{"min", -10.0}, {"max", 20.0}}, kExact, kExact, Fast::may_fall_back));
    }
  }
}

TEST(ElementwiseInt, IntegerSemantics) {
  Tensor a(DType::i64, {4}), b(DType::i64, {4});
  int64_t av[] = {-7, 7, -7, INT64_MAX}, bv[] = {2, -2, -2, 1};
  std::copy(av, av + 4, a.ptr<int64_t>());
  std::copy(bv, bv + 4, b.ptr<int64_t>());
  auto fd = build("floor_divide", {a.view(), b.view()});
  auto r = run_node(*fd->node, {a.view(), b.view()}, Device::cpu);
  EXPECT_EQ(std::vector<int64_t>(r[0].ptr<int64_t>(), r[0].ptr<int64_t>() + 4),
            (std::vector<int64_t>{-4, -4, 3, INT64_MAX}));
  auto add = build("add", {a.view(), b.view()});
  EXPECT_EQ(run_node(*add->node, {a.view(), b.view()}, Device::cpu)[0].ptr<int64_t>()[3], INT64_MIN);  // wraps
  // INT64_MIN / -1 and % -1 wrap / give 0 (no overflow trap), as PyTorch's.
  a.ptr<int64_t>()[2] = INT64_MIN;
  b.ptr<int64_t>()[2] = -1;
  auto rm = build("remainder", {a.view(), b.view()});
  EXPECT_TRUE(cpu_matches_ref("floor_divide", {a.view(), b.view()}, {}, kExact, kExact));
  EXPECT_TRUE(cpu_matches_ref("remainder", {a.view(), b.view()}, {}, kExact, kExact));
  EXPECT_EQ(run_node(*fd->node, {a.view(), b.view()}, Device::cpu)[0].ptr<int64_t>()[2], INT64_MIN);
  b.ptr<int64_t>()[0] = 0;
  for (Device d : {Device::ref, Device::cpu})
    for (auto* n : {fd.get(), rm.get()}) {
      try {
        run_node(*n->node, {a.view(), b.view()}, d);
        ADD_FAILURE() << "division by zero must throw";
      } catch (const Error& e) {
        EXPECT_EQ(e.component(), n->node->op_name());
        EXPECT_NE(std::string(e.what()).find("division by zero"), std::string::npos);
      }
    }
  // A zero in a broadcast divisor is found too, with 2 threads and a large dividend.
  Tensor big = random_tensor(DType::i32, {300, 400}, 6, -1000, 1000), row = random_tensor(DType::i32, {400}, 7, 1, 9);
  row.ptr<int32_t>()[399] = 0;
  auto fb = build("floor_divide", {big.view(), row.view()});
  EXPECT_THROW(run_node(*fb->node, {big.view(), row.view()}, Device::cpu, nullptr, 2), Error);
}

TEST(ElementwiseInt, BoolLogicAndWhere) {
  Tensor p = random_tensor(DType::boolean, {9, 33}, 4);
  Tensor q = random_tensor(DType::boolean, {33}, 5);
  for (const char* op : {"logical_and", "logical_or", "bitwise_and", "eq", "ne"})
    EXPECT_TRUE(cpu_matches_ref(op, {p.view(), q.view()}, {}, kExact, kExact)) << op;
  EXPECT_TRUE(cpu_matches_ref("logical_not", {p.view()}, {}, kExact, kExact));
  for (DType dt : {DType::i64, DType::i32, DType::boolean, DType::f64}) {
    Tensor a = random_tensor(dt, {9, 1}, 6, -9, 9);
    Tensor b = random_tensor(dt, {33}, 7, -9, 9);
    EXPECT_TRUE(cpu_matches_ref("where", {p.view(), a.view(), b.view()}, {}, kExact, kExact)) << dtype_name(dt);
  }
  auto [pt, store] = transposed_copy(p);
  Tensor a = random_tensor(DType::i64, {9, 33}, 8, -9, 9);
  EXPECT_TRUE(cpu_matches_ref("where", {pt, a.view(), a.view()}, {}, kExact, kExact));
}

TEST(ElementwiseInt, CastMatrix) {
  const std::vector<DType> dts = {DType::f32, DType::f64, DType::i64, DType::i32, DType::boolean};
  for (DType from : dts) {
    Tensor x = random_tensor(from, {7, 33}, 9, -100, 100);
    if (from == DType::f32) x.ptr<float>()[0] = -2.7f;  // truncates toward zero: -2
    auto [xt, store] = transposed_copy(x);
    for (DType to : dts) {
      Attrs at = {{"dtype", std::string(dtype_name(to))}};
      EXPECT_TRUE(cpu_matches_ref("cast", {x.view()}, at, kExact, kExact)) << dtype_name(from) << "->" << dtype_name(to);
      EXPECT_TRUE(cpu_matches_ref("cast", {xt}, at, kExact, kExact)) << "strided " << dtype_name(from);
    }
  }
  Tensor big = random_tensor(DType::f32, {70001}, 10, -1e6, 1e6);
  EXPECT_TRUE(cpu_matches_ref("cast", {big.view()}, {{"dtype", "i32"}}, kExact, kExact));
}

// The compact storage forms a weight comes in (i8, u8, bf16) widen to every target, on the fast
// kernel as on the reference, with the exact values: i8 and u8 over their whole range, bf16 as the
// f32 its bits shift into (a bf16 value is an f32 with the low 16 bits zero).
TEST(ElementwiseInt, CastFromCompactWeightForms) {
  const std::vector<DType> targets = {DType::f32, DType::f64, DType::i64, DType::i32, DType::boolean};
  Tensor i8 = random_tensor(DType::i8, {7, 37}, 11, -128, 128), u8 = random_tensor(DType::u8, {7, 37}, 12, 0, 256);
  Tensor bf(DType::bf16, {7, 37});
  Tensor f = random_tensor(DType::f32, {7, 37}, 13, -300, 300);
  for (int64_t i = 0; i < f.numel(); ++i) bf.ptr<uint16_t>()[i] = static_cast<uint16_t>(
      [](float v) { uint32_t u; std::memcpy(&u, &v, 4); return u >> 16; }(f.ptr<float>()[i]));
  for (Tensor* x : {&i8, &u8, &bf}) {
    auto [xt, store] = transposed_copy(*x);
    for (DType to : targets) {
      Attrs at = {{"dtype", std::string(dtype_name(to))}};
      EXPECT_TRUE(cpu_matches_ref("cast", {x->view()}, at, kExact, kExact)) << dtype_name(x->dtype()) << "->" << dtype_name(to);
      EXPECT_TRUE(cpu_matches_ref("cast", {xt}, at, kExact, kExact)) << "strided " << dtype_name(x->dtype());
    }
  }
  auto widen = [](const Tensor& x) {
    auto one = build("cast", {x.view()}, {{"dtype", "f32"}});
    return run_node(*one->node, {x.view()}, Device::cpu)[0];
  };
  Tensor a = widen(i8), b = widen(u8), c = widen(bf);
  for (int64_t i = 0; i < i8.numel(); ++i) {
    EXPECT_EQ(a.ptr<float>()[i], static_cast<float>(i8.ptr<int8_t>()[i]));
    EXPECT_EQ(b.ptr<float>()[i], static_cast<float>(u8.ptr<uint8_t>()[i]));
    uint32_t bits = static_cast<uint32_t>(bf.ptr<uint16_t>()[i]) << 16;
    float want;
    std::memcpy(&want, &bits, 4);
    EXPECT_EQ(c.ptr<float>()[i], want);
  }
}

// NaN, +-inf and values out of the target's range cast to the type's minimum, as PyTorch does on
// x86 (both kernels wrote 0): f32 and f64 to i64 and i32, in the vector body and the tail.
TEST(ElementwiseInt, CastOfNanAndOutOfRangeGivesTheMinimum) {
  const std::vector<double> vals = {NAN, INFINITY, -INFINITY, 3e38, -3e38, 1e10, -1e10, 3e9, -2.2e9, -1.5, 300.7};
  const std::vector<bool> in_i32 = {false, false, false, false, false, false, false, false, false, true, true};
  const std::vector<bool> in_i64 = {false, false, false, false, false, true, true, true, true, true, true};
  for (DType from : {DType::f32, DType::f64}) {
    const int64_t n = 3 * static_cast<int64_t>(vals.size());  // 33: vector body and tail
    Tensor x(from, {n});
    for (int64_t i = 0; i < n; ++i) {
      const double v = vals[static_cast<size_t>(i) % vals.size()];
      if (from == DType::f32) x.ptr<float>()[i] = static_cast<float>(v);
      else x.ptr<double>()[i] = v;
    }
    for (DType to : {DType::i64, DType::i32}) {
      SCOPED_TRACE(std::string(dtype_name(from)) + "->" + dtype_name(to));
      auto one = build("cast", {x.view()}, {{"dtype", std::string(dtype_name(to))}});
      for (Device d : {Device::cpu, Device::ref}) {
        Tensor y = run_node(*one->node, {x.view()}, d)[0];
        for (int64_t i = 0; i < n; ++i) {
          const size_t k = static_cast<size_t>(i) % vals.size();
          const bool fits = to == DType::i32 ? in_i32[k] : in_i64[k];
          const int64_t got = to == DType::i32 ? y.ptr<int32_t>()[i] : y.ptr<int64_t>()[i];
          const int64_t want = fits ? static_cast<int64_t>(vals[k])
                                    : (to == DType::i32 ? int64_t{INT32_MIN} : std::numeric_limits<int64_t>::min());
          EXPECT_EQ(got, want) << device_name(d) << " value " << vals[k];
        }
      }
    }
  }
}

TEST(ElementwiseProgram, ParsesAndRoundTrips) {
  std::string text = "f32: mul $0 #0.5; add %0 $1; clamp %1 #-inf #6; where $2 %2 #0";
  EwProgram p = parse_ew_program(text, "test");
  ASSERT_EQ(p.instrs.size(), 4u);
  EXPECT_EQ(p.num_inputs(), 3);
  EXPECT_EQ(p.instrs[2].op, EwOp::clamp);
  EXPECT_TRUE(std::isinf(p.instrs[2].args[1].imm));
  EXPECT_EQ(parse_ew_program(p.str(), "test").str(), p.str());
  EXPECT_EQ(parse_ew_program("bool:gt $0  #1", "test").out_dtype, DType::boolean);
  EXPECT_EQ(parse_ew_program("f32: mul $0 #0.1", "t").instrs[0].args[1].imm, 0.1);  // exact round trip
  EXPECT_THROW(parse_ew_program("f32: add $0", "t"), Error);           // arity
  EXPECT_THROW(parse_ew_program("i64: neg $0", "t"), Error);           // output dtype
  EXPECT_THROW(parse_ew_program("f32: neg $0;", "t"), Error);          // empty instruction
  EXPECT_THROW(parse_ew_program("f32: bitwise_and $0 $1", "t"), Error);  // not a program op
  EXPECT_THROW(parse_ew_program("f32: neg x", "t"), Error);
}

TEST(ElementwiseProgram, LiveValueCount) {
  EXPECT_EQ(ew_program_max_live(parse_ew_program("f32: neg $0; neg %0; neg %1", "t")), 2);
  EXPECT_EQ(ew_program_max_live(parse_ew_program("f32: neg $0; exp $0; add %0 %1", "t")), 3);
}

TEST(ElementwiseFusedKernel, MatchesRefWithBroadcastAndBoolInputs) {
  // silu(a * 0.5 + b) where c else clamp(a, -1, 1), and a compare output.
  std::string prog = "f32: mul $0 #0.5; add %0 $1; silu %1; clamp $0 #-1 #1; where $2 %2 %3; tanh %4; mul %5 %5";
  for (auto shapes : std::vector<std::vector<std::vector<int64_t>>>{
           {{1000003}, {1000003}, {1000003}}, {{7, 33}, {33}, {7, 1}}, {{5, 3, 9}, {}, {5, 1, 9}},
           {{1}, {1}, {1}}, {{0, 4}, {4}, {4}}, {{300, 257}, {300, 1}, {257}}}) {
    Tensor a = random_tensor(DType::f32, shapes[0], 1, -4, 4);
    Tensor b = random_tensor(DType::f32, shapes[1], 2, -4, 4);
    Tensor c = random_tensor(DType::boolean, shapes[2], 3);
    EXPECT_TRUE(cpu_matches_ref("fused_elementwise", {a.view(), b.view(), c.view()}, {{"program", prog}}, kF32Rtol, kF32Atol));
    EXPECT_TRUE(cpu_matches_ref("fused_elementwise", {a.view(), b.view()}, {{"program", "bool: sub $0 $1; gt %0 #0.25"}},
                                kExact, kExact));
  }
  Tensor a = random_tensor(DType::f32, {33, 17}, 4);
  auto [at, store] = transposed_copy(a);
  EXPECT_TRUE(cpu_matches_ref("fused_elementwise", {at, a.view()}, {{"program", "f32: exp $0; pow %0 #2; div %1 $1"}},
                              kF32Rtol, kF32Atol));
}

// An output sharing input 0's buffer (the planner's in-place reuse) gives the same result.
TEST(ElementwiseFusedKernel, OutputMayAliasInputZero) {
  Tensor a = random_tensor(DType::f32, {70001}, 5);
  Tensor b = random_tensor(DType::f32, {70001}, 6);
  auto one = build("fused_elementwise", {a.view(), b.view()}, {{"program", "f32: mul $0 $1; tanh %0; add %1 $0"}});
  Tensor want = run_node(*one->node, {a.view(), b.view()}, Device::ref)[0];
  KernelContext ctx{*one->node, {a.shape(), b.shape()}, {a.shape()}, {nullptr, nullptr}, 0};
  auto k = KernelRegistry::get().create(ctx, Device::cpu);
  EXPECT_EQ(k->name(), "cpu_fused_elementwise_f32_avx2");
  TensorView in[2] = {a.view(), b.view()};
  TensorView out = a.view();
  k->run(in, &out, nullptr);
  EXPECT_TRUE(all_close(a, want, kF32Rtol, kF32Atol));
}

}  // namespace
