// updraft's C++ runtime: load a compiled model file (written by updraft.export) and run it, with
// no Python and no PyTorch. This header is the whole public C++ API; the engine's internals stay
// private to the library. A plain C API wrapping it: updraft/updraft_c.h.
//
//   #include <updraft/runtime.h>
//   namespace ur = updraft::runtime;
//   ur::Model model = ur::Model::load("bert.updraft", {.num_threads = 2});
//   for (const auto& in : model.inputs()) ...                 // names, dtypes, dims (-1: symbolic)
//   std::vector<float> out(...);                              // caller-owned buffers
//   model.run({ur::TensorRef::of(ids.data(), ur::DType::i64, {1, 128})},
//             {ur::TensorRef::of(out.data(), ur::DType::f32, {1, 128, 768})});
//
// Thread safety: one loaded Model may be run from many threads at once (each concurrent run
// takes its own memory arena). Errors are updraft::runtime::Error exceptions (what() names the component
// and the fix); nothing in this library aborts the process on bad input or a bad file.
#pragma once
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

// Symbols the shared library libupdraft_runtime exports (it is built with -fvisibility=hidden:
// everything else, the whole engine included, stays private to it).
#ifndef UPDRAFT_RUNTIME_API
#define UPDRAFT_RUNTIME_API __attribute__((visibility("default")))
#endif

namespace updraft::runtime {

// Element types a model's inputs and outputs can have (names as the engine prints them).
enum class DType : int { f32 = 0, f64, f16, bf16, i64, i32, i16, i8, u8, boolean };  // the engine's order
UPDRAFT_RUNTIME_API const char* dtype_name(DType dt);
UPDRAFT_RUNTIME_API size_t dtype_size(DType dt);

class UPDRAFT_RUNTIME_API Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A caller-owned tensor: the library reads inputs and writes outputs in place (no copy). Inputs
// may be strided (strides in elements; empty = contiguous); outputs must be contiguous.
struct TensorRef {
  void* data = nullptr;
  DType dtype = DType::f32;
  std::vector<int64_t> shape;
  std::vector<int64_t> strides;
  static TensorRef of(void* data, DType dtype, std::vector<int64_t> shape) { return {data, dtype, std::move(shape), {}}; }
  static TensorRef of(const void* data, DType dtype, std::vector<int64_t> shape) {
    return {const_cast<void*>(data), dtype, std::move(shape), {}};
  }
};

struct IOInfo {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;        // -1 where symbolic
  std::vector<std::string> dims;     // each dim as text: "128", "s0", "(s1+1)"
  bool is_size = false;              // a size input: an i64 scalar whose value binds `dims[0]`'s symbol
};

struct SymbolRange {
  std::string symbol;
  int64_t min = 0, max = INT64_MAX;
};

struct LoadOptions {
  int num_threads = 0;   // threads one run uses; 0: all cores
  bool map = true;       // map the file (weights used in place, shared between processes)
};

struct ModelStats {
  size_t file_bytes = 0, constant_bytes = 0;
  bool mapped = false;
  double load_ms = 0;
  std::string engine_version, note, required_cpu;
  // The graph's ops with how many nodes run each, in order of first use (`updraft-run info`).
  std::vector<std::pair<std::string, int>> ops;
};

class UPDRAFT_RUNTIME_API Model {
 public:
  // Throws Error for a missing, truncated, corrupt, newer-format or wrong-CPU file.
  static Model load(const std::string& path, const LoadOptions& opts = {});
  Model(Model&&) noexcept;
  Model& operator=(Model&&) noexcept;
  ~Model();

  const std::vector<IOInfo>& inputs() const;
  const std::vector<IOInfo>& outputs() const;
  const std::vector<SymbolRange>& ranges() const;
  const ModelStats& stats() const;
  std::string signature_text() const;

  // Output shapes for these input shapes (a size input as {value}); checks them against the
  // signature (ranks, static sizes, symbol ranges) and builds the plan for them once.
  std::vector<std::vector<int64_t>> output_shapes(const std::vector<std::vector<int64_t>>& input_shapes);
  // Runs the model: inputs read in place, outputs written into the caller's buffers (shapes as
  // output_shapes() gives). Thread-safe.
  void run(const std::vector<TensorRef>& inputs, const std::vector<TensorRef>& outputs);
  // Bytes of working memory (the arena) one run with these input shapes uses.
  size_t arena_bytes(const std::vector<std::vector<int64_t>>& input_shapes);

 private:
  struct Impl;
  explicit Model(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// The library's version (the engine version that writes model files).
UPDRAFT_RUNTIME_API const char* version();

}  // namespace updraft::runtime
