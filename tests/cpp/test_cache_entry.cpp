// Compile-cache entries (src/cache/entry.h): round trip, refit with new parameter values, and
// every defect a file can have (bad magic, other format version, truncation, corruption,
// other key, missing or mis-shaped parameters) reported as Error("cache", ...).
#include <gtest/gtest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <utility>
#include <vector>

#include "cache/entry.h"
#include "core/error.h"
#include "core/hash.h"
#include "ir/text.h"
#include "runtime/executable.h"
#include "test_util.h"

using namespace updraft;
using updraft::testing::random_tensor;
using updraft::testing::same_bits;
using updraft::testing::test_temp_path;

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

Tensor run(Executable& cg, const Tensor& x) {
  std::vector<std::vector<int64_t>> out = cg.prepare({x.shape()});
  Tensor y(DType::f32, out[0]);
  cg.run({x.view()}, {y.view()});
  return y;
}

std::string saved(const std::string& key = "k1") {
  auto cg = Executable::compile(model(), CompileOptions{});
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
  auto cold = Executable::compile(std::move(g), CompileOptions{});
  // The passes folded: batch_norm into the conv, the permute and the bias reshape.
  std::string bytes = save_entry(cold->graph(), {"k1", "test model", "", ""});
  auto warm = Executable::from_optimized(load_entry(bytes, "k1", params), CompileOptions{}, 0.0);
  EXPECT_EQ(print_graph(warm->graph()), print_graph(cold->graph()));
  for (int64_t batch : {1, 3}) {
    Tensor x = random_tensor(DType::f32, {batch, 3, 8, 8}, 11);
    EXPECT_TRUE(same_bits(run(*warm, x), run(*cold, x))) << "batch " << batch;
  }
  EntryMeta m = read_entry_meta(bytes);
  EXPECT_EQ(m.key, "k1");
  EXPECT_EQ(m.note, "test model");
  EXPECT_EQ(m.cpu, cpu_features());
  // A load is one record, and it skipped nothing (explain lists skipped passes).
  ASSERT_EQ(warm->pass_log().size(), 1u);
  EXPECT_EQ(warm->pass_log()[0].name, "cache_load");
  EXPECT_FALSE(warm->pass_log()[0].skipped);
}

TEST(CacheEntry, SameParametersMapTheStoredFolds) {
  auto g = model();
  auto params = params_of(*g);
  auto cold = Executable::compile(std::move(g), CompileOptions{});
  std::string bytes = save_entry(cold->graph(), {"k1", "", "", ""});
  LoadInfo info;
  auto warm = Executable::from_optimized(load_entry(bytes, "k1", params, &info), CompileOptions{}, 0.0);
  EXPECT_TRUE(info.mapped);
  EXPECT_EQ(info.folded, 4u);  // conv weight and bias, the permuted linear weight, the reshaped bias
  EXPECT_EQ(info.replay_ms, 0.0);
  Tensor x = random_tensor(DType::f32, {2, 3, 8, 8}, 13);
  EXPECT_TRUE(same_bits(run(*warm, x), run(*cold, x)));
}

TEST(CacheEntry, FoldsOverTheSizeBoundAreOnlyRecipes) {
  auto g = model();
  auto params = params_of(*g);
  auto cold = Executable::compile(std::move(g), CompileOptions{});
  SaveOptions opts;
  opts.max_folded_bytes = 0;
  std::string small = save_entry(cold->graph(), {"k1", "", "", ""}, opts);
  EXPECT_LT(small.size(), save_entry(cold->graph(), {"k1", "", "", ""}).size());
  LoadInfo info;
  auto warm = Executable::from_optimized(load_entry(small, "k1", params, &info), CompileOptions{}, 0.0);
  EXPECT_FALSE(info.mapped);
  EXPECT_EQ(info.folded, 4u);
  Tensor x = random_tensor(DType::f32, {2, 3, 8, 8}, 14);
  EXPECT_TRUE(same_bits(run(*warm, x), run(*cold, x)));
}

