// XXH64: Yann Collet's 64-bit xxHash (https://github.com/Cyan4973/xxHash, spec in its
// doc/xxhash_spec.md), written out here. Fast (memory-bound on one core) and well mixed, but
// not cryptographic: it detects accidental change (a corrupt cache entry, other weights), not
// an adversary. Used for compile-cache entry checksums and parameter fingerprints
// (docs/format.md).
//
//   uint64_t h = xxh64(t.data(), t.nbytes());
#pragma once
#include <cstddef>
#include <cstdint>

namespace updraft {

uint64_t xxh64(const void* data, size_t n, uint64_t seed = 0);

}  // namespace updraft
