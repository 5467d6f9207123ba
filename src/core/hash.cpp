// XXH3-64 (seed 0, default secret), as specified in xxHash's doc/xxhash_spec.md. Inputs of up
// to 240 bytes take the short paths; longer ones run eight 64-bit accumulators over 64-byte
// stripes, scrambled after every 1 KiB block, then merge them. The stripe loop has a scalar
// and an AVX2 form with identical results (x86-64 only here; little-endian reads).
#include "core/hash.h"

#include <immintrin.h>

#include <cstring>

namespace updraft {

namespace {

constexpr uint64_t kP32_1 = 0x9E3779B1ull;
constexpr uint64_t kP32_2 = 0x85EBCA77ull;
constexpr uint64_t kP32_3 = 0xC2B2AE3Dull;
constexpr uint64_t kP64_1 = 0x9E3779B185EBCA87ull;
constexpr uint64_t kP64_2 = 0xC2B2AE3D27D4EB4Full;
constexpr uint64_t kP64_3 = 0x165667B19E3779F9ull;
constexpr uint64_t kP64_4 = 0x85EBCA77C2B2AE63ull;
constexpr uint64_t kP64_5 = 0x27D4EB2F165667C5ull;

// The spec's default secret (192 bytes).
alignas(64) constexpr unsigned char kSecret[192] = {
    0xb8, 0xfe, 0x6c, 0x39, 0x23, 0xa4, 0x4b, 0xbe, 0x7c, 0x01, 0x81, 0x2c, 0xf7, 0x21, 0xad, 0x1c,
    0xde, 0xd4, 0x6d, 0xe9, 0x83, 0x90, 0x97, 0xdb, 0x72, 0x40, 0xa4, 0xa4, 0xb7, 0xb3, 0x67, 0x1f,
    0xcb, 0x79, 0xe6, 0x4e, 0xcc, 0xc0, 0xe5, 0x78, 0x82, 0x5a, 0xd0, 0x7d, 0xcc, 0xff, 0x72, 0x21,
    0xb8, 0x08, 0x46, 0x74, 0xf7, 0x43, 0x24, 0x8e, 0xe0, 0x35, 0x90, 0xe6, 0x81, 0x3a, 0x26, 0x4c,
    0x3c, 0x28, 0x52, 0xbb, 0x91, 0xc3, 0x00, 0xcb, 0x88, 0xd0, 0x65, 0x8b, 0x1b, 0x53, 0x2e, 0xa3,
    0x71, 0x64, 0x48, 0x97, 0xa2, 0x0d, 0xf9, 0x4e, 0x38, 0x19, 0xef, 0x46, 0xa9, 0xde, 0xac, 0xd8,
    0xa8, 0xfa, 0x76, 0x3f, 0xe3, 0x9c, 0x34, 0x3f, 0xf9, 0xdc, 0xbb, 0xc7, 0xc7, 0x0b, 0x4f, 0x1d,
    0x8a, 0x51, 0xe0, 0x4b, 0xcd, 0xb4, 0x59, 0x31, 0xc8, 0x9f, 0x7e, 0xc9, 0xd9, 0x78, 0x73, 0x64,
    0xea, 0xc5, 0xac, 0x83, 0x34, 0xd3, 0xeb, 0xc3, 0xc5, 0x81, 0xa0, 0xff, 0xfa, 0x13, 0x63, 0xeb,
    0x17, 0x0d, 0xdd, 0x51, 0xb7, 0xf0, 0xda, 0x49, 0xd3, 0x16, 0x55, 0x26, 0x29, 0xd4, 0x68, 0x9e,
    0x2b, 0x16, 0xbe, 0x58, 0x7d, 0x47, 0xa1, 0xfc, 0x8f, 0xf8, 0xb8, 0xd1, 0x7a, 0xd0, 0x31, 0xce,
    0x45, 0xcb, 0x3a, 0x8f, 0x95, 0x16, 0x04, 0x28, 0xaf, 0xd7, 0xfb, 0xca, 0xbb, 0x4b, 0x40, 0x7e,
};
constexpr size_t kStripe = 64;                            // bytes per accumulate step
constexpr size_t kStripesPerBlock = (192 - kStripe) / 8;  // 16: the secret advances 8 bytes a stripe
constexpr size_t kBlock = kStripe * kStripesPerBlock;     // 1024

inline uint64_t rd64(const unsigned char* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}
inline uint32_t rd32(const unsigned char* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}
inline uint64_t rotl(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }

// The 128-bit product of a and b, its halves xor-ed.
inline uint64_t fold_mul(uint64_t a, uint64_t b) {
  unsigned __int128 m = static_cast<unsigned __int128>(a) * b;
  return static_cast<uint64_t>(m) ^ static_cast<uint64_t>(m >> 64);
}

inline uint64_t avalanche_xxh64(uint64_t h) {
  h ^= h >> 33;
  h *= kP64_2;
  h ^= h >> 29;
  h *= kP64_3;
  return h ^ (h >> 32);
}

inline uint64_t avalanche(uint64_t h) {
  h ^= h >> 37;
  h *= 0x165667919E3779F9ull;
  return h ^ (h >> 32);
}

inline uint64_t mix16(const unsigned char* in, const unsigned char* sec) {
  return fold_mul(rd64(in) ^ rd64(sec), rd64(in + 8) ^ rd64(sec + 8));
}

uint64_t hash_upto16(const unsigned char* p, size_t n) {
  if (n > 8) {
    uint64_t lo = rd64(p) ^ (rd64(kSecret + 24) ^ rd64(kSecret + 32));
    uint64_t hi = rd64(p + n - 8) ^ (rd64(kSecret + 40) ^ rd64(kSecret + 48));
    return avalanche(n + __builtin_bswap64(lo) + hi + fold_mul(lo, hi));
  }
  if (n >= 4) {
    uint64_t x = (static_cast<uint64_t>(rd32(p)) << 32 | rd32(p + n - 4)) ^ (rd64(kSecret + 8) ^ rd64(kSecret + 16));
    x ^= rotl(x, 49) ^ rotl(x, 24);
    x *= 0x9FB21C651E98DF25ull;
    x ^= (x >> 35) + n;
    x *= 0x9FB21C651E98DF25ull;
    return x ^ (x >> 28);
  }
  if (n > 0) {
    uint32_t packed = static_cast<uint32_t>(p[0]) << 16 | static_cast<uint32_t>(p[n >> 1]) << 24 | p[n - 1] |
                      static_cast<uint32_t>(n) << 8;
    return avalanche_xxh64(packed ^ static_cast<uint64_t>(rd32(kSecret) ^ rd32(kSecret + 4)));
  }
  return avalanche_xxh64(rd64(kSecret + 56) ^ rd64(kSecret + 64));
}

uint64_t hash_17to128(const unsigned char* p, size_t n) {
  uint64_t acc = n * kP64_1;
  // Pairs of 16-byte pieces from the front and the back, outermost first.
  const size_t pairs = (n - 1) / 32 + 1;  // 17..32: 1, 33..64: 2, 65..96: 3, 97..128: 4
  for (size_t i = 0; i < pairs; ++i) {
    acc += mix16(p + 16 * i, kSecret + 32 * i);
    acc += mix16(p + n - 16 * (i + 1), kSecret + 32 * i + 16);
  }
  return avalanche(acc);
}

uint64_t hash_129to240(const unsigned char* p, size_t n) {
  uint64_t acc = n * kP64_1;
  for (size_t i = 0; i < 8; ++i) acc += mix16(p + 16 * i, kSecret + 16 * i);
  acc = avalanche(acc);
  for (size_t i = 8; i < n / 16; ++i) acc += mix16(p + 16 * i, kSecret + 16 * (i - 8) + 3);
  acc += mix16(p + n - 16, kSecret + 136 - 17);
  return avalanche(acc);
}

// One 64-byte stripe into the eight accumulators: lane i gains the product of the low and
// high halves of (data ^ secret), and its neighbour (i ^ 1) gains the data itself.
inline void stripe_scalar(uint64_t* acc, const unsigned char* in, const unsigned char* sec) {
  for (int i = 0; i < 8; ++i) {
    uint64_t d = rd64(in + 8 * i), k = d ^ rd64(sec + 8 * i);
    acc[i ^ 1] += d;
    acc[i] += (k & 0xFFFFFFFFull) * (k >> 32);
  }
}

inline void scramble_scalar(uint64_t* acc) {
  for (int i = 0; i < 8; ++i) {
    uint64_t a = acc[i];
    a ^= a >> 47;
    a ^= rd64(kSecret + 192 - kStripe + 8 * i);
    acc[i] = a * kP32_1;
  }
}

// The stripes of a long input (everything before the merge), over `acc`.
void long_scalar(uint64_t* acc, const unsigned char* p, size_t n) {
  const size_t blocks = (n - 1) / kBlock;
  for (size_t b = 0; b < blocks; ++b) {
    for (size_t s = 0; s < kStripesPerBlock; ++s) stripe_scalar(acc, p + b * kBlock + s * kStripe, kSecret + 8 * s);
    scramble_scalar(acc);
  }
  const size_t rest = (n - 1 - blocks * kBlock) / kStripe;
  for (size_t s = 0; s < rest; ++s) stripe_scalar(acc, p + blocks * kBlock + s * kStripe, kSecret + 8 * s);
  stripe_scalar(acc, p + n - kStripe, kSecret + 192 - kStripe - 7);  // the last 64 bytes, maybe overlapping
}

__attribute__((target("avx2"))) inline void stripe_avx2(__m256i* acc, const unsigned char* in,
                                                        const unsigned char* sec) {
  for (int h = 0; h < 2; ++h) {
    __m256i d = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(in + 32 * h));
    __m256i k = _mm256_xor_si256(d, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(sec + 32 * h)));
    __m256i prod = _mm256_mul_epu32(k, _mm256_srli_epi64(k, 32));
    __m256i swapped = _mm256_shuffle_epi32(d, _MM_SHUFFLE(1, 0, 3, 2));  // 64-bit neighbours swap
    acc[h] = _mm256_add_epi64(acc[h], _mm256_add_epi64(prod, swapped));
  }
}