TEST(CacheEntry, LoadFromAMappedFile) {
  auto g = model();
  auto params = params_of(*g);
  auto cold = Executable::compile(std::move(g), CompileOptions{});
  std::string path = test_temp_path("updraft_entry_test.updraft");
  {
    std::string bytes = save_entry(cold->graph(), {"k1", "", "", ""});
    std::ofstream(path, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    ::chmod(path.c_str(), 0600);
  }
  LoadInfo info;
  auto warm = Executable::from_optimized(load_entry_file(path, "k1", params, &info), CompileOptions{}, 0.0);
  std::remove(path.c_str());  // the loaded entry outlives the name, as after an eviction
  EXPECT_TRUE(info.mapped);
  Tensor x = random_tensor(DType::f32, {3, 3, 8, 8}, 15);
  EXPECT_TRUE(same_bits(run(*warm, x), run(*cold, x)));
  expect_cache_error([&] { load_entry_file(path, "k1", params); }, "cannot open entry");
}

TEST(CacheEntry, NewCheckpointIsRefitAndFoldsAreRecomputed) {
  std::string bytes = saved();
  auto fresh = new_checkpoint(params_of(*model()), 100);
  LoadInfo info;
  auto warm = Executable::from_optimized(load_entry(bytes, "k1", fresh, &info), CompileOptions{}, 0.0);
  EXPECT_FALSE(info.mapped);  // other fingerprints: the stored folds are not used
  EXPECT_EQ(info.folded, 4u);
  auto cold = Executable::compile(model(fresh), CompileOptions{});  // what a full compile gives
  Tensor x = random_tensor(DType::f32, {2, 3, 8, 8}, 12);
  Tensor a = run(*warm, x), b = run(*cold, x);
  EXPECT_TRUE(same_bits(a, b));
  // And it is not what the old weights give.
  auto old = Executable::compile(model(), CompileOptions{});
  EXPECT_FALSE(same_bits(a, run(*old, x)));
}

TEST(CacheEntry, EntriesStoreNoParameterValues) {
  // Parameters are references. Only folded constants computed from them are stored, and with
  // max_folded_bytes = 0 not even those: then no parameter's bytes are in the entry.
  auto g = model();
  auto params = params_of(*g);
  auto cg = Executable::compile(std::move(g), CompileOptions{});
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

// Reference values from xxHash's own XXH3_64bits (seed 0); the buffer is byte i = 31 i + 7.
// The lengths cover every path of the spec: 0, 1-3, 4-8, 9-16, 17-128, 129-240, and the long
// loop with a partial last stripe, an exact block, a block plus one byte, and many blocks.
TEST(Hash, Xxh3ReferenceValues) {
  EXPECT_EQ(xxh3_64("", 0), 0x2D06800538D394C2ull);
  EXPECT_EQ(xxh3_64("a", 1), 0xE6C632B61E964E1Full);
  const char* s = "Nobody inspects the spammish repetition";
  EXPECT_EQ(xxh3_64(s, std::strlen(s)), 0x6CB00603B5CC47E9ull);
  std::vector<unsigned char> buf(100000);
  for (size_t i = 0; i < buf.size(); ++i) buf[i] = static_cast<unsigned char>(i * 31 + 7);
  const std::pair<size_t, uint64_t> want[] = {
      {3, 0x15f7093b173d005cull},    {8, 0xdec6a9a43575982eull},    {16, 0x7e484c18d74895d0ull},
      {100, 0x8c97158042fbf926ull},  {200, 0x12fdb864685f344dull},  {240, 0xccc7375172c41f03ull},
      {241, 0x0b3b630948ce4a00ull},  {1024, 0x23bc880ebf0d29c6ull}, {1025, 0xc09fdfbc398c7d82ull},
      {4103, 0xad0017645a159db5ull}, {100000, 0xccf90df7e7e37036ull}};
  for (const auto& [n, h] : want) {
    EXPECT_EQ(xxh3_64(buf.data(), n), h) << n << " bytes";
    EXPECT_EQ(detail::xxh3_64_scalar(buf.data(), n), h) << n << " bytes, scalar";
  }
}

TEST(Hash, Xxh3SimdAndScalarAgreeAtEveryLengthAndOffset) {
  std::vector<unsigned char> buf(4200);
  uint32_t x = 12345;
  for (auto& b : buf) b = static_cast<unsigned char>((x = x * 1103515245u + 12345u) >> 24);
  for (size_t off : {0, 1, 7}) {
    for (size_t n = 0; n + off <= buf.size(); n += (n < 2200 ? 1 : 97))
      ASSERT_EQ(xxh3_64(buf.data() + off, n), detail::xxh3_64_scalar(buf.data() + off, n)) << n << " at " << off;
  }
}

TEST(CacheEntry, ExternDataNeedsAResolver) {
  try {
    parse_graph("graph() {\n  %c = constant f32[2] extern(p0)\n  return (%c)\n}");
    ADD_FAILURE() << "extern without a resolver parsed";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("needs a resolver"), std::string::npos) << e.what();
  }
}

namespace {

// conv + batch_norm with a 9.4 MB weight: the stored fold is large enough (over 8 MB) that a
// load checksums the entry on a second thread while it fingerprints the parameters.
// A 9.4 MB weight the compile folds (a transpose: the stored fold is a permuted copy).
const char* kLargeModel = R"(graph(%x: f32[4, 1536]) {
  %w = constant f32[1536, 1536] random(seed=1)
  %b = constant f32[1536] random(seed=3)
  %0 = permute(%w) {dims=[1, 0]}
  %1 = matmul(%x, %0)
  %2 = add(%1, %b)
  return (%2)
})";

