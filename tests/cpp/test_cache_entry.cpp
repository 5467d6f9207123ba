// Compile-cache entries (src/cache/entry.h): round trip, refit with new parameter values, and
// every defect a file can have (bad magic, other format version, truncation, corruption,
// other key, missing or mis-shaped parameters) reported as Error("cache", ...).
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>

#include "cache/entry.h"
#include "core/error.h"
#include "core/hash.h"
#include "ir/text.h"
#include "runtime/compiled_graph.h"
#include "test_util.h"

using namespace updraft;
using updraft::testing::random_tensor;

namespace {

// conv + batch_norm (folded into new weights), a linear whose [N,1]-shaped bias is reshaped
// (folded too), a constant scale that is a literal, and a transposed weight (folded).
const char* kModel = R"(graph(%x: f32[s0, 3, 8, 8]) {
  %w = constant f32[4, 3, 3, 3] random(seed=1)
  %mean = constant f32[4] random(seed=3)
  %var = constant f32[4] random(seed=4, lo=0.5, hi=2.0)
  %gamma = constant f32[4] random(seed=5)
  %beta = constant f32[4] random(seed=6)
  %lw = constant f32[16, 5] random(seed=7)
  %lb = constant f32[1, 5] random(seed=8)
  %scale = constant f32[] [0.5]
  %0 = conv2d(%x, %w) {padding=[1, 1]}
  %1 = batch_norm(%0, %mean, %var, %gamma, %beta) {eps=0.001}
  %2 = relu(%1)
  %3 = reshape(%2) {shape=[s0, 4, 64]}
  %4 = slice(%3) {dim=2, start=0, end=16}
  %5 = permute(%lw) {dims=[1, 0]}
  %6 = linear(%4, %5)
  %7 = add(%6, %lb)
  %8 = mul(%7, %scale)
  return (%8)
})";

// Parameter numbers for the constants the "caller" owns (everything but the literal scale).
const std::map<std::string, int> kParams = {{"w", 0}, {"mean", 1}, {"var", 2}, {"gamma", 3},
                                            {"beta", 4}, {"lw", 5}, {"lb", 6}};

// The model with parameters bound from `params` (or its own random data when empty).
std::unique_ptr<Graph> model(const std::vector<std::optional<Tensor>>& params = {}) {
  std::unique_ptr<Graph> g = parse_graph(kModel);
  for (Value* c : g->constants()) {
    auto it = kParams.find(c->name);
    if (it == kParams.end()) continue;
    c->source = it->second;
    if (!params.empty()) c->constant = *params[it->second];
  }
  return g;
}

std::vector<std::optional<Tensor>> params_of(const Graph& g) {
  std::vector<std::optional<Tensor>> p(kParams.size());
  for (Value* c : g.constants())
    if (c->source >= 0) p[c->source] = *c->constant;
  return p;
}

std::vector<std::optional<Tensor>> new_checkpoint(const std::vector<std::optional<Tensor>>& old, uint32_t seed) {
  std::vector<std::optional<Tensor>> p;
  for (const auto& t : old) p.push_back(random_tensor(t->dtype(), t->shape(), seed++, 0.5, 1.5));
  return p;
}

Tensor run(CompiledGraph& cg, const Tensor& x) {
  std::vector<std::vector<int64_t>> out = cg.prepare({x.shape()});
  Tensor y(DType::f32, out[0]);
  cg.run({x.view()}, {y.view()});
  return y;
}

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && std::memcmp(a.data(), b.data(), a.nbytes()) == 0;
}

std::string saved(const std::string& key = "k1") {
  auto cg = CompiledGraph::compile(model(), CompileOptions{});
  return save_entry(cg->graph(), {key, "test model", "", ""});
}

void expect_cache_error(const std::function<void()>& f, const std::string& what) {
  try {
    f();
    ADD_FAILURE() << "expected Error(\"cache\", ...) containing '" << what << "'";
  } catch (const Error& e) {
    EXPECT_EQ(e.component(), "cache") << e.what();
    EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
  }
}

}  // namespace

