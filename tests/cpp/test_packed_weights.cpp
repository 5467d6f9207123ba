// PackedWeights (src/kernels/onednn/packed_weights.h): compiled graphs that read the same
// constant weight share one prepacked copy; the copy goes with its last holder; a constant
// whose bytes changed never meets the copy of its old bytes; concurrent compiles make one copy;
// a runtime-M linear (symbolic rows) reads the copy a static graph packed.
#include <gtest/gtest.h>

#include <cstring>
#include <thread>
#include <vector>

#include "ir/graph.h"
#include "kernels/onednn/packed_weights.h"
#include "runtime/executable.h"
#include "runtime/plan.h"
#include "test_util.h"

using namespace updraft;
using updraft::onednn::PackedWeights;
using updraft::testing::all_close;
using updraft::testing::random_tensor;

namespace {

// Large enough that oneDNN prefers a blocked weight layout, small enough (below kStreamMinWeight,
// cpu/linear_stream.h) that the f32 linear that reads its weight in place leaves it to oneDNN.
constexpr int64_t kK = 512, kN = 120;

// y = linear(x, w) with w a constant sharing `w`'s storage (as a frozen parameter does).
std::shared_ptr<Executable> compile_linear(const Tensor& w, int64_t M) {
  auto g = std::make_unique<Graph>();
  Value* x = g->add_input("x", {DType::f32, {M, kK}});
  Value* c = g->add_constant("w", w);
  g->set_outputs({g->add_node("linear", {x, c})->output()});
  return Executable::compile(std::move(g), CompileOptions{});
}

// Runs `exe` on x and compares with x @ w^T computed here.
void expect_linear(Executable& exe, const Tensor& x, const Tensor& w) {
  const int64_t M = x.shape()[0];
  Tensor y(DType::f32, {M, kN}), want(DType::f32, {M, kN});
  exe.run({x.view()}, {y.view()});
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < kN; ++n) {
      double acc = 0;
      for (int64_t k = 0; k < kK; ++k) acc += double(x.ptr<float>()[m * kK + k]) * w.ptr<float>()[n * kK + k];
      want.ptr<float>()[m * kN + n] = static_cast<float>(acc);
    }
  // f32 gemm over K = 512 against a double-accumulated reference: blocked summation order.
  EXPECT_TRUE(all_close(y, want, 1e-4, 1e-4));
}

// y = linear(neg(x), w), x [s, kK] symbolic in s: the linear's x is not a graph input, so its
// kernel is the runtime-M one (onednn/matmul.cpp).
std::shared_ptr<Executable> compile_runtime_m_linear(const Tensor& w) {
  auto g = std::make_unique<Graph>();
  Value* x = g->add_input("x", {DType::f32, {Dim::sym("s"), kK}});
  Value* h = g->add_node("neg", {x})->output();
  Value* c = g->add_constant("w", w);
  g->set_outputs({g->add_node("linear", {h, c})->output()});
  return Executable::compile(std::move(g), CompileOptions{});
}

// -w, for comparing compile_runtime_m_linear(w) with expect_linear: neg(x) @ w^T = x @ (-w)^T.
Tensor negated(const Tensor& w) {
  Tensor n(DType::f32, w.shape());
  for (int64_t i = 0; i < w.numel(); ++i) n.ptr<float>()[i] = -w.ptr<float>()[i];
  return n;
}

// The name of the first linear kernel of exe's plan for x [M, kK].
std::string linear_kernel(Executable& exe, int64_t M) {
  auto p = exe.plan({{M, kK}});
  for (const Step& st : p->steps())
    if (st.kind == Step::Kind::Kernel && st.node->op_name() == "linear") return st.kernel->name();
  return "";
}

// The packed copy is made when the first plan is built (its kernels).
void build_plan(Executable& exe, int64_t M) { exe.prepare({{M, kK}}); }

}  // namespace

TEST(PackedWeights, TwoGraphsShareOneCopyAndFreeingBothFreesIt) {
  const auto before = PackedWeights::stats();
  Tensor w = random_tensor(DType::f32, {kN, kK}, 1);
  Tensor x = random_tensor(DType::f32, {8, kK}, 2);
  {
    auto a = compile_linear(w, 8);
    auto b = compile_linear(w, 8);  // a second graph (decode beside prefill), the same weight
    build_plan(*a, 8);
    const auto after_a = PackedWeights::stats();
    if (after_a.packs == before.packs)
      GTEST_SKIP() << "oneDNN reads this weight in place on this CPU (its preferred layout is the plain one): "
                      "nothing is packed, so nothing is shared";
    EXPECT_EQ(after_a.entries, before.entries + 1);
    build_plan(*b, 8);
    const auto after_b = PackedWeights::stats();
    EXPECT_EQ(after_b.packs, after_a.packs) << "the second graph packed its own copy";
    EXPECT_GT(after_b.hits, after_a.hits);
    EXPECT_EQ(after_b.entries, before.entries + 1);
    const size_t copy = after_a.bytes - before.bytes;
    EXPECT_EQ(after_b.bytes - before.bytes, copy);
    // b's references (one per kernel variant: x as a graph input may come transposed) are copies saved.
    EXPECT_GE(after_b.shared_bytes - after_a.shared_bytes, copy);
    expect_linear(*a, x, w);
    expect_linear(*b, x, w);
    a.reset();  // b still reads the copy
    EXPECT_EQ(PackedWeights::stats().entries, before.entries + 1);
    expect_linear(*b, x, w);
  }
  const auto end = PackedWeights::stats();
  EXPECT_EQ(end.entries, before.entries);
  EXPECT_EQ(end.bytes, before.bytes);
}

