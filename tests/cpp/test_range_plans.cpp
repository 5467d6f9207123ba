// Range plans (runtime/plan.h, Plan::build_range / instantiate): a graph whose KV-cache length
// grows by one per call builds one plan per size bucket, not one per size, and every size run
// on a bucket's plan gives the reference interpreter's results; graphs that do not qualify
// build a plan per size and say why; the option turns it off.
//
// Tolerance rtol = atol = 1e-4 (f32): oneDNN's gemm and the engine's attention sum in another
// order than the reference kernels (double accumulation); a kernel reading a stale size or a
// buffer planned too small gives O(1) errors.
#include <gtest/gtest.h>

#include <thread>

#include "ir/text.h"
#include "runtime/executable.h"
#include "runtime/interpreter.h"
#include "runtime/plan.h"
#include "test_util.h"

using namespace updraft;
using updraft::testing::all_close;
using updraft::testing::random_tensor;

namespace {

constexpr double kTol = 1e-4;

// One decode step of attention with a KV cache of s0 positions: project the new token, append
// its key and value to the cache (outputs: the grown cache), attend over s0 + 1 positions.
const char* kDecode = R"(graph(%x: f32[1, 32], %k: f32[1, 2, s0, 8], %v: f32[1, 2, s0, 8]) {
  %wq = constant f32[16, 32] random(seed=1, lo=-0.3, hi=0.3)
  %wk = constant f32[16, 32] random(seed=2, lo=-0.3, hi=0.3)
  %wv = constant f32[16, 32] random(seed=3, lo=-0.3, hi=0.3)
  %wo = constant f32[32, 16] random(seed=4, lo=-0.3, hi=0.3)
  %h = add(%x, %x)
  %q = linear(%h, %wq)
  %kn = linear(%h, %wk)
  %vn = linear(%h, %wv)
  %q4 = reshape(%q) {shape=[1, 2, 1, 8]}
  %k4 = reshape(%kn) {shape=[1, 2, 1, 8]}
  %v4 = reshape(%vn) {shape=[1, 2, 1, 8]}
  %kc = concat(%k, %k4) {dim=2}
  %vc = concat(%v, %v4) {dim=2}
  %a = sdpa(%q4, %kc, %vc)
  %a2 = reshape(%a) {shape=[1, 16]}
  %o = linear(%a2, %wo)
  return (%kc, %vc, %o)
})";

// A linear straight on a graph input with a symbolic batch keeps a shape-specific primitive
// (test_kernel_reuse.cpp): a moving kernel built for one size, so no range plans.
const char* kStaticKernel = R"(graph(%x: f32[s0, 32]) {
  %w = constant f32[16, 32] random(seed=5, lo=-0.3, hi=0.3)
  %y = linear(%x, %w)
  return (%y)
})";

// A batched decode step's attention mask: a [1, 1, 1, s0] row broadcast to the batch by an
// expand whose target shape holds s0 (a symbolic attribute). The expand kernel reads its sizes
// from the views, so the graph still takes range plans.
const char* kSymbolicExpand = R"(graph(%m: f32[1, 1, 1, s0], %s: f32[2, 4, 1, s0]) {
  %e = expand(%m) {shape=[2, 1, 1, s0]}
  %f = mul(%e, %e)
  %y = add(%s, %f)
  return (%f, %y)
})";

// A fixed table sliced at a size-dependent row (a position table read at the current length):
// the slice kernel evaluates its start and end per call from the plan's binding
// (call_bindings), so the graph keeps range plans.
const char* kSymbolicSlice = R"(graph(%x: f32[s0, 8]) {
  %pe = constant f32[64, 8] random(seed=6, lo=-1, hi=1)
  %r = sum(%x) {dims=[0], keepdim=true}
  %q = slice(%pe) {dim=0, start=s0, end=(s0+1)}
  %y = add(%r, %q)
  return (%y)
})";

