// Compile-cache entries: one optimised engine graph in the versioned, checksummed binary
// container specified in docs/format.md.
//
//   std::string bytes = save_entry(cg->graph(), {key, "bert partition 0"});
//   auto g = load_entry(bytes, key, sources);          // throws Error("cache", ...) on any defect
//   auto g = load_entry_file(path, key, sources);      // the same, from a file (trust-checked)
//
// Parameters are not stored themselves. A constant bound from the caller's parameter j
// (Value::source == j) is stored as a reference and bound to sources[j] on load; a constant a
// pass folded from other constants is stored as its recipe (the FoldRecords, an "init" graph
// over the parameters), so a new checkpoint of the same model reuses the entry and gets
// bit-identical folded weights by replaying it with the same kernels. When they fit
// (SaveOptions::max_folded_bytes) and are at least half the size of the parameters they come
// from (else replaying is cheaper than fingerprinting), the folded values are stored too, with
// a fingerprint (XXH3-64)
// of every parameter they were folded from: a load whose parameters have those fingerprints
// maps them instead of replaying. Every other constant (literals the front end wrote) is
// stored by value. Stored tensors start 64-byte aligned in the entry and are used in place (in
// the process's own copy of it).
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/cpu_features.h"  // cpu_features(): part of every key
#include "core/tensor.h"
#include "ir/graph.h"

namespace updraft {

inline constexpr uint32_t kEntryFormatVersion = 4;

struct EntryMeta {
  std::string key;     // the caller's cache key
  std::string note;    // what was compiled, for people reading `updraft cache` listings
  std::string engine;  // filled by save_entry: the engine version that wrote it
  std::string cpu;     // filled by save_entry: cpu_features() when written
};

struct SaveOptions {
  // Folded constants are stored (beside their recipes) when together they are at most this
  // many bytes (and at least half the bytes of their sources); otherwise only the recipes
  // are, and every load replays them.
  size_t max_folded_bytes = size_t{256} << 20;
};

std::string save_entry(const Graph& g, const EntryMeta& meta, const SaveOptions& opts = {});

// Header and metadata only (magic, format version, length, checksum are verified).
EntryMeta read_entry_meta(const std::string& bytes);

// How a load got its folded constants.
struct LoadInfo {
  size_t folded = 0;        // folded constants in the entry
  bool mapped = false;      // taken from the entry (the parameters' fingerprints matched)
  double verify_ms = 0.0;   // checksum + fingerprints
  double checksum_ms = 0.0; // of which the checksum, on its own thread for large entries
  double fingerprint_ms = 0.0;  // of which the parameters' fingerprints
  double replay_ms = 0.0;   // replaying the recipes (when not mapped)
};

// The graph of an entry, with parameters bound from `sources` (by parameter number; the
// tensors are shared, not copied) and folded constants mapped from the entry or recomputed.
// Throws Error("cache", ...) naming the defect: not an entry, other format version, truncated,
// checksum mismatch, other engine version or CPU, other key, a missing parameter or one of
// another dtype/shape. The returned graph's stored constants point into a copy of `bytes`.
std::unique_ptr<Graph> load_entry(const std::string& bytes, const std::string& key,
                                  const std::vector<std::optional<Tensor>>& sources, LoadInfo* info = nullptr);

// The same from a file, read into private memory (never mapped: writing or truncating the file
// later cannot reach the returned graph), and only when the file is one only this user could
// have written: a regular file, not a symbolic link, owned by this process's effective user and
// not writable by group or others (docs/format.md, "Trust"); anything else throws
// Error("cache", ...). A FIFO is refused without waiting for a writer.
std::unique_ptr<Graph> load_entry_file(const std::string& path, const std::string& key,
                                       const std::vector<std::optional<Tensor>>& sources, LoadInfo* info = nullptr);

}  // namespace updraft
