// Compiled model files (src/model/model_file.h): a real graph saved and loaded (mapped and read)
// runs bit-identical to the Executable it came from; every defect a file can have (truncated,
// corrupted, newer format, CPU features this machine lacks, bad magic, not a regular file, bad
// signature lines, references to missing blobs, generated data) is refused with an
// Error("model", ...) that says what is wrong; ModelSignature::check_shapes names the input and
// the dim. Files are altered through their fields and resealed (fuzz/targets.h: reseal), so a
// test reaches the check it aims at rather than the checksum.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "../../fuzz/targets.h"
#include "cache/container.h"
#include "core/cpu_features.h"
#include "core/error.h"
#include "ir/text.h"
#include "model/model_file.h"
#include "runtime/executable.h"
#include "test_util.h"

using namespace updraft;
using updraft::testing::random_tensor;
using updraft::testing::same_bits;
using updraft::testing::test_temp_path;

namespace {

// conv + batch_norm (folded into new weights), a transposed weight (folded), a literal scale;
// two outputs, one batch symbol.
const char* kGraph = R"(graph(%x: f32[s0, 3, 8, 8]) {
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
  return (%8, %2)
})";

CompileOptions opts() {
  CompileOptions o;
  o.num_threads = 1;
  return o;
}

ModelMeta meta() {
  ModelMeta m;
  m.note = "test model";
  m.output_names = {"logits", "features"};
  m.ranges = {{"s0", 1, 16}};
  return m;
}

std::shared_ptr<Executable> compiled() { return Executable::compile(parse_graph(kGraph), opts()); }

const std::string& saved() {
  static const std::string bytes = save_model(compiled()->graph(), meta());
  return bytes;
}

std::string temp_path(const std::string& name) { return test_temp_path(name); }

std::string write_file(const std::string& name, const std::string& bytes) {
  std::string path = temp_path(name);
  std::remove(path.c_str());
  std::ofstream out(path, std::ios::binary);
  out << bytes;
  out.close();
  EXPECT_TRUE(out.good()) << path;
  return path;
}

std::vector<Tensor> run(Executable& exe, const Tensor& x) {
  auto shapes = exe.prepare({x.shape()});
  std::vector<Tensor> outs;
  std::vector<TensorView> views;
  for (size_t k = 0; k < shapes.size(); ++k) outs.emplace_back(exe.output_dtypes()[k], shapes[k]);
  for (const Tensor& t : outs) views.push_back(t.view());
  exe.run({x.view()}, views);
  return outs;
}

void expect_model_error(const std::function<void()>& f, const std::vector<std::string>& words) {
  try {
    f();
    ADD_FAILURE() << "expected Error(\"model\", ...) containing '" << words.front() << "'";
  } catch (const Error& e) {
    EXPECT_EQ(e.component(), "model") << e.what();
    for (const std::string& w : words) EXPECT_NE(std::string(e.what()).find(w), std::string::npos) << e.what();
  }
}

// A file's bytes refused the same way from memory, read from disk and mapped.
void expect_refused(const std::string& bytes, const std::vector<std::string>& words) {
  SCOPED_TRACE(words.front());
  expect_model_error([&] { load_model(bytes); }, words);
  const std::string path = write_file("refused.updraft", bytes);
  expect_model_error([&] { load_model_file(path, false); }, words);
  expect_model_error([&] { load_model_file(path, true); }, words);
  std::remove(path.c_str());
}

// The fields of a container in file order (cache/container.h: u32 name length, name, u64 data
// length, data), and a container written from them: a valid header, length and checksum.
using FieldList = std::vector<std::pair<std::string, std::string>>;

