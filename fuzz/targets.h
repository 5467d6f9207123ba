// The fuzz harnesses, shared by the libFuzzer targets (fuzz/fuzz_*.cpp) and the unit test that
// replays the inputs the fuzzers found (tests/cpp/test_hardening_parse.cpp, FuzzRegressions), so
// a regression input runs exactly the code that crashed.
//
// Each harness feeds bytes to one reader and accepts exactly one outcome for bad input: an
// updraft Error. Anything else (a signal, a sanitizer report, another exception type, an
// allocation past the fuzzer's limit) is a finding.
#pragma once
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "cache/entry.h"
#include "core/error.h"
#include "core/hash.h"
#include "ir/dim.h"
#include "ir/text.h"
#include "runtime/executable.h"

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
  if (bytes.size() >= 32 && bytes.compare(0, 8, "UPDRAFTE") == 0) {
    uint64_t length = bytes.size() - 32;
    uint64_t sum = xxh3_64(bytes.data() + 32, length);
    std::memcpy(&bytes[16], &length, 8);
    std::memcpy(&bytes[24], &sum, 8);
  }
  try {
    std::unique_ptr<Graph> g = load_entry(bytes, kSeedKey, seed_params());
    (void)print_graph(*g);
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