__attribute__((target("avx2"))) inline void scramble_avx2(__m256i* acc) {
  const __m256i prime = _mm256_set1_epi64x(static_cast<long long>(kP32_1));
  for (int h = 0; h < 2; ++h) {
    __m256i a = _mm256_xor_si256(acc[h], _mm256_srli_epi64(acc[h], 47));
    a = _mm256_xor_si256(a, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(kSecret + 192 - kStripe + 32 * h)));
    // a * kP32_1 mod 2^64 from 32x32 products: lo(a) * p + (hi(a) * p << 32).
    __m256i lo = _mm256_mul_epu32(a, prime);
    __m256i hi = _mm256_mul_epu32(_mm256_srli_epi64(a, 32), prime);
    acc[h] = _mm256_add_epi64(lo, _mm256_slli_epi64(hi, 32));
  }
}

__attribute__((target("avx2"))) void long_avx2(uint64_t* acc64, const unsigned char* p, size_t n) {
  __m256i acc[2] = {_mm256_loadu_si256(reinterpret_cast<const __m256i*>(acc64)),
                    _mm256_loadu_si256(reinterpret_cast<const __m256i*>(acc64 + 4))};
  const size_t blocks = (n - 1) / kBlock;
  for (size_t b = 0; b < blocks; ++b) {
    const unsigned char* blk = p + b * kBlock;
    for (size_t s = 0; s < kStripesPerBlock; ++s) stripe_avx2(acc, blk + s * kStripe, kSecret + 8 * s);
    scramble_avx2(acc);
  }
  const size_t rest = (n - 1 - blocks * kBlock) / kStripe;
  for (size_t s = 0; s < rest; ++s) stripe_avx2(acc, p + blocks * kBlock + s * kStripe, kSecret + 8 * s);
  stripe_avx2(acc, p + n - kStripe, kSecret + 192 - kStripe - 7);
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(acc64), acc[0]);
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(acc64 + 4), acc[1]);
}