FieldList fields_of(const std::string& bytes) {
  FieldList out;
  uint32_t n = 0;
  std::memcpy(&n, bytes.data() + 12, 4);
  size_t at = container::kHeaderBytes;
  for (uint32_t i = 0; i < n; ++i) {
    uint32_t nlen = 0;
    uint64_t dlen = 0;
    std::memcpy(&nlen, bytes.data() + at, 4);
    std::string name = bytes.substr(at + 4, nlen);
    std::memcpy(&dlen, bytes.data() + at + 4 + nlen, 8);
    out.emplace_back(name, bytes.substr(at + 4 + nlen + 8, dlen));
    at += 4 + nlen + 8 + dlen;
  }
  EXPECT_EQ(at, bytes.size());
  return out;
}

std::string write_fields(const FieldList& fields) {
  const container::Kind kind{"UPDRAFTM", kModelFormatVersion, "model", "model file", "model file", ""};
  container::Writer w(kind, 0);
  for (const auto& [name, data] : fields) w.add(name, data);
  return w.finish();
}

std::string& field_of(FieldList& fields, const std::string& name) {
  for (auto& [n, d] : fields)
    if (n == name) return d;
  ADD_FAILURE() << "no field " << name;
  static std::string none;
  return none;
}

// The saved file with one field's data replaced.
std::string with_field(const std::string& name, const std::string& data) {
  FieldList f = fields_of(saved());
  field_of(f, name) = data;
  return write_fields(f);
}

}  // namespace

TEST(ModelFile, RoundTripMappedAndReadRunsBitIdentical) {
  auto orig = compiled();
  const std::string path = write_file("roundtrip.updraft", saved());
  for (bool map : {true, false}) {
    SCOPED_TRACE(map ? "mapped" : "read");
    LoadedModel lm = load_model_file(path, map);
    EXPECT_EQ(lm.mapped, map);
    EXPECT_EQ(lm.file_bytes, saved().size());
    EXPECT_GT(lm.constant_bytes, 0u);
    EXPECT_LT(lm.constant_bytes, lm.file_bytes);
    EXPECT_EQ(lm.meta.note, "test model");
    EXPECT_EQ(lm.meta.requires_cpu, engine_required_cpu_features());
    ASSERT_EQ(lm.signature.inputs.size(), 1u);
    EXPECT_EQ(lm.signature.inputs[0].name, "x");
    EXPECT_EQ(lm.signature.inputs[0].type.str(), "f32[s0, 3, 8, 8]");
    ASSERT_EQ(lm.signature.outputs.size(), 2u);
    EXPECT_EQ(lm.signature.outputs[0].name, "logits");
    EXPECT_EQ(lm.signature.outputs[1].name, "features");
    ASSERT_EQ(lm.signature.ranges.size(), 1u);
    EXPECT_EQ(lm.signature.ranges[0].symbol, "s0");
    EXPECT_EQ(lm.signature.ranges[0].min, 1);
    EXPECT_EQ(lm.signature.ranges[0].max, 16);
    // Every constant is stored by value and used in place: aligned, inside the file's memory.
    for (const Value* c : lm.graph->constants())
      if (c->constant->nbytes() > 0)
        EXPECT_EQ(reinterpret_cast<uintptr_t>(c->constant->data()) % container::kAlign, 0u) << c->name;
    auto exe = Executable::from_optimized(std::move(lm.graph), opts(), lm.load_ms);
    for (int64_t batch : {1, 5}) {
      Tensor x = random_tensor(DType::f32, {batch, 3, 8, 8}, static_cast<uint32_t>(batch));
      std::vector<Tensor> want = run(*orig, x), got = run(*exe, x);
      ASSERT_EQ(got.size(), want.size());
      for (size_t k = 0; k < want.size(); ++k) EXPECT_TRUE(same_bits(got[k], want[k])) << "output " << k;
    }
  }
  // From memory too.
  LoadedModel lm = load_model(saved());
  EXPECT_FALSE(lm.mapped);
  auto exe = Executable::from_optimized(std::move(lm.graph), opts(), lm.load_ms);
  Tensor x = random_tensor(DType::f32, {2, 3, 8, 8}, 9);
  EXPECT_TRUE(same_bits(run(*exe, x)[0], run(*compiled(), x)[0]));
  std::remove(path.c_str());
}

