// bernoulli, uniform and normal: the reference kernels draw one Philox block per element
// (kernels/philox.h, bits); the CPU kernels fill 32 elements per pass (8 blocks in the lanes of
// AVX2 registers) on chunks split between threads. Both give the same bits for every thread
// count.
#include <immintrin.h>

#include <algorithm>
#include <string>

#include "kernels/cpu/reduce_common.h"
#include "kernels/cpu/threads.h"
#include "kernels/kernel.h"
#include "kernels/philox.h"

namespace updraft {

namespace philox {

namespace {

// 32x32 -> 64-bit products of 8 lanes by one multiplier, as (high halves, low halves).
inline void mulhilo(__m256i a, __m256i m, __m256i& hi, __m256i& lo) {
  const __m256i even = _mm256_mul_epu32(a, m);                         // lanes 0, 2, 4, 6
  const __m256i odd = _mm256_mul_epu32(_mm256_srli_epi64(a, 32), m);  // lanes 1, 3, 5, 7
  lo = _mm256_blend_epi32(even, _mm256_slli_epi64(odd, 32), 0xAA);
  hi = _mm256_blend_epi32(_mm256_srli_epi64(even, 32), odd, 0xAA);
}

// Blocks j .. j+7 (8 lanes): word w of lane l is the bits of element 4j + 4l + w.
inline void eight_blocks(uint64_t j, uint32_t s0, uint32_t s1, uint32_t k0, uint32_t k1, __m256i words[4]) {
  alignas(32) uint32_t lo[8], hi[8];
  for (int l = 0; l < 8; ++l) {
    lo[l] = static_cast<uint32_t>(j + l);
    hi[l] = static_cast<uint32_t>((j + l) >> 32);
  }
  __m256i c0 = _mm256_load_si256(reinterpret_cast<const __m256i*>(lo));
  __m256i c1 = _mm256_load_si256(reinterpret_cast<const __m256i*>(hi));
  __m256i c2 = _mm256_set1_epi32(static_cast<int>(s0)), c3 = _mm256_set1_epi32(static_cast<int>(s1));
  const __m256i m0 = _mm256_set1_epi64x(kMul0), m1 = _mm256_set1_epi64x(kMul1);
  for (int r = 0; r < kRounds; ++r) {
    __m256i hi0, lo0, hi1, lo1;
    mulhilo(c0, m0, hi0, lo0);
    mulhilo(c2, m1, hi1, lo1);
    const __m256i key0 = _mm256_set1_epi32(static_cast<int>(k0 + static_cast<uint32_t>(r) * kWeyl0));
    const __m256i key1 = _mm256_set1_epi32(static_cast<int>(k1 + static_cast<uint32_t>(r) * kWeyl1));
    c0 = _mm256_xor_si256(_mm256_xor_si256(hi1, c1), key0);
    c2 = _mm256_xor_si256(_mm256_xor_si256(hi0, c3), key1);
    c1 = lo1;
    c3 = lo0;
  }
  words[0] = c0;
  words[1] = c1;
  words[2] = c2;
  words[3] = c3;
}

// Elements 4j .. 4j+31 as bools (bits below t), 32 bytes in element order.
inline __m256i eight_blocks_below(uint64_t j, uint32_t s0, uint32_t s1, uint32_t k0, uint32_t k1, uint32_t t) {
  __m256i words[4];
  eight_blocks(j, s0, s1, k0, k1, words);
  // Unsigned w < t as a signed compare of both flipped at the sign bit; word w of lane l is
  // element 4l + w, so byte w of lane l: the 32 bytes in element order.
  const __m256i flip = _mm256_set1_epi32(static_cast<int>(0x80000000u)), one = _mm256_set1_epi32(1);
  const __m256i tv = _mm256_xor_si256(_mm256_set1_epi32(static_cast<int>(t)), flip);
  __m256i bytes = _mm256_setzero_si256();
  for (int w = 0; w < 4; ++w) {
    const __m256i below = _mm256_and_si256(_mm256_cmpgt_epi32(tv, _mm256_xor_si256(words[w], flip)), one);
    bytes = _mm256_or_si256(bytes, _mm256_sll_epi32(below, _mm_cvtsi32_si128(8 * w)));
  }
  return bytes;
}

}  // namespace

void bernoulli_fill(bool* out, int64_t begin, int64_t end, uint64_t threshold, uint64_t seed, uint64_t stream) {
  if (threshold > 0xFFFFFFFFu) {  // p = 1: every element (the compares are 32-bit)
    std::fill(out, out + (end - begin), true);
    return;
  }
  const uint32_t t = static_cast<uint32_t>(threshold);
  const uint32_t s0 = static_cast<uint32_t>(stream), s1 = static_cast<uint32_t>(stream >> 32);
  const uint32_t k0 = static_cast<uint32_t>(seed), k1 = static_cast<uint32_t>(seed >> 32);
  for (uint64_t j = static_cast<uint64_t>(begin) >> 2; j * 4 < static_cast<uint64_t>(end); j += 8) {
    const __m256i bytes = eight_blocks_below(j, s0, s1, k0, k1, t);
    const int64_t first = static_cast<int64_t>(j * 4);
    if (first >= begin && first + 32 <= end) {
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + (first - begin)), bytes);
      continue;
    }
    alignas(32) uint8_t part[32];  // a pass that starts before begin or ends after end
    _mm256_store_si256(reinterpret_cast<__m256i*>(part), bytes);
    for (int64_t i = std::max(first, begin); i < std::min(first + 32, end); ++i) out[i - begin] = part[i - first] != 0;
  }
}

