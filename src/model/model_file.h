// Compiled model files: one optimised engine graph with its weights and signature, in the
// container the compile cache uses (cache/container.h; the layout and fields: docs/format.md).
//
//   std::string bytes = save_model(cg->graph(), meta);   // updraft.export writes this
//   LoadedModel m = load_model_file("bert.updraft");     // throws Error("model", ...) on any defect
//   auto exe = Executable::from_optimized(std::move(m.graph), opts, m.load_ms);
//
// Unlike a cache entry, a model file is self-contained: every constant is stored by value
// (weights, folded constants, literals), 64-byte aligned, so a loader maps the file and uses the
// weights in place; processes that map the same file share its pages. What it does not do:
// compile (the graph is stored after the whole pass pipeline; loading runs no pass), or trust
// the file: every size, count and reference is checked before use (docs/hardening.md).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/cpu_features.h"
#include "core/dtype.h"
#include "ir/graph.h"

namespace updraft {

inline constexpr uint32_t kModelFormatVersion = 1;

// The range a symbolic size may take (torch.export's range constraints).
struct SymbolRange {
  std::string symbol;
  int64_t min = 0, max = INT64_MAX;
};

// One input or output of a model: a tensor, or for an input a size (an i64 scalar whose value
// binds `binds`, Graph::add_size_input).
struct ModelIO {
  std::string name;
  TensorType type;
  std::string binds;  // a size input's symbol; empty for tensors
};

struct ModelSignature {
  std::vector<ModelIO> inputs, outputs;
  std::vector<SymbolRange> ranges;
  // Checks concrete input shapes (a size input as {value}) against the signature: count, rank,
  // static sizes, one value per symbol, and each symbol's range. Throws Error("model", ...)
  // naming the input, the dim and the range.
  void check_shapes(const std::vector<std::vector<int64_t>>& shapes) const;
  // "inputs:\n  input_ids i64[s0, s1]  s0 in [1, 8] ..." for `updraft-run info` and updraft.load.
  std::string str() const;
};

struct ModelMeta {
  std::string note;                       // what was exported, for people (model class, torch version)
  std::vector<std::string> output_names;  // one per graph output; empty: out0, out1, ...
  std::vector<SymbolRange> ranges;        // every symbol of the inputs; a missing one is [0, INT64_MAX]
  std::string engine;                     // filled by save_model: the engine version that wrote it
  std::string requires_cpu;               // filled by save_model: engine_required_cpu_features()
};

// The bytes of a model file for an optimised graph. Every constant the graph reads is stored by
// value. Throws Error("model", ...) for a graph no file can hold (an output name count that does
// not match, a range for a symbol no input has).
std::string save_model(const Graph& g, const ModelMeta& meta);

struct LoadedModel {
  std::unique_ptr<Graph> graph;
  ModelMeta meta;
  ModelSignature signature;
  size_t file_bytes = 0;      // the whole file
  size_t constant_bytes = 0;  // of which stored constants
  bool mapped = false;        // the constants are used in place in a mapping of the file
  double load_ms = 0;         // read or map, verify, parse
  double verify_ms = 0;       // of which the checksum
};

// From bytes in memory (copied once, aligned).
LoadedModel load_model(const std::string& bytes);
// From a file. map=true maps it (MAP_PRIVATE: pages are shared with other processes mapping the
// same file and with the page cache; the file must not be truncated or written in place while
// loaded: replace it with a new file and a rename, as installs do). map=false reads it into
// private memory. The checksum covers every byte in both cases.
LoadedModel load_model_file(const std::string& path, bool map = true);

}  // namespace updraft