// Tables cut by a size: to the length (static start, symbolic end) and from a size-dependent
// row to the table's end (MPT's ALiBi bias sliced by the key length), at end=64 and at the
// INT64_MAX that `x[s:]` lowers to. The reshapes give the slices the sizes the lowering takes
// from torch (lowering_shape.py, _slice).
const char* kSlicesFromViews = R"(graph(%x: f32[s0, 8]) {
  %pe = constant f32[64, 8] random(seed=6, lo=-1, hi=1)
  %a0 = slice(%pe) {dim=0, start=0, end=s0}
  %b0 = slice(%pe) {dim=0, start=(64-s0), end=64}
  %c0 = slice(%pe) {dim=0, start=(64-s0), end=9223372036854775807}
  %a = reshape(%a0) {shape=[s0, 8]}
  %b = reshape(%b0) {shape=[s0, 8]}
  %c = reshape(%c0) {shape=[s0, 8]}
  %y = add(%x, %a)
  %z = sub(%b, %c)
  %w = add(%y, %b)
  return (%w, %z)
})";

// A decode step's attention written as matmuls (MPT, or any model that does not call sdpa):
// q k^T with k read transposed, a softmax, p v, over a cache of s0 positions; q's rows (2) and
// the key/value batch dim broadcast against q's (1 -> 2). cpu/matmul_rows.cpp runs both matmuls
// for every s0 from the views, where oneDNN's primitives are built for one size.
const char* kMatmulAttention = R"(graph(%q: f32[2, 4, 2, 16], %k: f32[1, 4, s0, 16], %v: f32[1, 4, s0, 16]) {
  %s = matmul(%q, %k) {transpose_b=true}
  %p = softmax(%s) {dim=-1}
  %o = matmul(%p, %v)
  return (%o)
})";

// A linear over a symbolic count of rows (a prompt of any length, a batch) with a weight the f32
// linear reads in place (cpu/linear_stream.h): one kernel runs every row count from the views,
// where oneDNN's runtime-M kernel reads a packed copy.
const char* kRowsLinear = R"(graph(%x: f32[s0, 256]) {
  %w = constant f32[300, 256] random(seed=7, lo=-0.3, hi=0.3)
  %b = constant f32[300] random(seed=8, lo=-0.3, hi=0.3)
  %y = linear(%x, %w, %b) {has_bias=true, activation="silu"}
  return (%y)
})";

std::vector<Tensor> decode_inputs(int64_t past) {
  auto seed = static_cast<uint32_t>(past * 7 + 1);
  return {random_tensor(DType::f32, {1, 32}, seed), random_tensor(DType::f32, {1, 2, past, 8}, seed + 1),
          random_tensor(DType::f32, {1, 2, past, 8}, seed + 2)};
}

// Runs `cg` on `in` and checks every output against the reference interpreter.
void run_and_check(Executable& cg, const Graph& ref, const std::vector<Tensor>& in, const std::string& what) {
  std::vector<std::vector<int64_t>> shapes;
  std::vector<TensorView> in_views;
  for (const Tensor& t : in) {
    shapes.push_back(t.shape());
    in_views.push_back(t.view());
  }
  auto out_shapes = cg.prepare(shapes);
  std::vector<Tensor> outs;
  std::vector<TensorView> out_views;
  for (const auto& s : out_shapes) outs.emplace_back(DType::f32, s);
  for (Tensor& t : outs) out_views.push_back(t.view());
  cg.run(in_views, out_views);
  std::vector<Tensor> want = interpret(ref, in, Device::ref);
  ASSERT_EQ(want.size(), outs.size()) << what;
  for (size_t k = 0; k < outs.size(); ++k) {
    ASSERT_EQ(outs[k].shape(), want[k].shape()) << what << " output " << k;
    EXPECT_TRUE(all_close(outs[k], want[k], kTol, kTol)) << what << " output " << k;
  }
}

}  // namespace

TEST(RangePlans, BucketsArePowersOfTwo) {
  auto b = Plan::bucket_of({{"s0", 5}, {"s1", 33}});
  ASSERT_EQ(b.size(), 2u);
  EXPECT_EQ(b[0].lo, 1);
  EXPECT_EQ(b[0].hi, 8);
  EXPECT_EQ(b[1].lo, 33);
  EXPECT_EQ(b[1].hi, 64);
  EXPECT_EQ(Plan::bucket_of({{"s0", 64}})[0].lo, 33);
  EXPECT_TRUE(Plan::bucket_of({{"s0", 0}}).empty());  // an empty size has no bucket
  EXPECT_TRUE(Plan::bucket_of({}).empty());
}