TEST(PackedWeights, PrefillAndDecodeShapesShareWhenOneDnnTakesTheLayout) {
  // M = 8 and M = 32 build different primitives; the second is asked for the layout the first
  // packed (matmul.cpp, adopt_known_layout). Whether oneDNN serves it the same way depends on the
  // CPU, so this checks the results and that at most one copy per layout exists, and that the
  // M = 1 graph adds none (oneDNN reads this small weight in place or takes a known layout).
  const auto before = PackedWeights::stats();
  Tensor w = random_tensor(DType::f32, {kN, kK}, 3);
  auto prefill = compile_linear(w, 32);
  auto decode = compile_linear(w, 8);
  auto single = compile_linear(w, 1);
  build_plan(*prefill, 32);
  build_plan(*decode, 8);
  const auto two = PackedWeights::stats();
  EXPECT_LE(two.entries, before.entries + 2);
  build_plan(*single, 1);
  EXPECT_EQ(PackedWeights::stats().entries, two.entries) << "the M = 1 linear made a packed copy";
  expect_linear(*prefill, random_tensor(DType::f32, {32, kK}, 4), w);
  expect_linear(*decode, random_tensor(DType::f32, {8, kK}, 5), w);
  expect_linear(*single, random_tensor(DType::f32, {1, kK}, 11), w);
}

TEST(PackedWeights, ChangedConstantDoesNotHitTheOldCopy) {
  Tensor w = random_tensor(DType::f32, {kN, kK}, 6);
  Tensor x = random_tensor(DType::f32, {8, kK}, 7);
  auto a = compile_linear(w, 8);
  build_plan(*a, 8);
  const auto mid = PackedWeights::stats();
  // The same storage (same address and size) with new bytes, as an in-place parameter update
  // followed by a rebuild: the new graph must read the new bytes.
  Tensor fresh = random_tensor(DType::f32, {kN, kK}, 8);
  std::memcpy(w.data(), fresh.data(), w.nbytes());
  auto b = compile_linear(w, 8);
  build_plan(*b, 8);
  // A new copy (b's second kernel variant may then share b's own, so hits are not asserted).
  EXPECT_GT(PackedWeights::stats().packs, mid.packs) << "a changed constant was served the copy of its old bytes";
  EXPECT_EQ(PackedWeights::stats().entries, mid.entries + 1);
  expect_linear(*b, x, w);
}

TEST(PackedWeights, ConcurrentCompilesMakeOneCopy) {
  const auto before = PackedWeights::stats();
  Tensor w = random_tensor(DType::f32, {kN, kK}, 9);
  Tensor x = random_tensor(DType::f32, {8, kK}, 10);
  constexpr int kThreads = 8;
  std::vector<std::shared_ptr<Executable>> exes(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      exes[t] = compile_linear(w, 8);
      build_plan(*exes[t], 8);
    });
  for (auto& th : threads) th.join();
  const auto after = PackedWeights::stats();
  if (after.packs == before.packs) GTEST_SKIP() << "oneDNN reads this weight in place on this CPU";
  // Threads that missed at the same time each packed, but all but one copy were dropped.
  EXPECT_EQ(after.entries, before.entries + 1);
  EXPECT_GE(after.holders, before.holders + kThreads);
  for (auto& e : exes) expect_linear(*e, x, w);
  exes.clear();
  EXPECT_EQ(PackedWeights::stats().entries, before.entries);
}

TEST(PackedWeights, RuntimeMLinearReadsTheStaticGraphsCopy) {
  // A prompt of 32 tokens compiles static first; the next length gets Dynamo's symbolic graph,
  // whose runtime-M linear runs static primitives per M in a layout already packed: no second
  // copy (two copies of every weight held 1.82 GB for the 156M Llama, against 1.47 with one).
  const auto before = PackedWeights::stats();
  Tensor w = random_tensor(DType::f32, {kN, kK}, 12);
  auto prefill = compile_linear(w, 32);
  build_plan(*prefill, 32);
  const auto one = PackedWeights::stats();
  auto dynamic = compile_runtime_m_linear(w);
  const std::string name = linear_kernel(*dynamic, 40);
  EXPECT_NE(name.find(":runtime_m:static_by_m"), std::string::npos) << name;
  EXPECT_EQ(PackedWeights::stats().entries, one.entries) << name;
  if (one.packs > before.packs) EXPECT_NE(name.find(":prepacked:shared"), std::string::npos) << name;
  // Every M matches, past the 64 static primitives kept too (the least recently used go), and
  // again after eviction.
  const Tensor neg_w = negated(w);
  for (int64_t M : [] {
         std::vector<int64_t> ms;
         for (int64_t m = 1; m <= 70; ++m) ms.push_back(m);
         ms.insert(ms.end(), {1, 2, 69});
         return ms;
       }()) {
    SCOPED_TRACE("M=" + std::to_string(M));
    expect_linear(*dynamic, random_tensor(DType::f32, {M, kK}, static_cast<uint32_t>(100 + M)), neg_w);
  }
  EXPECT_EQ(PackedWeights::stats().entries, one.entries);
}

TEST(PackedWeights, RuntimeMLinearFromSeveralThreads) {
  // Threads calling one runtime-M kernel at new and repeated M at once: the static primitives
  // are made under the kernel's lock, then run concurrently (the TSan lane runs this).
  Tensor w = random_tensor(DType::f32, {kN, kK}, 13);
  auto dynamic = compile_runtime_m_linear(w);
  const Tensor neg_w = negated(w);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      for (int64_t M : {int64_t{7} + t, int64_t{24}, int64_t{7} + t, int64_t{33} + 2 * t})
        expect_linear(*dynamic, random_tensor(DType::f32, {M, kK}, static_cast<uint32_t>(200 + 10 * t + M)), neg_w);
    });
  for (std::thread& th : threads) th.join();
}
