// The engine's random numbers (kernels/philox.h) and the bernoulli and uniform ops:
// Philox4x32-10 against the published known-answer vectors, the CPU kernels equal to the
// reference bit for bit (any thread count, any start offset), P(true) = p and uniform moments
// within 5 sigma, streams and seeds independent.
#include <gtest/gtest.h>

#include <cmath>

#include "core/error.h"
#include "kernel_test_util.h"
#include "kernels/philox.h"

using namespace updraft;
using namespace updraft::testing;

namespace {

Tensor seed_tensor(int64_t seed) {
  Tensor s(DType::i64, {});
  s.ptr<int64_t>()[0] = seed;
  return s;
}

std::vector<bool> mask_of(Device d, std::vector<int64_t> shape, double p, int64_t seed, int64_t stream,
                          int threads = 0) {
  OneNode n("bernoulli", {input(Tensor(DType::f32, shape)), input(seed_tensor(seed))},
            {{"p", p}, {"stream", stream}});
  Tensor out = run_kernel(*make_kernel_for(n, d, threads), n);
  EXPECT_EQ(out.dtype(), DType::boolean);
  return std::vector<bool>(out.ptr<bool>(), out.ptr<bool>() + out.numel());
}

// A float draw (uniform or normal) of `shape`.
std::vector<float> draw_of(const char* op, Device d, std::vector<int64_t> shape, int64_t seed, int64_t stream,
                           int threads = 0) {
  OneNode n(op, {input(Tensor(DType::f32, shape)), input(seed_tensor(seed))}, {{"stream", stream}});
  Tensor out = run_kernel(*make_kernel_for(n, d, threads), n);
  EXPECT_EQ(out.dtype(), DType::f32);
  return std::vector<float>(out.ptr<float>(), out.ptr<float>() + out.numel());
}

std::vector<float> uniform_of(Device d, std::vector<int64_t> shape, int64_t seed, int64_t stream, int threads = 0) {
  return draw_of("uniform", d, std::move(shape), seed, stream, threads);
}

}  // namespace

