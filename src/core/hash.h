// XXH3-64: Yann Collet's xxHash3, 64-bit result, seed 0 and the default secret
// (https://github.com/Cyan4973/xxHash, spec in its doc/xxhash_spec.md), written out here.
// Well mixed and fast: its long-input loop is four 32x32->64 multiplies per 32 bytes, which
// AVX2 does in one instruction, so from memory it runs within ~1.4x of a plain read, where
// XXH64 (two dependent 64-bit multiplies per 8 bytes) is bound by the multiplier at ~1/3 of
// it. Not cryptographic: it detects accidental change (a corrupt cache entry, other weights),
// not an adversary. Used for compile-cache entry checksums and parameter fingerprints
// (docs/format.md).
//
//   uint64_t h = xxh3_64(t.data(), t.nbytes());
#pragma once
#include <cstddef>
#include <cstdint>

namespace updraft {

uint64_t xxh3_64(const void* data, size_t n);

namespace detail {
// The long-input loop without SIMD (what xxh3_64 runs on a CPU without AVX2); for tests.
uint64_t xxh3_64_scalar(const void* data, size_t n);
}  // namespace detail

}  // namespace updraft