TEST(RangePlans, GrowingCacheBuildsOncePerBucketAndMatchesReference) {
  auto cg = Executable::compile(parse_graph(kDecode), CompileOptions{});
  auto ref = parse_graph(kDecode);
  // 0: no bucket (exact plan); 20: the first symbolic plan, built as usual (and checked);
  // 21..32 on the [17, 32] template; 33..64 and 65..70 one template each.
  run_and_check(*cg, *ref, decode_inputs(0), "past=0");
  for (int64_t past = 20; past <= 70; ++past) run_and_check(*cg, *ref, decode_inputs(past), "past=" + std::to_string(past));
  PlanStats st = cg->plan_stats();
  EXPECT_EQ(st.range, "on");
  EXPECT_EQ(st.built, 5u);          // past=0, past=20, three templates
  EXPECT_EQ(st.instantiated, 50u);  // 21..70
  // Sizes seen before in the bucket run again without a build or an instance.
  for (int64_t past : {25, 40, 66}) run_and_check(*cg, *ref, decode_inputs(past), "again past=" + std::to_string(past));
  EXPECT_EQ(cg->plan_stats().built, 5u);
  EXPECT_EQ(cg->plan_text({{1, 32}, {1, 2, 45, 8}, {1, 2, 45, 8}}).find("s0 in [33, 64]") != std::string::npos, true);
}

TEST(RangePlans, OffBuildsOnePlanPerSize) {
  CompileOptions o;
  o.range_plans = false;
  auto cg = Executable::compile(parse_graph(kDecode), o);
  auto ref = parse_graph(kDecode);
  for (int64_t past = 17; past <= 24; ++past) run_and_check(*cg, *ref, decode_inputs(past), "past=" + std::to_string(past));
  EXPECT_EQ(cg->plan_stats().built, 8u);
  EXPECT_EQ(cg->plan_stats().instantiated, 0u);
}

TEST(RangePlans, ShapeSpecificKernelKeepsOnePlanPerSizeAndSaysWhy) {
  auto cg = Executable::compile(parse_graph(kStaticKernel), CompileOptions{});
  auto ref = parse_graph(kStaticKernel);
  for (int64_t b : {20, 21, 22})
    run_and_check(*cg, *ref, {random_tensor(DType::f32, {b, 32}, static_cast<uint32_t>(b))}, "b=" + std::to_string(b));
  PlanStats st = cg->plan_stats();
  EXPECT_NE(st.range.find("is built for one size"), std::string::npos) << st.range;
  EXPECT_EQ(st.built, 3u);  // no template was built for a graph that does not qualify
  EXPECT_EQ(st.instantiated, 0u);
}

TEST(RangePlans, ConcurrentCallsAcrossBucketsMatchReference) {
  auto cg = Executable::compile(parse_graph(kDecode), CompileOptions{});
  auto ref = parse_graph(kDecode);
  run_and_check(*cg, *ref, decode_inputs(18), "warm");
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      for (int64_t past = 19 + t; past < 90; past += 4) run_and_check(*cg, *ref, decode_inputs(past), "thread");
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(cg->plan_stats().range, "on");
  EXPECT_LE(cg->plan_stats().built, 4u);  // 18 exact, then [17, 32], [33, 64], [65, 128]
}

TEST(RangePlans, ExpandToASymbolicShapeKeepsRangePlans) {
  auto cg = Executable::compile(parse_graph(kSymbolicExpand), CompileOptions{});
  auto ref = parse_graph(kSymbolicExpand);
  for (int64_t n = 17; n <= 26; ++n) {
    auto seed = static_cast<uint32_t>(n);
    run_and_check(*cg, *ref, {random_tensor(DType::f32, {1, 1, 1, n}, seed), random_tensor(DType::f32, {2, 4, 1, n}, seed + 1)},
                  "n=" + std::to_string(n));
  }
  PlanStats st = cg->plan_stats();
  EXPECT_EQ(st.range, "on");
  EXPECT_EQ(st.built, 2u);  // n=17 as usual, then the [17, 32] template
  EXPECT_EQ(st.instantiated, 9u);  // 18..26, each an instance of the template built at 32
}