TEST(ModelFile, TruncatedIsRefused) {
  const std::string& b = saved();
  for (size_t cut : {size_t{8}, size_t{16}, size_t{31}}) {
    SCOPED_TRACE(cut);
    expect_refused(b.substr(0, cut), {"model file is truncated", "shorter than its header"});
  }
  for (size_t cut : {size_t{32}, size_t{33}, b.size() / 2, b.size() - 64, b.size() - 1}) {
    SCOPED_TRACE(cut);
    expect_refused(b.substr(0, cut), {"model file is truncated", "payload bytes of"});
  }
  // Shorter than the magic: not a model file at all.
  expect_refused(b.substr(0, 5), {"not an updraft model file (bad magic)"});
}

TEST(ModelFile, FlippedByteAnywhereInThePayloadFailsTheChecksum) {
  const std::string& b = saved();
  for (size_t i = container::kHeaderBytes; i < b.size(); ++i) {
    std::string c = b;
    c[i] ^= 0x20;
    try {
      load_model(c);
      ADD_FAILURE() << "byte " << i << " flipped: loaded";
    } catch (const Error& e) {
      EXPECT_EQ(e.component(), "model");
      ASSERT_NE(std::string(e.what()).find("model file is corrupt (checksum mismatch)"), std::string::npos)
          << "byte " << i << ": " << e.what();
    }
  }
  std::string c = b;
  c.back() ^= 1;
  expect_refused(c, {"model file is corrupt (checksum mismatch)"});
  // A flipped header byte: each is refused too, by the check its field has.
  for (size_t i = 0; i < container::kHeaderBytes; ++i) {
    std::string h = b;
    h[i] ^= 0x20;
    expect_model_error([&] { load_model(h); }, {"model file"});
  }
}

TEST(ModelFile, NewerFormatVersionIsRefusedSayingSo) {
  std::string b = saved();
  const uint32_t newer = kModelFormatVersion + 1;
  std::memcpy(&b[8], &newer, 4);
  fuzz::reseal(b, "UPDRAFTM");  // only the version is wrong
  expect_refused(b, {"model file has format version " + std::to_string(newer),
                     "this engine reads version " + std::to_string(kModelFormatVersion), "export the model again"});
}

TEST(ModelFile, MissingCpuFeatureIsRefusedSayingWhich) {
  // A name the engine's table does not know counts as missing (a newer engine's feature).
  expect_refused(with_field("requires", "avx2,fma,amx-tile"),
                 {"model file needs CPU features {avx2,fma,amx-tile}", "this CPU lacks {amx-tile}",
                  "run it on a CPU that has them"});
  // A feature the table knows but this CPU lacks, when there is one.
  const std::string have = "," + cpu_features() + ",";
  for (const char* f : {"avx512bf16", "avx512vnni", "avx512bw", "avx512f"}) {
    if (have.find("," + std::string(f) + ",") != std::string::npos) continue;
    expect_refused(with_field("requires", std::string("avx2,") + f), {"this CPU lacks {" + std::string(f) + "}"});
    break;
  }
  // What it needs and has: loads.
  EXPECT_NO_THROW(load_model(with_field("requires", cpu_features())));
}

TEST(ModelFile, NotAModelFileIsRefused) {
  std::string b = saved();
  std::memcpy(&b[0], "UPDRAFTE", 8);  // a compile-cache entry's magic
  expect_refused(b, {"not an updraft model file (bad magic)"});
  expect_refused("", {"not an updraft model file (bad magic)"});
  expect_refused("graph(%x: f32[2]) {\n  return (%x)\n}\n", {"not an updraft model file (bad magic)"});
  // A real cache entry is not a model file.
  expect_refused(fuzz::fresh_seed_entry(), {"not an updraft model file (bad magic)"});
}

