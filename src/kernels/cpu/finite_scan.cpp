#include "kernels/cpu/finite_scan.h"

#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cstring>

#include "kernels/cpu/threads.h"

namespace updraft::cpu {

namespace {

// A float is NaN or +-inf exactly when its exponent bits are all ones.
constexpr uint32_t kExp = 0x7f800000u;

bool chunk_finite(const float* p, int64_t n) {
  const __m256i exp = _mm256_set1_epi32(static_cast<int>(kExp));
  __m256i bad = _mm256_setzero_si256();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256i e = _mm256_and_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i)), exp);
    bad = _mm256_or_si256(bad, _mm256_cmpeq_epi32(e, exp));
  }
  if (!_mm256_testz_si256(bad, bad)) return false;
  for (; i < n; ++i) {
    uint32_t u;
    std::memcpy(&u, p + i, sizeof u);
    if ((u & kExp) == kExp) return false;
  }
  return true;
}

}  // namespace

bool all_finite(const float* p, int64_t n, int threads) {
  constexpr int64_t kChunk = 1 << 16;  // floats per task: 256 KiB, read at L2 speed
  const int64_t chunks = (n + kChunk - 1) / kChunk;
  if (chunks <= 1) return chunk_finite(p, n);
  if (threads <= 0) threads = omp_get_max_threads();
  std::atomic<bool> ok{true};
  parallel_for(chunks, std::min<int64_t>(threads, chunks), [&](int64_t c) {
    if (!ok.load(std::memory_order_relaxed)) return;
    const int64_t b = c * kChunk;
    if (!chunk_finite(p + b, std::min(kChunk, n - b))) ok.store(false, std::memory_order_relaxed);
  });
  return ok.load();
}

}  // namespace updraft::cpu