TEST(RangePlans, SliceAtASymbolicRowKeepsRangePlans) {
  auto cg = Executable::compile(parse_graph(kSymbolicSlice), CompileOptions{});
  auto ref = parse_graph(kSymbolicSlice);
  for (int64_t n : {20, 21, 22, 23, 30, 20})
    run_and_check(*cg, *ref, {random_tensor(DType::f32, {n, 8}, static_cast<uint32_t>(n))}, "n=" + std::to_string(n));
  PlanStats st = cg->plan_stats();
  EXPECT_EQ(st.range, "on") << st.range;
  EXPECT_EQ(st.built, 2u);         // n=20 as usual, then the [17, 32] template
  EXPECT_EQ(st.instantiated, 4u);  // 21, 22, 23, 30 (20 again: its cached plan)
  // The [33, 64] bucket's template, built at 64, would slice past the table (an empty row, where
  // 33-63 give one): that bucket keeps a plan per size, and says why.
  for (int64_t n : {40, 41})
    run_and_check(*cg, *ref, {random_tensor(DType::f32, {n, 8}, static_cast<uint32_t>(n))}, "n=" + std::to_string(n));
  EXPECT_NE(cg->plan_stats().range.find("in the graph but"), std::string::npos) << cg->plan_stats().range;
}

TEST(RangePlans, TablesCutBySizesKeepRangePlans) {
  auto cg = Executable::compile(parse_graph(kSlicesFromViews), CompileOptions{});
  auto ref = parse_graph(kSlicesFromViews);
  for (int64_t n = 17; n <= 26; ++n)
    run_and_check(*cg, *ref, {random_tensor(DType::f32, {n, 8}, static_cast<uint32_t>(n))}, "n=" + std::to_string(n));
  PlanStats st = cg->plan_stats();
  EXPECT_EQ(st.range, "on");
  EXPECT_EQ(st.built, 2u);  // n=17 as usual, then the [17, 32] template
  EXPECT_EQ(st.instantiated, 9u);
}

// Row counts across the kernel's paths: a decode step's 1-4 (streaming), then the broadcast tiles'
// narrow tails, one-register blocks, whole blocks and a block plus a tail.
TEST(RangePlans, LinearOverSymbolicRowsKeepsRangePlans) {
  for (bool capped : {false, true}) {
    CompileOptions o;
    if (capped) o.kernels.cpu_isa = CpuIsa::avx2;
    auto cg = Executable::compile(parse_graph(kRowsLinear), o);
    auto ref = parse_graph(kRowsLinear);
    for (int64_t n : {1, 3, 4, 5, 8, 9, 17, 32, 33, 40, 64, 65, 100}) {
      run_and_check(*cg, *ref, {random_tensor(DType::f32, {n, 256}, static_cast<uint32_t>(5 * n))},
                    "n=" + std::to_string(n) + (capped ? " avx2" : ""));
    }
    PlanStats st = cg->plan_stats();
    EXPECT_EQ(st.range, "on") << st.range;
    EXPECT_GE(st.instantiated, 10u);
    const std::string plan = cg->plan_text({{20, 256}});
    EXPECT_NE(plan.find(capped ? "cpu_linear_f32_avx2" : "cpu_linear_f32"), std::string::npos) << plan;
  }
}

TEST(RangePlans, AttentionWrittenAsMatmulsKeepsRangePlans) {
  for (bool capped : {false, true}) {  // the AVX-512 tiles where the CPU has them, and AVX2's
    CompileOptions o;
    if (capped) o.kernels.cpu_isa = CpuIsa::avx2;
    auto cg = Executable::compile(parse_graph(kMatmulAttention), o);
    auto ref = parse_graph(kMatmulAttention);
    for (int64_t n : {1, 5, 17, 18, 19, 30, 31, 32, 33, 47}) {
      auto seed = static_cast<uint32_t>(3 * n);
      run_and_check(*cg, *ref,
                    {random_tensor(DType::f32, {2, 4, 2, 16}, seed), random_tensor(DType::f32, {1, 4, n, 16}, seed + 1),
                     random_tensor(DType::f32, {1, 4, n, 16}, seed + 2)},
                    "n=" + std::to_string(n) + (capped ? " avx2" : ""));
    }
    PlanStats st = cg->plan_stats();
    EXPECT_EQ(st.range, "on") << st.range;
    EXPECT_GE(st.instantiated, 5u);
    const std::string plan = cg->plan_text({{2, 4, 2, 16}, {1, 4, 20, 16}, {1, 4, 20, 16}});
    EXPECT_NE(plan.find(capped ? "cpu_matmul_rows_f32_avx2" : "cpu_matmul_rows_f32"), std::string::npos) << plan;
  }
}