TEST(ModelFile, StrayBytesAfterThePayloadAreRefused) {
  expect_refused(saved() + "x", {"model file has 1 stray bytes after its payload"});
}

TEST(ModelFile, MissingFileDirectoryAndFifoAreRefusedWithoutWaiting) {
  const std::string missing = temp_path("missing.updraft");
  std::remove(missing.c_str());
  for (bool map : {true, false}) {
    expect_model_error([&] { load_model_file(missing, map); }, {"cannot open model file " + missing});
    const std::string dir = temp_path("dir.updraft");
    ::rmdir(dir.c_str());
    ASSERT_EQ(::mkdir(dir.c_str(), 0700), 0);
    expect_model_error([&] { load_model_file(dir, map); }, {"is not a regular file (a directory)"});
    ::rmdir(dir.c_str());
    // Opening a FIFO for reading waits for a writer unless refused first: this must return.
    const std::string fifo = temp_path("fifo.updraft");
    std::remove(fifo.c_str());
    ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
    expect_model_error([&] { load_model_file(fifo, map); }, {"is not a regular file (a FIFO)"});
    std::remove(fifo.c_str());
  }
}

TEST(ModelFile, EmptyAndShortFilesAreRefusedMappedOrRead) {
  for (bool map : {true, false}) {
    const std::string empty = write_file("empty.updraft", "");
    expect_model_error([&] { load_model_file(empty, map); }, {"not an updraft model file (bad magic)"});
    const std::string shrt = write_file("short.updraft", saved().substr(0, 20));
    expect_model_error([&] { load_model_file(shrt, map); }, {"is truncated (20 bytes, shorter than its header)"});
    std::remove(empty.c_str());
    std::remove(shrt.c_str());
  }
}

// A large file given by mistake (or a sparse one) is refused from its header: read, it used to be
// allocated and read whole first (a 1 TiB file: "[tensor] out of memory").
TEST(ModelFile, LargeFileIsRefusedFromItsHeaderBeforeItIsRead) {
  const uint64_t big = uint64_t{1} << 40;
  for (const std::string& head : {std::string(32, 'x'), saved().substr(0, 32)}) {
    const std::string path = write_file("sparse.updraft", head);
    if (::truncate(path.c_str(), static_cast<off_t>(big)) != 0) GTEST_SKIP() << "this filesystem cannot hold a sparse 1 TiB file (truncate failed), so the case cannot be made here";
    const std::string words = head[0] == 'x' ? "not an updraft model file (bad magic)" : "stray bytes after its payload";
    expect_model_error([&] { load_model_file(path, false); }, {words});
    // Mapped: refused too (a private writable mapping of 1 TiB may itself be refused, by the
    // kernel's overcommit check).
    expect_model_error([&] { load_model_file(path, true); }, {"model file"});
    std::remove(path.c_str());
  }
}

TEST(ModelFile, MissingFieldIsRefused) {
  for (const char* name : {"engine", "requires", "note", "signature", "graph"}) {
    FieldList f = fields_of(saved());
    for (auto it = f.begin(); it != f.end(); ++it)
      if (it->first == name) {
        f.erase(it);
        break;
      }
    expect_refused(write_fields(f), {std::string("model file has no '") + name + "' field"});
  }
}

