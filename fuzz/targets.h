// The fuzz harnesses, shared by the libFuzzer targets (fuzz/fuzz_*.cpp) and the unit test that
// replays the inputs the fuzzers found (tests/cpp/test_fuzz_regressions.cpp), so a regression
// input runs exactly the code that crashed.
//
// Each harness feeds bytes to one reader and accepts exactly one outcome for bad input: an
// updraft Error. Anything else (a signal, a sanitizer report, another exception type, an
// allocation past the fuzzer's limit) is a finding.
#pragma once
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "cache/container.h"
#include "cache/entry.h"
#include "core/checked.h"
#include "core/error.h"
#include "core/hash.h"
#include "ir/dim.h"
#include "ir/text.h"
#include "model/model_file.h"
#include "runtime/executable.h"
#include "runtime/plan.h"

namespace updraft::fuzz {

// The model whose entry seeds the entry fuzzer (fuzz/make_seeds.cpp writes it): a conv whose
// batch norm folds into new weights (a recipe over parameters 0-4), a linear over a transposed
// weight (parameter 5, folded) and a literal scale (a stored blob).
inline const char* kSeedModel = R"(graph(%x: f32[s0, 3, 4, 4]) {
  %w = constant f32[2, 3, 3, 3] random(seed=1)
  %mean = constant f32[2] random(seed=3)
  %var = constant f32[2] random(seed=4, lo=0.5, hi=2.0)
  %gamma = constant f32[2] random(seed=5)
  %beta = constant f32[2] random(seed=6)
  %lw = constant f32[4, 3] random(seed=7)
  %scale = constant f32[] [0.5]
  %0 = conv2d(%x, %w) {padding=[1, 1]}
  %1 = batch_norm(%0, %mean, %var, %gamma, %beta) {eps=0.001}
  %2 = relu(%1)
  %3 = reshape(%2) {shape=[s0, 2, 16]}
  %4 = slice(%3) {dim=2, start=0, end=4}
  %5 = permute(%lw) {dims=[1, 0]}
  %6 = linear(%4, %5)
  %7 = mul(%6, %scale)
  return (%7)
})";
inline const char* kSeedKey = "fuzz";
inline const char* const kSeedParams[] = {"w", "mean", "var", "gamma", "beta", "lw"};

// The seed model's graph with its parameters numbered as the entry refers to them.
inline std::unique_ptr<Graph> seed_model() {
  std::unique_ptr<Graph> g = parse_graph(kSeedModel);
  for (Value* c : g->constants())
    for (int j = 0; j < 6; ++j)
      if (c->name == kSeedParams[j]) c->source = j;
  return g;
}

inline const std::vector<std::optional<Tensor>>& seed_params() {
  static const std::vector<std::optional<Tensor>> params = [] {
    std::vector<std::optional<Tensor>> p(6);
    std::unique_ptr<Graph> g = seed_model();
    for (Value* c : g->constants())
      if (c->source >= 0) p[c->source] = *c->constant;
    return p;
  }();
  return params;
}

// A real entry of the seed model: compiled with the full pass pipeline and saved.
inline std::string fresh_seed_entry() {
  auto cg = Executable::compile(seed_model(), CompileOptions{});
  return save_entry(cg->graph(), {kSeedKey, "fuzz seed model", "", ""});
}

// The seed model as a model file: compiled with the full pass pipeline and saved with an output
// name and a range for its batch symbol (every constant by value, as updraft.export writes it).
inline std::string fresh_seed_model_file() {
  auto cg = Executable::compile(parse_graph(kSeedModel), CompileOptions{});
  ModelMeta meta;
  meta.note = "fuzz seed model";
  meta.output_names = {"y"};
  meta.ranges = {{"s0", 1, 8}};
  return save_model(cg->graph(), meta);
}

// Rewrites a container's payload length and checksum (cache/container.h: bytes 16-31) to match
// its payload, when it starts with `magic`: the checksum catches accidents, and a crafted file
// carries a correct one, so fuzzers and refusal tests get past it to the check they aim at.
inline void reseal(std::string& bytes, const char* magic) {
  if (bytes.size() < container::kHeaderBytes || bytes.compare(0, 8, magic) != 0) return;
  uint64_t length = bytes.size() - container::kHeaderBytes;
  uint64_t sum = xxh3_64(bytes.data() + container::kHeaderBytes, length);
  std::memcpy(&bytes[16], &length, 8);
  std::memcpy(&bytes[24], &sum, 8);
}

// Text IR: parse, and print what parsed (the printer walks everything the parser built).
// Generated constant data is capped so a short input cannot ask for gigabytes.
inline void text_ir(const uint8_t* data, size_t size) {
  std::string text(reinterpret_cast<const char*>(data), size);
  ParseOptions opts;
  opts.max_generated_bytes = size_t{1} << 20;
  try {
    std::unique_ptr<Graph> g = parse_graph(text, opts);
    (void)print_graph(*g);
  } catch (const Error&) {
  }
}