bool has_avx2() {
  static const bool yes = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") != 0;
  }();
  return yes;
}

uint64_t hash_long(const unsigned char* p, size_t n, bool simd) {
  uint64_t acc[8] = {kP32_3, kP64_1, kP64_2, kP64_3, kP64_4, kP32_2, kP64_5, kP32_1};
  if (simd) long_avx2(acc, p, n);
  else long_scalar(acc, p, n);
  uint64_t h = n * kP64_1;
  for (int i = 0; i < 4; ++i) h += fold_mul(acc[2 * i] ^ rd64(kSecret + 11 + 16 * i), acc[2 * i + 1] ^ rd64(kSecret + 19 + 16 * i));
  return avalanche(h);
}

uint64_t hash(const void* data, size_t n, bool simd) {
  const auto* p = static_cast<const unsigned char*>(data);
  if (n <= 16) return hash_upto16(p, n);
  if (n <= 128) return hash_17to128(p, n);
  if (n <= 240) return hash_129to240(p, n);
  return hash_long(p, n, simd);
}

}  // namespace

uint64_t xxh3_64(const void* data, size_t n) { return hash(data, n, has_avx2()); }

namespace detail {
uint64_t xxh3_64_scalar(const void* data, size_t n) { return hash(data, n, false); }
}  // namespace detail

}  // namespace updraft
