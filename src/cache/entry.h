// Compile-cache entries: one optimised engine graph in the versioned, checksummed binary
// container specified in docs/format.md.
//
//   std::string bytes = save_entry(cg->graph(), {key, "bert partition 0"});
//   auto g = load_entry(bytes, key, sources);   // throws Error("cache", ...) on any defect
//
// Weight values are not stored. A constant bound from the caller's parameter j
// (Value::source == j) is stored as a reference and bound to sources[j] on load; a constant a
// pass folded from other constants is stored as its recipe (the FoldRecords, an "init" graph
// over the parameters) and recomputed on load with the same kernels, so a new checkpoint of
// the same model reuses the entry and gets bit-identical folded weights. Every other constant
// (literals the front end wrote) is stored by value.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "ir/graph.h"

namespace updraft {

inline constexpr uint32_t kEntryFormatVersion = 1;

// The CPU features this process runs with, e.g. "avx,avx2,fma,sse4.2" (part of the key: the
// plans and kernels chosen depend on them).
std::string cpu_features();

struct EntryMeta {
  std::string key;     // the caller's cache key
  std::string note;    // what was compiled, for people reading `updraft cache` listings
  std::string engine;  // filled by save_entry: the engine version that wrote it
  std::string cpu;     // filled by save_entry: cpu_features() when written
};

std::string save_entry(const Graph& g, const EntryMeta& meta);

// Header and metadata only (magic, format version, length, checksum are verified).
EntryMeta read_entry_meta(const std::string& bytes);

// The graph of an entry, with parameters bound from `sources` (by parameter number; the
// tensors are shared, not copied) and folded constants recomputed. Throws Error("cache", ...)
// naming the defect: not an entry, other format version, truncated, checksum mismatch, other
// engine version or CPU, other key, a missing parameter or one of another dtype/shape.
std::unique_ptr<Graph> load_entry(const std::string& bytes, const std::string& key,
                                  const std::vector<std::optional<Tensor>>& sources);

}  // namespace updraft