// A cache entry from bytes. The length and checksum in the header are rewritten to match the
// payload first: the checksum catches accidents, and a crafted entry carries a correct one, so
// the fuzzer should spend its time past it. (Checksum mismatches are unit-tested.)
inline void entry(const uint8_t* data, size_t size) {
  std::string bytes(reinterpret_cast<const char*>(data), size);
  reseal(bytes, "UPDRAFTE");
  try {
    std::unique_ptr<Graph> g = load_entry(bytes, kSeedKey, seed_params());
    (void)print_graph(*g);
  } catch (const Error&) {
  }
}

// What the model harness lets one input run: its inputs, arena and outputs each at most this.
inline constexpr size_t kModelRunBytes = size_t{4} << 20;

// A model file from bytes, resealed as for an entry. A model that loads is then run as a user
// would: shapes chosen from its signature (static sizes as they are, each symbol 2 clamped to
// its range, a size input likewise), checked with check_shapes, a plan built and, when its
// inputs, arena and outputs are small, run once on zeros with one thread. So the graph a file
// carries is exercised by the plan builder and the kernels too, not only by the parser.
inline void model(const uint8_t* data, size_t size) {
  std::string bytes(reinterpret_cast<const char*>(data), size);
  reseal(bytes, "UPDRAFTM");
  try {
    LoadedModel m = load_model(bytes);
    (void)m.signature.str();
    SymBindings b;
    for (const SymbolRange& r : m.signature.ranges) b[r.symbol] = std::clamp<int64_t>(2, r.min, r.max);
    std::vector<std::vector<int64_t>> shapes;
    size_t in_bytes = 0;
    for (const ModelIO& in : m.signature.inputs) {
      if (!in.binds.empty()) {
        shapes.push_back({b.at(in.binds)});
        continue;
      }
      shapes.push_back(shape_eval(in.type.shape, b));
      in_bytes = checked_add(in_bytes, shape_nbytes(shapes.back(), in.type.dtype, "fuzz"), "fuzz", "input bytes");
    }
    m.signature.check_shapes(shapes);
    if (in_bytes > kModelRunBytes) return;
    CompileOptions opts;
    opts.num_threads = 1;
    auto exe = Executable::from_optimized(std::move(m.graph), opts, m.load_ms);
    std::shared_ptr<const Plan> plan = exe->plan(shapes);
    if (plan->memory().arena_bytes > kModelRunBytes) return;
    std::vector<Tensor> ins, outs;
    std::vector<TensorView> in_views, out_views;
    for (size_t i = 0; i < shapes.size(); ++i) {
      const ModelIO& in = m.signature.inputs[i];
      if (!in.binds.empty()) {
        ins.emplace_back(DType::i64, std::vector<int64_t>{});
        *static_cast<int64_t*>(ins.back().data()) = shapes[i][0];
      } else {
        ins.emplace_back(in.type.dtype, shapes[i]);
      }
    }
    size_t out_bytes = 0;
    const std::vector<DType> out_dtypes = exe->output_dtypes();
    for (size_t k = 0; k < out_dtypes.size(); ++k)
      out_bytes = checked_add(out_bytes, shape_nbytes(plan->output_shapes()[k], out_dtypes[k], "fuzz"), "fuzz",
                              "output bytes");
    if (out_bytes > kModelRunBytes) return;
    for (size_t k = 0; k < out_dtypes.size(); ++k) outs.emplace_back(out_dtypes[k], plan->output_shapes()[k]);
    for (const Tensor& t : ins) in_views.push_back(t.view());
    for (const Tensor& t : outs) out_views.push_back(t.view());
    exe->run_plan(*plan, in_views, out_views);
  } catch (const Error&) {
  }
}

// A dimension expression: parse it, print it, and evaluate it under bindings at the edges of
// int64 (and a plain one).
inline void dim(const uint8_t* data, size_t size) {
  std::string text(reinterpret_cast<const char*>(data), size);
  try {
    Dim d = parse_dim(text);
    (void)d.str();
    std::vector<std::string> syms;
    d.collect_symbols(syms);
    for (int64_t v : {int64_t{7}, int64_t{-1}, int64_t{0}, INT64_MIN, INT64_MAX}) {
      SymBindings b;
      for (const std::string& s : syms) b[s] = v;
      try {
        (void)d.eval(b);
      } catch (const Error&) {
      }
    }
    (void)(d == parse_dim(d.str()));
  } catch (const Error&) {
  }
}

}  // namespace updraft::fuzz