TEST(CacheEntry, RoundTripRunsBitIdenticalWithoutPasses) {
  auto g = model();
  auto params = params_of(*g);
  auto cold = CompiledGraph::compile(std::move(g), CompileOptions{});
  // The passes folded: batch_norm into the conv, the permute and the bias reshape.
  std::string bytes = save_entry(cold->graph(), {"k1", "test model", "", ""});
  auto warm = CompiledGraph::from_optimized(load_entry(bytes, "k1", params), CompileOptions{}, 0.0);
  EXPECT_EQ(print_graph(warm->graph()), print_graph(cold->graph()));
  for (int64_t batch : {1, 3}) {
    Tensor x = random_tensor(DType::f32, {batch, 3, 8, 8}, 11);
    EXPECT_TRUE(same_bits(run(*warm, x), run(*cold, x))) << "batch " << batch;
  }
  EntryMeta m = read_entry_meta(bytes);
  EXPECT_EQ(m.key, "k1");
  EXPECT_EQ(m.note, "test model");
  EXPECT_EQ(m.cpu, cpu_features());
}

TEST(CacheEntry, SameParametersMapTheStoredFolds) {
  auto g = model();
  auto params = params_of(*g);
  auto cold = CompiledGraph::compile(std::move(g), CompileOptions{});
  std::string bytes = save_entry(cold->graph(), {"k1", "", "", ""});
  LoadInfo info;
  auto warm = CompiledGraph::from_optimized(load_entry(bytes, "k1", params, &info), CompileOptions{}, 0.0);
  EXPECT_TRUE(info.mapped);
  EXPECT_EQ(info.folded, 4u);  // conv weight and bias, the permuted linear weight, the reshaped bias
  EXPECT_EQ(info.replay_ms, 0.0);
  Tensor x = random_tensor(DType::f32, {2, 3, 8, 8}, 13);
  EXPECT_TRUE(same_bits(run(*warm, x), run(*cold, x)));
}

TEST(CacheEntry, FoldsOverTheSizeBoundAreOnlyRecipes) {
  auto g = model();
  auto params = params_of(*g);
  auto cold = CompiledGraph::compile(std::move(g), CompileOptions{});
  SaveOptions opts;
  opts.max_folded_bytes = 0;
  std::string small = save_entry(cold->graph(), {"k1", "", "", ""}, opts);
  EXPECT_LT(small.size(), save_entry(cold->graph(), {"k1", "", "", ""}).size());
  LoadInfo info;
  auto warm = CompiledGraph::from_optimized(load_entry(small, "k1", params, &info), CompileOptions{}, 0.0);
  EXPECT_FALSE(info.mapped);
  EXPECT_EQ(info.folded, 4u);
  Tensor x = random_tensor(DType::f32, {2, 3, 8, 8}, 14);
  EXPECT_TRUE(same_bits(run(*warm, x), run(*cold, x)));
}