// Random123's kat_vectors for philox4x32 with 10 rounds: (counter, key) -> block.
TEST(Philox, KnownAnswers) {
  struct Kat {
    uint32_t c[4], k[2], want[4];
  };
  const Kat kats[] = {
      {{0, 0, 0, 0}, {0, 0}, {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
      {{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff},
       {0xffffffff, 0xffffffff},
       {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
      {{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344},
       {0xa4093822, 0x299f31d0},
       {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
  };
  for (const Kat& t : kats) {
    philox::Block b = philox::block(t.c[0], t.c[1], t.c[2], t.c[3], t.k[0], t.k[1]);
    for (int w = 0; w < 4; ++w) EXPECT_EQ(b.w[w], t.want[w]) << "word " << w;
  }
}

TEST(Philox, ThresholdCoversTheEnds) {
  EXPECT_EQ(philox::bernoulli_threshold(0.0), 0u);
  EXPECT_EQ(philox::bernoulli_threshold(1.0), uint64_t{1} << 32);
  EXPECT_EQ(philox::bernoulli_threshold(0.5), uint64_t{1} << 31);
  EXPECT_EQ(philox::bernoulli_threshold(1e-12), 1u);  // tiny but not zero: sometimes true
}

// The fill (16 blocks per pass) against one block per element, from offsets that start and
// end mid-block and mid-pass; a seed above 2^32 and a stream above 2^32 reach the high words.
TEST(Philox, BlockedFillEqualsOneElementAtATime) {
  const uint64_t seed = 0x123456789abcdefULL, stream = (uint64_t{7} << 32) + 3;
  const uint64_t t = philox::bernoulli_threshold(0.3);
  for (auto [b, e] : std::vector<std::pair<int64_t, int64_t>>{{0, 1}, {0, 64}, {3, 200}, {61, 67}, {1000, 1333}}) {
    std::vector<uint8_t> got(static_cast<size_t>(e - b));
    philox::bernoulli_fill(reinterpret_cast<bool*>(got.data()), b, e, t, seed, stream);
    for (int64_t i = b; i < e; ++i)
      ASSERT_EQ(got[static_cast<size_t>(i - b)] != 0, philox::bits(seed, stream, static_cast<uint64_t>(i)) < t)
          << "element " << i << " of [" << b << ", " << e << ")";
  }
}

// Multi-thread OpenMP regions on purpose: the TSan lane leaves this test out (libgomp's barriers
// are invisible to TSan; scripts/sanitize.sh) and runs ConcurrentCalls instead.
TEST(Bernoulli, CpuEqualsReferenceForEveryThreadCount) {
  const std::vector<int64_t> shape = {3, 70001};  // not a multiple of a chunk, a pass or a block
  const auto want = mask_of(Device::ref, shape, 0.1, -5, 2);
  for (int threads : {1, 2, 3}) EXPECT_EQ(mask_of(Device::cpu, shape, 0.1, -5, 2, threads), want) << threads;
}

// One kernel run from 4 caller threads at once (the kernel is const and shared: the TSan lane
// runs this), each equal to the reference.
TEST(Bernoulli, ConcurrentCalls) {
  OneNode n("bernoulli", {input(Tensor(DType::f32, {40000})), input(seed_tensor(99))}, {{"p", 0.3}, {"stream", int64_t{5}}});
  expect_same_from_threads(n, 10, 0.0, 0.0);
}

TEST(Bernoulli, RateStreamsAndSeeds) {
  const int64_t n = 1 << 20;
  for (double p : {0.0, 0.1, 0.5, 0.9, 1.0}) {
    auto m = mask_of(Device::cpu, {n}, p, 42, 0);
    double ones = 0;
    for (bool v : m) ones += v;
    const double sigma = std::sqrt(n * p * (1 - p));
    EXPECT_LE(std::fabs(ones - n * p), 5 * sigma + 0.5) << "p=" << p;
  }
  // Another stream or seed: a different mask, agreeing on about p^2 + (1-p)^2 of the elements.
  auto a = mask_of(Device::cpu, {n}, 0.5, 42, 0), b = mask_of(Device::cpu, {n}, 0.5, 42, 1),
       c = mask_of(Device::cpu, {n}, 0.5, 43, 0);
  for (const auto* other : {&b, &c}) {
    double same = 0;
    for (int64_t i = 0; i < n; ++i) same += a[static_cast<size_t>(i)] == (*other)[static_cast<size_t>(i)];
    EXPECT_LE(std::fabs(same - n * 0.5), 5 * std::sqrt(n * 0.25));
  }
  EXPECT_EQ(mask_of(Device::cpu, {n}, 0.5, 42, 0), a);  // and the same inputs, the same mask
}

TEST(Bernoulli, ShapeErrorsNameTheProblem) {
  Graph g;
  Value* x = g.add_input("x", {DType::f32, {Dim(4)}});
  Value* f = g.add_input("f", {DType::f32, {}});
  Value* s = g.add_input("s", {DType::i64, {}});
  EXPECT_THROW(g.add_node("bernoulli", {x, f}, {{"p", 0.5}}), Error);  // seed not i64
  EXPECT_THROW(g.add_node("bernoulli", {x, s}, {{"p", 1.5}}), Error);  // not a probability
  EXPECT_THROW(g.add_node("bernoulli", {x, s}, {{"p", 0.5}, {"stream", int64_t{-1}}}), Error);
  Node* ok = g.add_node("bernoulli", {x, s}, {{"p", 0.5}});
  EXPECT_EQ(ok->output(0)->type.dtype, DType::boolean);
}

TEST(Philox, UniformFillEqualsOneElementAtATime) {
  const uint64_t seed = 0xfedcba9876543210ULL, stream = (uint64_t{3} << 32) + 1;
  for (auto [b, e] : std::vector<std::pair<int64_t, int64_t>>{{0, 1}, {0, 32}, {5, 77}, {30, 34}, {999, 1400}}) {
    std::vector<float> got(static_cast<size_t>(e - b));
    philox::uniform_fill(got.data(), b, e, seed, stream);
    for (int64_t i = b; i < e; ++i)
      ASSERT_EQ(got[static_cast<size_t>(i - b)], philox::uniform_of(philox::bits(seed, stream, static_cast<uint64_t>(i))))
          << "element " << i << " of [" << b << ", " << e << ")";
  }
  EXPECT_EQ(philox::uniform_of(0), 0.0f);
  EXPECT_EQ(philox::uniform_of(0xFFFFFFFFu), 1.0f - 0x1p-24f);  // below 1: [0, 1)
}

// Multi-thread OpenMP regions, as Bernoulli.CpuEqualsReferenceForEveryThreadCount (left out
// of the TSan lane for the same reason).
TEST(Uniform, CpuEqualsReferenceForEveryThreadCount) {
  const std::vector<int64_t> shape = {2, 50003};
  const auto want = uniform_of(Device::ref, shape, 11, 4);
  for (int threads : {1, 2, 3}) EXPECT_EQ(uniform_of(Device::cpu, shape, 11, 4, threads), want) << threads;
}

TEST(Uniform, ConcurrentCalls) {
  OneNode n("uniform", {input(Tensor(DType::f32, {40000})), input(seed_tensor(7))}, {{"stream", int64_t{2}}});
  expect_same_from_threads(n, 10, 0.0, 0.0);
}

// Mean 1/2 and variance 1/12 within 5 sigma, every value in [0, 1); another stream or seed is
// uncorrelated (the mean of the product is 1/4).
TEST(Uniform, MomentsStreamsAndSeeds) {
  const int64_t n = 1 << 20;
  auto a = uniform_of(Device::cpu, {n}, 42, 0);
  double sum = 0, sq = 0;
  for (float v : a) {
    ASSERT_TRUE(v >= 0.0f && v < 1.0f) << v;
    sum += v;
    sq += (v - 0.5) * (v - 0.5);
  }
  EXPECT_LE(std::fabs(sum / n - 0.5), 5 * std::sqrt(1.0 / 12 / n));
  EXPECT_LE(std::fabs(sq / n - 1.0 / 12), 5 * std::sqrt(1.0 / 180 / n));  // Var((u - 1/2)^2) = 1/180
  for (auto other : {uniform_of(Device::cpu, {n}, 42, 1), uniform_of(Device::cpu, {n}, 43, 0)}) {
    double prod = 0;
    for (int64_t i = 0; i < n; ++i) prod += static_cast<double>(a[static_cast<size_t>(i)]) * other[static_cast<size_t>(i)];
    EXPECT_LE(std::fabs(prod / n - 0.25), 5 * std::sqrt(7.0 / 144 / n));  // Var(uv) = 1/9 - 1/16
  }
  EXPECT_EQ(uniform_of(Device::cpu, {n}, 42, 0), a);
}

TEST(Uniform, ShapeErrorsNameTheProblem) {
  Graph g;
  Value* x = g.add_input("x", {DType::f32, {Dim(4), Dim(2)}});
  Value* f = g.add_input("f", {DType::f32, {}});
  Value* s = g.add_input("s", {DType::i64, {Dim(1)}});
  EXPECT_THROW(g.add_node("uniform", {x, f}), Error);                                 // seed not i64
  EXPECT_THROW(g.add_node("uniform", {x, s}, {{"stream", int64_t{-2}}}), Error);  // negative stream
  Node* ok = g.add_node("uniform", {x, s});
  EXPECT_EQ(ok->output(0)->type.dtype, DType::f32);
  EXPECT_EQ(ok->output(0)->type.shape, (Shape{Dim(4), Dim(2)}));
}

TEST(Philox, NormalFillEqualsOneElementAtATime) {
  const uint64_t seed = 0x0123456789abcdefULL, stream = 5;
  for (auto [b, e] : std::vector<std::pair<int64_t, int64_t>>{{0, 1}, {3, 40}, {1020, 1030}, {0, 2500}}) {
    std::vector<float> got(static_cast<size_t>(e - b));
    philox::normal_fill(got.data(), b, e, seed, stream);
    for (int64_t i = b; i < e; ++i)
      ASSERT_EQ(got[static_cast<size_t>(i - b)], philox::normal(seed, stream, static_cast<uint64_t>(i)))
          << "element " << i << " of [" << b << ", " << e << ")";
  }
  // The extremes of Box-Muller on 24-bit uniforms: a = 0 gives r = 0; the largest a gives
  // sqrt(48 ln 2), finite.
  EXPECT_EQ(philox::normal_of(0.0f, 0.25f), 0.0f);
  EXPECT_NEAR(philox::normal_of(1.0f - 0x1p-24f, 0.0f), std::sqrt(48 * std::log(2.0)), 1e-5);
}

// Multi-thread OpenMP regions: left out of the TSan lane, as Uniform's.
TEST(Normal, CpuEqualsReferenceForEveryThreadCount) {
  const std::vector<int64_t> shape = {3, 20011};
  const auto want = draw_of("normal", Device::ref, shape, 9, 2);
  for (int threads : {1, 2, 3}) EXPECT_EQ(draw_of("normal", Device::cpu, shape, 9, 2, threads), want) << threads;
}

// Mean 0, variance 1 and the mass beyond 1.96 within 5 sigma; bounded by sqrt(48 ln 2); another
// stream is uncorrelated, and so is the uniform draw of the same stream.
TEST(Normal, MomentsTailsAndStreams) {
  const int64_t n = 1 << 20;
  auto z = draw_of("normal", Device::cpu, {n}, 42, 0);
  double sum = 0, sq = 0, tail = 0;
  for (float v : z) {
    ASSERT_TRUE(std::fabs(v) <= 5.7686f) << v;
    sum += v;
    sq += static_cast<double>(v) * v;
    tail += std::fabs(v) > 1.959964;
  }
  EXPECT_LE(std::fabs(sum / n), 5 * std::sqrt(1.0 / n));
  EXPECT_LE(std::fabs(sq / n - 1.0), 5 * std::sqrt(2.0 / n));  // Var(z^2) = 2
  EXPECT_LE(std::fabs(tail / n - 0.05), 5 * std::sqrt(0.05 * 0.95 / n));
  for (auto other : {draw_of("normal", Device::cpu, {n}, 42, 1), uniform_of(Device::cpu, {n}, 42, 0)}) {
    double prod = 0, mean = 0;
    for (float v : other) mean += v;
    mean /= n;
    for (int64_t i = 0; i < n; ++i) prod += static_cast<double>(z[static_cast<size_t>(i)]) * (other[static_cast<size_t>(i)] - mean);
    EXPECT_LE(std::fabs(prod / n), 5 * std::sqrt(1.0 / n)) << "correlated";  // Var(z w) = Var(w) <= 1
  }
}
