// PackedWeights: one prepacked copy of each constant weight per process, whatever the number
// of kernels, plans and compiled graphs that read it. Internal to the oneDNN kernels.
//
// A kernel that prepacks a constant (matmul.cpp: a linear's weight reordered into the layout
// its primitive prefers) asks here first. The registry is keyed by what decides the packed
// bytes: the source's address and byte size, an XXH3-64 hash of its bytes (computed at each
// lookup, so a constant changed in place, or new data at a freed address, never meets a stale
// copy), the layout the bytes are read in (`user`) and the packed layout (`packed`). A hit
// returns the storage another kernel made; a miss packs into new storage and registers it.
// Entries hold weak references: the packed bytes go when the last kernel holding them goes (a
// graph freed, an evicted plan's kernels dropped), and expired entries are pruned on insert.
//
// Prefill and decode graphs of one model build different primitives (M = prompt length vs
// M = 1, static vs runtime M), which may prefer different packed layouts. layouts_of() gives
// the packed layouts already made from a source, so a kernel can ask its primitive for one
// of those first and share it (matmul.cpp does, when oneDNN serves that layout with a
// non-reference implementation).
//
// It does not decide whether to prepack (KernelOptions::prepack_weights, matmul.cpp), and does
// not share constants themselves (the graph's constants are the caller's tensors, zero copy).
//
// Thread-safe: a mutex guards the table; packing runs outside it, so two compiles that miss on
// the same weight at once may both pack, and the second to finish takes the first one's copy
// (its own is freed at once).
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "core/tensor.h"
#include "oneapi/dnnl/dnnl.hpp"

namespace updraft::onednn {

struct PackedWeightStats {
  size_t entries = 0;        // live packed copies
  size_t bytes = 0;          // their bytes (each counted once)
  size_t shared_bytes = 0;   // bytes that would be further copies without sharing: size x (holders - 1)
  size_t holders = 0;        // references held now (kernels, variants), over all live entries
  size_t packs = 0;          // copies made (process lifetime)
  size_t hits = 0;           // lookups served by an existing copy (process lifetime)
};

class PackedWeights {
 public:
  // How a miss fills `packed` from `user` (both over real memory); default: a oneDNN reorder.
  using PackFn = std::function<void(const dnnl::memory& user, const dnnl::memory& packed)>;

  // A constant as the registry knows it: its bytes (hashed once, here) read as `user`.
  struct Source {
    const Tensor* tensor = nullptr;
    dnnl::memory::desc user;
    uint64_t hash = 0;
  };
  static Source source(const Tensor& src, const dnnl::memory::desc& user);

  // The source's bytes in layout `packed`: shared when another holder made them from the same
  // bytes, else packed now. The caller holds the result as long as it reads it; `*hit`
  // (optional) says which.
  static std::shared_ptr<void> get(const Source& src, const dnnl::memory::desc& packed, bool* hit = nullptr,
                                   const PackFn& pack = nullptr);
  // The packed layouts that live entries hold for this source.
  static std::vector<dnnl::memory::desc> layouts_of(const Source& src);
  static PackedWeightStats stats();
};

}  // namespace updraft::onednn
