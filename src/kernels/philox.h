// The engine's random numbers: Philox4x32-10, a counter-based generator (Salmon, Moraes, Dror,
// Shaw, "Parallel random numbers: as easy as 1, 2, 3", SC 2011). A draw is a pure function of
// a key and a counter, so a random op's output depends only on (seed, stream, element index):
// not on the thread count or split, the plan, or which side draws it. The reference kernel
// (one element at a time), the CPU kernel (blocks across threads) and the PyTorch fallback of
// the front end's random ops (python/updraft/random_ops.py, through the bindings) give the
// same bits.
//
// Element i of stream s under seed k: word i % 4 of the block with counter
// (i / 4 low, i / 4 high, s low, s high) and key (k low, k high).
//
// Not here: a generator with state. The seed comes from torch's generator once per call
// (random_ops.py), which is what makes torch.manual_seed repeat a run.
#pragma once
#include <cmath>
#include <cstdint>

namespace updraft::philox {

constexpr uint32_t kMul0 = 0xD2511F53u, kMul1 = 0xCD9E8D57u;  // the round multipliers
constexpr uint32_t kWeyl0 = 0x9E3779B9u, kWeyl1 = 0xBB67AE85u;  // key schedule increments
constexpr int kRounds = 10;

struct Block {
  uint32_t w[4];
};

// One block: 10 rounds on counter c under key (k0, k1).
inline Block block(uint32_t c0, uint32_t c1, uint32_t c2, uint32_t c3, uint32_t k0, uint32_t k1) {
  for (int r = 0; r < kRounds; ++r) {
    const uint64_t p0 = static_cast<uint64_t>(kMul0) * c0, p1 = static_cast<uint64_t>(kMul1) * c2;
    const uint32_t n0 = static_cast<uint32_t>(p1 >> 32) ^ c1 ^ k0, n2 = static_cast<uint32_t>(p0 >> 32) ^ c3 ^ k1;
    c1 = static_cast<uint32_t>(p1);
    c3 = static_cast<uint32_t>(p0);
    c0 = n0;
    c2 = n2;
    k0 += kWeyl0;
    k1 += kWeyl1;
  }
  return {{c0, c1, c2, c3}};
}

// The 32 random bits of element i of stream `stream` under `seed` (one block per call: the
// reference path).
inline uint32_t bits(uint64_t seed, uint64_t stream, uint64_t i) {
  const uint64_t j = i >> 2;
  return block(static_cast<uint32_t>(j), static_cast<uint32_t>(j >> 32), static_cast<uint32_t>(stream),
               static_cast<uint32_t>(stream >> 32), static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32))
      .w[i & 3];
}

// Elements whose bits are below this are true: ceil(prob * 2^32), so P(true) is prob to 2^-32
// (0 never, 1 always).
inline uint64_t bernoulli_threshold(double prob) {
  if (!(prob > 0)) return 0;
  if (prob >= 1) return uint64_t{1} << 32;
  return static_cast<uint64_t>(std::ceil(prob * 4294967296.0));
}

// out[i - begin] = bits(seed, stream, i) < threshold for i in [begin, end): 8 blocks at a
// time in AVX2 lanes (kernels/cpu/random.cpp).
void bernoulli_fill(bool* out, int64_t begin, int64_t end, uint64_t threshold, uint64_t seed, uint64_t stream);

// A float in [0, 1) from 32 random bits: the top 24 times 2^-24, so every value is exact in f32
// and equally likely (torch's CPU uniform for float draws 24 bits the same way).
inline float uniform_of(uint32_t bits) { return static_cast<float>(bits >> 8) * 0x1p-24f; }

// out[i - begin] = uniform_of(bits(seed, stream, i)) for i in [begin, end), as bernoulli_fill.
void uniform_fill(float* out, int64_t begin, int64_t end, uint64_t seed, uint64_t stream);

// A normal draw takes its second uniform from the same element of the stream with this bit set
// (streams are >= 0, so no other op's stream has it).
constexpr uint64_t kSecondStream = uint64_t{1} << 63;

// A standard normal from two uniforms in [0, 1) (Box-Muller): sqrt(-2 ln(1 - a)) cos(2 pi b),
// computed in double and rounded once. 1 - a is in (0, 1] and exact, so |z| <= sqrt(48 ln 2)
// = 5.77 (P(|z| > 5.77) is 8e-9 for a true normal).
inline float normal_of(float a, float b) {
  const double r = std::sqrt(-2.0 * std::log(1.0 - static_cast<double>(a)));
  return static_cast<float>(r * std::cos(6.283185307179586 * static_cast<double>(b)));
}

// Element i of a normal draw of stream `stream` under `seed` (the reference path).
inline float normal(uint64_t seed, uint64_t stream, uint64_t i) {
  return normal_of(uniform_of(bits(seed, stream, i)), uniform_of(bits(seed, stream | kSecondStream, i)));
}

// out[i - begin] = normal(seed, stream, i) for i in [begin, end): both uniforms by uniform_fill.
void normal_fill(float* out, int64_t begin, int64_t end, uint64_t seed, uint64_t stream);

}  // namespace updraft::philox