void uniform_fill(float* out, int64_t begin, int64_t end, uint64_t seed, uint64_t stream) {
  const uint32_t s0 = static_cast<uint32_t>(stream), s1 = static_cast<uint32_t>(stream >> 32);
  const uint32_t k0 = static_cast<uint32_t>(seed), k1 = static_cast<uint32_t>(seed >> 32);
  const __m256 scale = _mm256_set1_ps(0x1p-24f);
  for (uint64_t j = static_cast<uint64_t>(begin) >> 2; j * 4 < static_cast<uint64_t>(end); j += 8) {
    __m256i words[4];
    eight_blocks(j, s0, s1, k0, k1, words);
    // uniform_of on the lanes (the top 24 bits convert exactly), then element 4l + w of
    // word w, lane l into place.
    alignas(32) float f[4][8];
    for (int w = 0; w < 4; ++w)
      _mm256_store_ps(f[w], _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_srli_epi32(words[w], 8)), scale));
    const int64_t first = static_cast<int64_t>(j * 4);
    for (int64_t i = std::max(first, begin); i < std::min(first + 32, end); ++i) {
      const int64_t e = i - first;
      out[i - begin] = f[e & 3][e >> 2];
    }
  }
}

void normal_fill(float* out, int64_t begin, int64_t end, uint64_t seed, uint64_t stream) {
  constexpr int64_t kBlock = 1024;
  float second[kBlock];
  for (int64_t b = begin; b < end; b += kBlock) {
    const int64_t e = std::min(end, b + kBlock);
    float* first = out + (b - begin);
    uniform_fill(first, b, e, seed, stream);
    uniform_fill(second, b, e, seed, stream | kSecondStream);
    for (int64_t i = 0; i < e - b; ++i) first[i] = normal_of(first[i], second[i]);
  }
}

}  // namespace philox

namespace {

// Chunks that keep every thread's share a whole number of 32-element passes.
constexpr int64_t kChunk = int64_t{1} << 14;

// A random op's kernel on `d`: element i is elem(seed, stream, i) one at a time on the
// reference device; on the CPU, fill(out + b, b, e, seed, stream) writes chunk [b, e) with the
// same values. The seed is input 1's one i64, read at each call.
template <typename T, typename Elem, typename Fill>
std::unique_ptr<Kernel> draw_kernel(const KernelContext& ctx, Device d, const std::string& name, Elem elem, Fill fill) {
  const uint64_t stream = static_cast<uint64_t>(ctx.attr("stream").i());
  if (d == Device::ref) {
    return make_kernel("ref_" + name, [=](const TensorView* in, TensorView* out) {
      const uint64_t seed = static_cast<uint64_t>(in[1].ptr<int64_t>()[0]);
      T* o = out[0].ptr<T>();
      const int64_t n = out[0].numel();
      for (int64_t i = 0; i < n; ++i) o[i] = elem(seed, stream, static_cast<uint64_t>(i));
    });
  }
  const int threads = cpu::threads_for(numel_of(ctx.out_shapes[0]), ctx.num_threads);
  return make_kernel("cpu_" + name + "_philox", [=](const TensorView* in, TensorView* out) {
    const uint64_t seed = static_cast<uint64_t>(in[1].ptr<int64_t>()[0]);
    T* o = out[0].ptr<T>();
    const int64_t n = out[0].numel();
    cpu::parallel_for((n + kChunk - 1) / kChunk, threads, [&](int64_t c) {
      const int64_t b = c * kChunk, e = std::min(n, b + kChunk);
      fill(o + b, b, e, seed, stream);
    });
  });
}

KernelFactory bernoulli_factory(Device d) {
  return [d](const KernelContext& ctx) {
    const uint64_t threshold = philox::bernoulli_threshold(ctx.attr("p").f());
    return draw_kernel<bool>(
        ctx, d, "bernoulli",
        [threshold](uint64_t seed, uint64_t stream, uint64_t i) { return philox::bits(seed, stream, i) < threshold; },
        [threshold](bool* o, int64_t b, int64_t e, uint64_t seed, uint64_t stream) {
          philox::bernoulli_fill(o, b, e, threshold, seed, stream);
        });
  };
}

KernelFactory uniform_factory(Device d) {
  return [d](const KernelContext& ctx) {
    return draw_kernel<float>(
        ctx, d, "uniform",
        [](uint64_t seed, uint64_t stream, uint64_t i) { return philox::uniform_of(philox::bits(seed, stream, i)); },
        philox::uniform_fill);
  };
}

KernelFactory normal_factory(Device d) {
  return [d](const KernelContext& ctx) {
    return draw_kernel<float>(ctx, d, "normal", philox::normal, philox::normal_fill);
  };
}

}  // namespace

void register_random_kernels(KernelRegistry& r) {
  for (Device d : {Device::ref, Device::cpu}) {
    r.add("bernoulli", d, bernoulli_factory(d));
    r.add("uniform", d, uniform_factory(d));
    r.add("normal", d, normal_factory(d));
  }
}

}  // namespace updraft