TEST(ModelFile, BadSignatureLinesAreRefused) {
  const std::string ok = "output logits\noutput features\n";
  const std::pair<std::string, std::string> cases[] = {
      {ok + "bogus line\n", "bad signature line 'bogus line'"},
      {ok + "output\n", "bad signature line 'output'"},
      {ok + "range s0 1\n", "bad signature line 'range s0 1'"},
      {ok + "range s0 x 5\n", "'x' is not a 64-bit integer"},
      {ok + "range s0 1 99999999999999999999\n", "'99999999999999999999' is not a 64-bit integer"},
      {ok + "range s0 1 4x\n", "'4x' is not a 64-bit integer"},
      {ok + "range s0 5 1\n", "empty or negative range: 'range s0 5 1'"},
      {ok + "range s0 -1 5\n", "empty or negative range: 'range s0 -1 5'"},
      {ok + "range s0 1 4\nrange s0 1 4\n", "range for 's0', which no input has or which is given twice"},
      {"output logits\n", "model file names 1 outputs, its graph has 2"},
      {ok + "output extra\n", "model file names 3 outputs, its graph has 2"},
  };
  for (const auto& [text, words] : cases) {
    SCOPED_TRACE(text);
    expect_refused(with_field("signature", text), {words});
  }
  // Blank lines are no lines; a range line is optional (the symbol is then unbounded).
  LoadedModel lm = load_model(with_field("signature", "\n" + ok + "\n"));
  ASSERT_EQ(lm.signature.ranges.size(), 1u);
  EXPECT_EQ(lm.signature.ranges[0].min, 0);
  EXPECT_EQ(lm.signature.ranges[0].max, INT64_MAX);
}

TEST(ModelFile, RangeForAnUnknownSymbolIsRefused) {
  expect_refused(with_field("signature", "output logits\noutput features\nrange s9 1 4\n"),
                 {"range for 's9', which no input has"});
  ModelMeta m = meta();
  m.ranges.push_back({"s9", 1, 4});
  expect_model_error([&] { save_model(compiled()->graph(), m); }, {"range for s9, which no input has"});
}

// Output names become file names (updraft-run's --output-dir): a name that could leave the
// directory or hide a file is refused when saved and when loaded.
TEST(ModelFile, OutputNamesThatArePathsAreRefused) {
  for (const char* bad : {"../logits", "a/b", "..", ".hidden", "x\\y", "tab\tname"}) {
    SCOPED_TRACE(bad);
    expect_refused(with_field("signature", std::string("output ") + bad + "\noutput features\n"),
                   {"output name '" + std::string(bad) + "'"});
    ModelMeta m = meta();
    m.output_names[0] = bad;
    expect_model_error([&] { save_model(compiled()->graph(), m); }, {"output name '" + std::string(bad) + "'"});
  }
  expect_refused(with_field("signature", "output y\noutput y\n"), {"output name 'y' is given twice"});
  EXPECT_NO_THROW(load_model(with_field("signature", "output last_hidden_state.0\noutput pooler-out\n")));
}

TEST(ModelFile, GraphDefectsAreModelErrors) {
  const std::string g = std::string(fields_of(saved())[4].second);
  ASSERT_EQ(fields_of(saved())[4].first, "graph");
  ASSERT_NE(g.find("extern(b0)"), std::string::npos);
  // A reference to a blob the file does not have, or to something that is not a blob.
  std::string missing = g;
  missing.replace(missing.find("extern(b0)"), 10, "extern(b99)");
  expect_refused(with_field("graph", missing), {"model file has no 'b99' field"});
  std::string notblob = g;
  notblob.replace(notblob.find("extern(b0)"), 10, "extern(graph)");
  expect_refused(with_field("graph", notblob), {"refers to 'graph', not a stored constant bN"});
  // Generated data: every constant of a model file is in the file.
  std::string gen = g;
  gen.replace(gen.find("extern(b0)"), 10, "random(seed=1)");
  expect_refused(with_field("graph", gen), {"random"});
  // Not a graph at all.
  expect_refused(with_field("graph", "graph(%x: f32[2]) {\n  return (%y)\n}\n"), {"line 2"});
}