TEST(CacheEntry, LoadFromAMappedFile) {
  auto g = model();
  auto params = params_of(*g);
  auto cold = CompiledGraph::compile(std::move(g), CompileOptions{});
  std::string path = ::testing::TempDir() + "updraft_entry_test.updraft";
  {
    std::string bytes = save_entry(cold->graph(), {"k1", "", "", ""});
    std::ofstream(path, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  }
  LoadInfo info;
  auto warm = CompiledGraph::from_optimized(load_entry_file(path, "k1", params, &info), CompileOptions{}, 0.0);
  std::remove(path.c_str());  // the mapping outlives the name, as after an eviction
  EXPECT_TRUE(info.mapped);
  Tensor x = random_tensor(DType::f32, {3, 3, 8, 8}, 15);
  EXPECT_TRUE(same_bits(run(*warm, x), run(*cold, x)));
  expect_cache_error([&] { load_entry_file(path, "k1", params); }, "cannot open entry");
}

TEST(CacheEntry, NewCheckpointIsRefitAndFoldsAreRecomputed) {
  std::string bytes = saved();
  auto fresh = new_checkpoint(params_of(*model()), 100);
  LoadInfo info;
  auto warm = CompiledGraph::from_optimized(load_entry(bytes, "k1", fresh, &info), CompileOptions{}, 0.0);
  EXPECT_FALSE(info.mapped);  // other fingerprints: the stored folds are not used
  EXPECT_EQ(info.folded, 4u);
  auto cold = CompiledGraph::compile(model(fresh), CompileOptions{});  // what a full compile gives
  Tensor x = random_tensor(DType::f32, {2, 3, 8, 8}, 12);
  Tensor a = run(*warm, x), b = run(*cold, x);
  EXPECT_TRUE(same_bits(a, b));
  // And it is not what the old weights give.
  auto old = CompiledGraph::compile(model(), CompileOptions{});
  EXPECT_FALSE(same_bits(a, run(*old, x)));
}

TEST(CacheEntry, EntriesStoreNoParameterValues) {
  // Parameters are references. Only folded constants computed from them are stored, and with
  // max_folded_bytes = 0 not even those: then no parameter's bytes are in the entry.
  auto g = model();
  auto params = params_of(*g);
  auto cg = CompiledGraph::compile(std::move(g), CompileOptions{});
  SaveOptions opts;
  opts.max_folded_bytes = 0;
  std::string bytes = save_entry(cg->graph(), {"k1", "", "", ""}, opts);
  for (size_t j = 0; j < params.size(); ++j) {
    const Tensor& p = *params[j];
    if (p.nbytes() < 16) continue;  // too short to be meaningful as a substring
    std::string raw(static_cast<const char*>(p.data()), p.nbytes());
    EXPECT_EQ(bytes.find(raw), std::string::npos) << "parameter " << j;
  }
}

TEST(CacheEntry, DefectsAreCacheErrors) {
  std::string good = saved();
  auto params = params_of(*model());
  expect_cache_error([&] { load_entry("hello", "k1", params); }, "not an updraft cache entry");
  expect_cache_error([&] { load_entry(good.substr(0, 20), "k1", params); }, "truncated");
  expect_cache_error([&] { load_entry(good.substr(0, good.size() - 7), "k1", params); }, "truncated");
  std::string flipped = good;
  flipped[flipped.size() / 2] ^= 0x20;
  expect_cache_error([&] { load_entry(flipped, "k1", params); }, "corrupt");
  std::string version = good;
  uint32_t v = kEntryFormatVersion + 1;
  std::memcpy(&version[8], &v, 4);
  expect_cache_error([&] { load_entry(version, "k1", params); }, "format version");
  expect_cache_error([&] { load_entry(good + "x", "k1", params); }, "stray bytes");
  expect_cache_error([&] { load_entry(good, "other", params); }, "expected other");
  auto missing = params;
  missing[2].reset();
  expect_cache_error([&] { load_entry(good, "k1", missing); }, "needs parameter 2");
  auto reshaped = params;
  reshaped[5] = random_tensor(DType::f32, {5, 16}, 1);
  expect_cache_error([&] { load_entry(good, "k1", reshaped); }, "parameter 5 is f32[5, 16]");
}

TEST(CacheEntry, CorruptStoredFoldIsCorrupt) {
  std::string good = saved();
  auto params = params_of(*model());
  std::string bad = good;
  bad[bad.size() - 1] ^= 0x01;  // the last byte of the last stored folded constant
  expect_cache_error([&] { load_entry(bad, "k1", params); }, "corrupt");
}

TEST(Hash, Xxh64ReferenceValues) {
  EXPECT_EQ(xxh64("", 0), 0xEF46DB3751D8E999ull);
  EXPECT_EQ(xxh64("a", 1), 0xD24EC4F1A98C6E5Bull);
  const char* s = "Nobody inspects the spammish repetition";
  EXPECT_EQ(xxh64(s, std::strlen(s)), 0xFBCEA83C8A378BF1ull);
}

TEST(CacheEntry, ExternDataNeedsAResolver) {
  try {
    parse_graph("graph() {\n  %c = constant f32[2] extern(p0)\n  return (%c)\n}");
    ADD_FAILURE() << "extern without a resolver parsed";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("needs a resolver"), std::string::npos) << e.what();
  }
}