std::unique_ptr<Graph> large_model() {
  std::unique_ptr<Graph> g = parse_graph(kLargeModel);
  int j = 0;
  for (Value* c : g->constants()) c->source = j++;
  return g;
}

std::vector<std::optional<Tensor>> large_params(const Graph& g) {
  std::vector<std::optional<Tensor>> p;
  for (Value* c : g.constants()) p.push_back(*c->constant);
  return p;
}

std::string write_temp(const std::string& name, const std::string& bytes) {
  std::string path = test_temp_path(name);
  std::ofstream(path, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  ::chmod(path.c_str(), 0600);  // as the cache writes it: a load refuses files others may write (any umask)
  return path;
}

}  // namespace

TEST(CacheEntry, LargeMappedEntryIsVerifiedInParallelAndCorruptionIsFound) {
  auto g = large_model();
  auto params = large_params(*g);
  auto cold = Executable::compile(std::move(g), CompileOptions{});
  std::string bytes = save_entry(cold->graph(), {"big", "", "", ""});
  ASSERT_GT(bytes.size(), size_t{9} << 20);  // the folded weight is stored
  Tensor x = random_tensor(DType::f32, {4, 1536}, 21);
  Tensor want = run(*cold, x);

  std::string path = write_temp("updraft_large_entry.updraft", bytes);
  LoadInfo info;
  auto warm = Executable::from_optimized(load_entry_file(path, "big", params, &info), CompileOptions{}, 0.0);
  EXPECT_TRUE(info.mapped);
  EXPECT_TRUE(same_bits(run(*warm, x), want));

  // One flipped bit anywhere in the stored folded weight (mapped, never replayed) is corrupt.
  for (size_t at : {bytes.size() / 3, bytes.size() - 1}) {
    std::string bad = bytes;
    bad[at] ^= 0x10;
    std::string bad_path = write_temp("updraft_large_entry_bad.updraft", bad);
    expect_cache_error([&] { load_entry_file(bad_path, "big", params); }, "corrupt");
    std::remove(bad_path.c_str());
  }
  // A truncated file is truncated.
  std::string cut_path = write_temp("updraft_large_entry_cut.updraft", bytes.substr(0, bytes.size() - 4096));
  expect_cache_error([&] { load_entry_file(cut_path, "big", params); }, "truncated");
  std::remove(cut_path.c_str());

  // One changed weight element: the fingerprints differ, the fold is replayed from the new
  // weights, bit-identical to a fresh compile with them.
  auto changed = params;
  Tensor w(DType::f32, params[0]->shape());
  std::memcpy(w.data(), params[0]->data(), w.nbytes());
  static_cast<float*>(w.data())[12345] += 1.0f;
  changed[0] = w;
  LoadInfo info2;
  auto refit = Executable::from_optimized(load_entry_file(path, "big", changed, &info2), CompileOptions{}, 0.0);
  EXPECT_FALSE(info2.mapped);
  auto g2 = large_model();
  for (Value* c : g2->constants()) c->constant = *changed[static_cast<size_t>(c->source)];
  auto fresh = Executable::compile(std::move(g2), CompileOptions{});
  Tensor got = run(*refit, x);
  EXPECT_TRUE(same_bits(got, run(*fresh, x)));
  EXPECT_FALSE(same_bits(got, want));
  std::remove(path.c_str());
}