TEST(ModelFile, BlobDefectsAreRefused) {
  FieldList f = fields_of(saved());
  std::string& b0 = field_of(f, "b0");
  const size_t nl = b0.find('\n');
  ASSERT_NE(nl, std::string::npos);
  std::string head = b0.substr(0, nl), data = b0.substr(nl + 1);
  auto with_b0 = [&](const std::string& blob) {
    FieldList g = f;
    field_of(g, "b0") = blob;
    return write_fields(g);
  };
  expect_refused(with_b0(head + "\n" + data.substr(1)), {"model file field b0 holds", "its header says"});
  expect_refused(with_b0("f99 2\n" + data), {"unknown dtype 'f99'"});
  expect_refused(with_b0("f32 -1\n" + data), {"bad size '-1'"});
  expect_refused(with_b0("f32 4611686018427387904 4\n" + data), {"size does not fit"});
  expect_refused(with_b0("f32 1 1 1 1 1 1 1 1 1\n" + data), {"rank 9"});
  expect_refused(with_b0(data.substr(0, 4)), {"model file field b0"});
}

TEST(ModelFile, DuplicateFieldIsRefused) {
  FieldList f = fields_of(saved());
  f.emplace_back("graph", "graph() {\n  return ()\n}\n");
  expect_refused(write_fields(f), {"model file is corrupt (field 'graph' appears twice)"});
}

TEST(ModelFile, FieldCountPastThePayloadIsRefused) {
  std::string b = saved();
  uint32_t n = 0xffffffffu;
  std::memcpy(&b[12], &n, 4);
  expect_refused(b, {"model file is corrupt (a field runs past the payload)"});
  n = 2;
  std::memcpy(&b[12], &n, 4);
  expect_refused(b, {"model file is corrupt (payload longer than its fields)"});
}

TEST(ModelSignatureCheck, ShapesAreCheckedAgainstTheSignature) {
  LoadedModel lm = load_model(saved());
  const ModelSignature& s = lm.signature;
  EXPECT_NO_THROW(s.check_shapes({{4, 3, 8, 8}}));
  expect_model_error([&] { s.check_shapes({}); }, {"the model takes 1 inputs, got 0"});
  expect_model_error([&] { s.check_shapes({{4, 3, 8}}); }, {"input x has rank 3, the model takes f32[s0, 3, 8, 8]"});
  expect_model_error([&] { s.check_shapes({{4, 3, 8, 9}}); }, {"input x dim 3 is 9, the model takes f32[s0, 3, 8, 8]"});
  expect_model_error([&] { s.check_shapes({{17, 3, 8, 8}}); },
                     {"input x dim 0 is 17, outside the range [1, 16] of s0"});
  expect_model_error([&] { s.check_shapes({{0, 3, 8, 8}}); }, {"input x dim 0 is 0, outside the range [1, 16]"});
}

TEST(ModelSignatureCheck, OneValuePerSymbolAndSizeInputs) {
  // Two inputs sharing s0, a size input binding s1, and an expression dim.
  auto g = parse_graph(R"(graph(%a: f32[s0, 4], %b: f32[s0, 4], %n: i64[] = s1, %c: f32[s1 + 1]) {
  %0 = add(%a, %b)
  return (%0)
})");
  ModelMeta m;
  m.ranges = {{"s0", 1, 8}, {"s1", 2, 3}};
  LoadedModel lm = load_model(save_model(*g, m));
  const ModelSignature& s = lm.signature;
  ASSERT_EQ(s.inputs.size(), 4u);
  EXPECT_EQ(s.inputs[2].binds, "s1");
  EXPECT_NO_THROW(s.check_shapes({{2, 4}, {2, 4}, {3}, {4}}));
  expect_model_error([&] { s.check_shapes({{2, 4}, {3, 4}, {3}, {4}}); },
                     {"input b dim 0 is 3 but input a dim 0 is 2, and the model needs both equal (s0)"});
  expect_model_error([&] { s.check_shapes({{2, 4}, {2, 4}, {9}, {10}}); },
                     {"size input n is 9, outside the range [2, 3] of s1"});
  expect_model_error([&] { s.check_shapes({{2, 4}, {2, 4}, {3, 1}, {4}}); }, {"size input n takes one value"});
  EXPECT_NE(s.str().find("n size s1"), std::string::npos) << s.str();
  EXPECT_NE(s.str().find("s1 in [2, 3]"), std::string::npos) << s.str();
}