// A loaded entry is the process's own copy: writing the file in place (same inode) or truncating
// it changes nothing. A mapping shared the page cache: the first changed a running model's
// constants, the second killed the process with SIGBUS at the next read of them.
TEST(CacheEntry, LoadedFileEntryIsPrivateToTheProcess) {
  auto g = model();
  auto params = params_of(*g);
  auto cold = Executable::compile(std::move(g), CompileOptions{});
  std::string bytes = save_entry(cold->graph(), {"k1", "", "", ""});
  std::string path = write_temp("updraft_private_entry.updraft", bytes);
  LoadInfo info;
  auto warm = Executable::from_optimized(load_entry_file(path, "k1", params, &info), CompileOptions{}, 0.0);
  ASSERT_TRUE(info.mapped);  // the stored folds are used: their bytes are the entry's
  Tensor x = random_tensor(DType::f32, {2, 3, 8, 8}, 31);
  Tensor want = run(*cold, x);
  {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    std::string junk(bytes.size() - 32, '\x42');
    f.seekp(32);
    f.write(junk.data(), static_cast<std::streamsize>(junk.size()));
  }
  EXPECT_TRUE(same_bits(run(*warm, x), want));  // the first plan, built after the write
  ASSERT_EQ(::truncate(path.c_str(), 0), 0);
  Tensor x2 = random_tensor(DType::f32, {3, 3, 8, 8}, 32);
  EXPECT_TRUE(same_bits(run(*warm, x2), run(*cold, x2)));  // another plan, after the truncation
  std::remove(path.c_str());
}

// Only a regular file this user owns and no one else may write is loaded (docs/format.md, "Trust").
TEST(CacheEntry, FileOthersCouldHaveWrittenIsRefused) {
  auto params = params_of(*model());
  std::string bytes = saved();
  std::string path = write_temp("updraft_trusted_entry.updraft", bytes);
  load_entry_file(path, "k1", params);  // as written: loads

  std::string link = test_temp_path("updraft_link_entry.updraft");
  std::remove(link.c_str());
  ASSERT_EQ(::symlink(path.c_str(), link.c_str()), 0);
  expect_cache_error([&] { load_entry_file(link, "k1", params); }, "is a symbolic link");
  std::remove(link.c_str());

  std::string fifo = test_temp_path("updraft_fifo_entry.updraft");
  std::remove(fifo.c_str());
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  expect_cache_error([&] { load_entry_file(fifo, "k1", params); }, "is not a regular file (a FIFO)");  // not a hang
  std::remove(fifo.c_str());

  std::string dir = test_temp_path("updraft_dir_entry.updraft");
  ::rmdir(dir.c_str());
  ASSERT_EQ(::mkdir(dir.c_str(), 0700), 0);
  expect_cache_error([&] { load_entry_file(dir, "k1", params); }, "is not a regular file (a directory)");
  ::rmdir(dir.c_str());

  for (mode_t mode : {0620, 0602, 0666}) {
    ASSERT_EQ(::chmod(path.c_str(), mode), 0);
    char want[64];
    std::snprintf(want, sizeof want, "writable by other users (mode %04o)", static_cast<unsigned>(mode));
    expect_cache_error([&] { load_entry_file(path, "k1", params); }, want);
  }
  ASSERT_EQ(::chmod(path.c_str(), 0644), 0);
  load_entry_file(path, "k1", params);  // readable by others is fine: nothing in it is secret

  if (::geteuid() == 0) {  // giving a file away needs root
    ASSERT_EQ(::chown(path.c_str(), 65534, 65534), 0);
    expect_cache_error([&] { load_entry_file(path, "k1", params); }, "is owned by user 65534, not by this user (0)");
  }
  std::remove(path.c_str());
}
