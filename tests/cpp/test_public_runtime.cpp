// The public runtime API (include/updraft/runtime.h, updraft/updraft_c.h; src/api/): a model
// file written here (text IR -> compile -> save_model) loads through the public API and gives
// the internal Executable's outputs bit for bit and a hand-computed reference; one Model runs
// from many threads at once; every bad file, bad input and bad buffer is an Error (C++) or a
// status code (C), never an abort.
#include <gtest/gtest.h>

#include <unistd.h>

#include <atomic>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>

#include "core/cpu_features.h"
#include "core/hash.h"
#include "ir/text.h"
#include "model/model_file.h"
#include "runtime/executable.h"
#include "runtime/plan.h"
#include "test_util.h"
#include "updraft/runtime.h"
#include "updraft/updraft_c.h"

namespace ur = updraft::runtime;
using updraft::Executable;
using updraft::Tensor;

namespace {

// y = relu(x @ w + b) and the row sums of x: two outputs, one symbolic batch.
const char* kMlp = R"(graph(%x: f32[s0, 4]) {
  %w = constant f32[4, 3] [0.5, -1.0, 0.25, 1.5, 0.75, -0.5, -2.0, 0.125, 1.0, 0.0, 0.5, -0.25]
  %b = constant f32[3] [0.1, -0.2, 0.3]
  %0 = matmul(%x, %w) : f32[s0, 3]
  %1 = add(%0, %b) : f32[s0, 3]
  %2 = relu(%1) : f32[s0, 3]
  %3 = sum(%x) {dims=[1], keepdim=false} : f32[s0]
  return (%2, %3)
})";
const float kW[4][3] = {{0.5f, -1.0f, 0.25f}, {1.5f, 0.75f, -0.5f}, {-2.0f, 0.125f, 1.0f}, {0.0f, 0.5f, -0.25f}};
const float kB[3] = {0.1f, -0.2f, 0.3f};

// A size input: out[(s1 + 1), 4] = 2 + n + column sums of x.
const char* kSized = R"(graph(%x: f32[s0, 4], %n: i64[] = s1) {
  %c = constant f32[1, 1] [2.0]
  %e = expand(%c) {shape=[(s1+1), 4]} : f32[(s1+1), 4]
  %nf = cast(%n) {dtype="f32"} : f32[]
  %a = add(%e, %nf) : f32[(s1+1), 4]
  %r = sum(%x) {dims=[0], keepdim=true} : f32[1, 4]
  %o = add(%a, %r) : f32[(s1+1), 4]
  return (%o)
})";

std::string write_file(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  return path;
}

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const ur::Error& e) {
    return e.what();
  }
  return "";
}

class PublicRuntime : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = (std::filesystem::temp_directory_path() / ("updraft_public_runtime_" + std::to_string(::getpid()))).string();
    std::filesystem::create_directories(dir_);
    updraft::ModelMeta meta;
    meta.note = "test mlp";
    meta.output_names = {"y", "rowsum"};
    meta.ranges = {{"s0", 1, 64}};
    mlp_bytes_ = updraft::save_model(Executable::compile(updraft::parse_graph(kMlp), {})->graph(), meta);
    mlp_ = write_file(dir_ + "/mlp.updraft", mlp_bytes_);
    updraft::ModelMeta smeta;
    smeta.ranges = {{"s0", 1, 16}, {"s1", 0, 32}};
    sized_ = write_file(dir_ + "/sized.updraft",
                        updraft::save_model(Executable::compile(updraft::parse_graph(kSized), {})->graph(), smeta));
  }
  static void TearDownTestSuite() { std::filesystem::remove_all(dir_); }

  static std::string dir_, mlp_, mlp_bytes_, sized_;
};
std::string PublicRuntime::dir_, PublicRuntime::mlp_, PublicRuntime::mlp_bytes_, PublicRuntime::sized_;

std::vector<float> input_rows(int64_t rows, uint32_t seed) {
  Tensor t = updraft::testing::random_tensor(updraft::DType::f32, {rows, 4}, seed);
  return {t.ptr<float>(), t.ptr<float>() + t.numel()};
}

// What the model computes, by hand (double accumulation: compared with a tolerance).
void reference(const std::vector<float>& x, int64_t rows, std::vector<float>& y, std::vector<float>& rowsum) {
  y.assign(static_cast<size_t>(rows * 3), 0);
  rowsum.assign(static_cast<size_t>(rows), 0);
  for (int64_t i = 0; i < rows; ++i) {
    for (int j = 0; j < 3; ++j) {
      double acc = kB[j];
      for (int k = 0; k < 4; ++k) acc += double(x[i * 4 + k]) * kW[k][j];
      y[i * 3 + j] = static_cast<float>(std::max(acc, 0.0));
    }
    for (int k = 0; k < 4; ++k) rowsum[i] += x[i * 4 + k];
  }
}

struct Outputs {
  std::vector<float> y, rowsum;
};

Outputs run_public(ur::Model& m, const std::vector<float>& x, int64_t rows) {
  Outputs o;
  o.y.resize(static_cast<size_t>(rows * 3));
  o.rowsum.resize(static_cast<size_t>(rows));
  m.run({ur::TensorRef::of(x.data(), ur::DType::f32, {rows, 4})},
        {ur::TensorRef::of(o.y.data(), ur::DType::f32, {rows, 3}),
         ur::TensorRef::of(o.rowsum.data(), ur::DType::f32, {rows})});
  return o;
}

}  // namespace

TEST_F(PublicRuntime, SignatureAndStats) {
  ur::Model m = ur::Model::load(mlp_);
  ASSERT_EQ(m.inputs().size(), 1u);
  EXPECT_EQ(m.inputs()[0].name, "x");
  EXPECT_EQ(m.inputs()[0].dtype, ur::DType::f32);
  EXPECT_EQ(m.inputs()[0].shape, (std::vector<int64_t>{-1, 4}));
  EXPECT_EQ(m.inputs()[0].dims, (std::vector<std::string>{"s0", "4"}));
  EXPECT_FALSE(m.inputs()[0].is_size);
  ASSERT_EQ(m.outputs().size(), 2u);
  EXPECT_EQ(m.outputs()[0].name, "y");
  EXPECT_EQ(m.outputs()[0].shape, (std::vector<int64_t>{-1, 3}));
  EXPECT_EQ(m.outputs()[1].name, "rowsum");
  ASSERT_EQ(m.ranges().size(), 1u);
  EXPECT_EQ(m.ranges()[0].symbol, "s0");
  EXPECT_EQ(m.ranges()[0].min, 1);
  EXPECT_EQ(m.ranges()[0].max, 64);
  EXPECT_EQ(m.stats().file_bytes, mlp_bytes_.size());
  EXPECT_GE(m.stats().constant_bytes, 12 * sizeof(float));
  EXPECT_TRUE(m.stats().mapped);
  EXPECT_EQ(m.stats().engine_version, ur::version());
  EXPECT_EQ(m.stats().note, "test mlp");
  EXPECT_NE(m.signature_text().find("s0 in [1, 64]"), std::string::npos) << m.signature_text();
  int nodes = 0;
  for (const auto& [op, count] : m.stats().ops) {
    EXPECT_FALSE(op.empty());
    EXPECT_GT(count, 0) << op;
    nodes += count;
  }
  auto lm = updraft::load_model_file(mlp_);
  EXPECT_EQ(nodes, static_cast<int>(lm.graph->num_nodes()));
  EXPECT_FALSE(m.stats().ops.empty());
  EXPECT_EQ(m.output_shapes({{5, 4}}), (std::vector<std::vector<int64_t>>{{5, 3}, {5}}));
  EXPECT_STREQ(ur::dtype_name(ur::DType::boolean), "bool");
  EXPECT_EQ(ur::dtype_size(ur::DType::bf16), 2u);

  ur::Model unmapped = ur::Model::load(mlp_, {.num_threads = 1, .map = false});
  EXPECT_FALSE(unmapped.stats().mapped);
}

TEST_F(PublicRuntime, SameBitsAsTheEngineAndTheHandReference) {
  const int64_t rows = 5;
  std::vector<float> x = input_rows(rows, 11);
  ur::Model m = ur::Model::load(mlp_);
  Outputs got = run_public(m, x, rows);

  auto exe = Executable::compile(updraft::parse_graph(kMlp), {});
  Tensor y(updraft::DType::f32, {rows, 3}), s(updraft::DType::f32, {rows});
  exe->run({updraft::TensorView::contiguous(x.data(), updraft::DType::f32, {rows, 4})}, {y.view(), s.view()});
  EXPECT_EQ(std::memcmp(got.y.data(), y.data(), y.nbytes()), 0);
  EXPECT_EQ(std::memcmp(got.rowsum.data(), s.data(), s.nbytes()), 0);

  std::vector<float> want_y, want_s;
  reference(x, rows, want_y, want_s);
  for (size_t i = 0; i < want_y.size(); ++i) EXPECT_NEAR(got.y[i], want_y[i], 1e-5) << i;
  for (size_t i = 0; i < want_s.size(); ++i) EXPECT_NEAR(got.rowsum[i], want_s[i], 1e-5) << i;

  // A strided input (x stored transposed) reads the same values.
  std::vector<float> xt(x.size());
  for (int64_t i = 0; i < rows; ++i)
    for (int k = 0; k < 4; ++k) xt[k * rows + i] = x[i * 4 + k];
  Outputs strided;
  strided.y.resize(rows * 3);
  strided.rowsum.resize(rows);
  m.run({{xt.data(), ur::DType::f32, {rows, 4}, {1, rows}}},
        {ur::TensorRef::of(strided.y.data(), ur::DType::f32, {rows, 3}),
         ur::TensorRef::of(strided.rowsum.data(), ur::DType::f32, {rows})});
  for (size_t i = 0; i < want_y.size(); ++i) EXPECT_NEAR(strided.y[i], want_y[i], 1e-5) << i;

  // The arena size is the plan's.
  auto lm = updraft::load_model_file(mlp_);
  auto loaded = Executable::from_optimized(std::move(lm.graph), {}, 0);
  EXPECT_EQ(m.arena_bytes({{rows, 4}}), loaded->plan({{rows, 4}})->memory().arena_bytes);
}

TEST_F(PublicRuntime, SizeInput) {
  ur::Model m = ur::Model::load(sized_);
  ASSERT_EQ(m.inputs().size(), 2u);
  EXPECT_TRUE(m.inputs()[1].is_size);
  EXPECT_EQ(m.inputs()[1].dims, (std::vector<std::string>{"s1"}));
  EXPECT_TRUE(m.inputs()[1].shape.empty());
  EXPECT_EQ(m.output_shapes({{3, 4}, {5}}), (std::vector<std::vector<int64_t>>{{6, 4}}));
  std::vector<float> x = input_rows(3, 2), out(6 * 4);
  int64_t n = 5;
  m.run({ur::TensorRef::of(x.data(), ur::DType::f32, {3, 4}), ur::TensorRef::of(&n, ur::DType::i64, {})},
        {ur::TensorRef::of(out.data(), ur::DType::f32, {6, 4})});
  for (int r = 0; r < 6; ++r)
    for (int c = 0; c < 4; ++c)
      EXPECT_NEAR(out[r * 4 + c], 2.0f + 5.0f + x[c] + x[4 + c] + x[8 + c], 1e-5);
  int64_t too_big = 33;
  EXPECT_NE(error_of([&] {
              m.run({ur::TensorRef::of(x.data(), ur::DType::f32, {3, 4}),
                     ur::TensorRef::of(&too_big, ur::DType::i64, {})},
                    {ur::TensorRef::of(out.data(), ur::DType::f32, {6, 4})});
            }).find("outside the range [0, 32]"),
            std::string::npos);
}

TEST_F(PublicRuntime, ManyThreadsShareOneModel) {
  ur::Model m = ur::Model::load(mlp_, {.num_threads = 1});
  // Four batch sizes, so threads also build and look up plans for each other's shapes.
  std::vector<std::vector<float>> xs;
  std::vector<Outputs> want;
  for (int64_t rows = 1; rows <= 4; ++rows) {
    xs.push_back(input_rows(rows, static_cast<uint32_t>(rows)));
    auto exe = Executable::compile(updraft::parse_graph(kMlp), {});
    Outputs o;
    o.y.resize(rows * 3);
    o.rowsum.resize(rows);
    exe->run({updraft::TensorView::contiguous(xs.back().data(), updraft::DType::f32, {rows, 4})},
             {updraft::TensorView::contiguous(o.y.data(), updraft::DType::f32, {rows, 3}),
              updraft::TensorView::contiguous(o.rowsum.data(), updraft::DType::f32, {rows})});
    want.push_back(o);
  }
  std::atomic<int> mismatches{0}, errors{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < 50; ++i) {
        int64_t rows = 1 + (t + i) % 4;
        try {
          Outputs o = run_public(m, xs[rows - 1], rows);
          if (o.y != want[rows - 1].y || o.rowsum != want[rows - 1].rowsum) ++mismatches;
        } catch (const ur::Error&) {
          ++errors;
        }
      }
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(mismatches.load(), 0);
  EXPECT_EQ(errors.load(), 0);
}

TEST_F(PublicRuntime, BadFilesAreErrors) {
  EXPECT_NE(error_of([&] { ur::Model::load(dir_ + "/missing.updraft"); }).find("[model]"), std::string::npos);
  std::string truncated = write_file(dir_ + "/truncated.updraft", mlp_bytes_.substr(0, mlp_bytes_.size() / 2));
  EXPECT_NE(error_of([&] { ur::Model::load(truncated); }).find("truncated"), std::string::npos);
  std::string bytes = mlp_bytes_;
  bytes[bytes.size() / 2] ^= 0x5a;
  std::string corrupt = write_file(dir_ + "/corrupt.updraft", bytes);
  EXPECT_NE(error_of([&] { ur::Model::load(corrupt); }), "");
  bytes = mlp_bytes_;
  bytes[8] = static_cast<char>(updraft::kModelFormatVersion + 1);  // the header's u32 format version
  std::string newer = write_file(dir_ + "/newer.updraft", bytes);
  EXPECT_NE(error_of([&] { ur::Model::load(newer); }), "");
  // A file that needs a CPU feature this machine lacks (an unknown name counts as missing): the
  // "requires" field rewritten, the header's payload checksum made right again.
  bytes = mlp_bytes_;
  const std::string need = updraft::engine_required_cpu_features();
  size_t at = bytes.find(need, bytes.find("requires"));
  ASSERT_NE(at, std::string::npos);
  bytes.replace(at, 2, "zz");
  uint64_t length = 0;
  std::memcpy(&length, bytes.data() + 16, 8);
  uint64_t sum = updraft::xxh3_64(bytes.data() + 32, length);
  std::memcpy(bytes.data() + 24, &sum, 8);
  std::string other_cpu = write_file(dir_ + "/other_cpu.updraft", bytes);
  EXPECT_NE(error_of([&] { ur::Model::load(other_cpu); }).find("this CPU lacks {zz"), std::string::npos)
      << error_of([&] { ur::Model::load(other_cpu); });
  EXPECT_NE(error_of([&] { ur::Model::load(mlp_, {.num_threads = -1}); }).find("num_threads"), std::string::npos);
  EXPECT_NE(error_of([&] { ur::Model::load(dir_); }).find("not a regular file"), std::string::npos);
  // Not an updraft::Error, not an abort: the public type.
  EXPECT_THROW(ur::Model::load(corrupt, {.num_threads = 0, .map = false}), ur::Error);
}

TEST_F(PublicRuntime, BadInputsAndBuffersAreErrors) {
  ur::Model m = ur::Model::load(mlp_);
  std::vector<float> x(8 * 4, 1.0f), y(8 * 3), s(8);
  std::vector<double> xd(8 * 4);
  auto run = [&](std::vector<ur::TensorRef> in, std::vector<ur::TensorRef> out) {
    return error_of([&] { m.run(in, out); });
  };
  auto y_ref = ur::TensorRef::of(y.data(), ur::DType::f32, {2, 3});
  auto s_ref = ur::TensorRef::of(s.data(), ur::DType::f32, {2});
  auto x_ref = ur::TensorRef::of(x.data(), ur::DType::f32, {2, 4});
  EXPECT_EQ(run({x_ref}, {y_ref, s_ref}), "");
  EXPECT_NE(run({}, {y_ref, s_ref}).find("takes 1 inputs"), std::string::npos);
  EXPECT_NE(run({ur::TensorRef::of(x.data(), ur::DType::f32, {8})}, {y_ref, s_ref}).find("rank"), std::string::npos);
  EXPECT_NE(run({ur::TensorRef::of(x.data(), ur::DType::f32, {2, 5})}, {y_ref, s_ref}).find("dim 1 is 5"),
            std::string::npos);
  EXPECT_NE(run({ur::TensorRef::of(xd.data(), ur::DType::f64, {2, 4})}, {y_ref, s_ref}).find("f64"), std::string::npos);
  EXPECT_NE(
      run({ur::TensorRef::of(x.data(), ur::DType::f32, {0, 4})}, {y_ref, s_ref}).find("outside the range [1, 64]"),
      std::string::npos);
  EXPECT_NE(error_of([&] { m.output_shapes({{65, 4}}); }).find("outside the range [1, 64]"), std::string::npos);
  EXPECT_NE(error_of([&] { m.arena_bytes({{2, 4, 1}}); }).find("rank"), std::string::npos);
  EXPECT_NE(run({x_ref}, {ur::TensorRef::of(y.data(), ur::DType::f32, {3, 3}), s_ref}).find("these inputs give [2, 3]"),
            std::string::npos);
  EXPECT_NE(run({x_ref}, {y_ref}).find("2 outputs"), std::string::npos);
  EXPECT_NE(run({x_ref}, {ur::TensorRef::of(y.data(), ur::DType::f64, {2, 3}), s_ref}).find("f64"), std::string::npos);
  EXPECT_NE(run({x_ref}, {{y.data(), ur::DType::f32, {2, 3}, {1, 2}}, s_ref}).find("contiguous"), std::string::npos);
  auto null_out = ur::TensorRef::of(static_cast<void*>(nullptr), ur::DType::f32, {2, 3});
  EXPECT_NE(run({x_ref}, {null_out, s_ref}).find("no data"), std::string::npos);
  EXPECT_NE(run({ur::TensorRef::of(x.data(), ur::DType::f32, {2, -4})}, {y_ref, s_ref}).find("negative"),
            std::string::npos);
  EXPECT_NE(run({x_ref}, {ur::TensorRef::of(y.data(), ur::DType::f32, {int64_t{1} << 40, int64_t{1} << 40}), s_ref})
                .find("64 bits"),
            std::string::npos);

  ur::Model moved = std::move(m);
  EXPECT_NE(error_of([&] { m.inputs(); }).find("moved from"), std::string::npos);
  EXPECT_EQ(error_of([&] { moved.run({x_ref}, {y_ref, s_ref}); }), "");
}

TEST_F(PublicRuntime, CApi) {
  updraft_model* m = reinterpret_cast<updraft_model*>(1);
  EXPECT_EQ(updraft_model_load((dir_ + "/missing.updraft").c_str(), nullptr, &m), UPDRAFT_ERR_FILE);
  EXPECT_EQ(m, nullptr);
  EXPECT_NE(std::string(updraft_last_error()).find("missing.updraft"), std::string::npos) << updraft_last_error();
  std::string bytes = mlp_bytes_;
  bytes[bytes.size() / 2] ^= 0x5a;
  std::string corrupt = write_file(dir_ + "/c_corrupt.updraft", bytes);
  EXPECT_EQ(updraft_model_load(corrupt.c_str(), nullptr, &m), UPDRAFT_ERR_BAD_MODEL);
  EXPECT_EQ(updraft_model_load(nullptr, nullptr, &m), UPDRAFT_ERR_INVALID_ARGUMENT);
  updraft_load_options bad = {-2, 1};
  EXPECT_EQ(updraft_model_load(mlp_.c_str(), &bad, &m), UPDRAFT_ERR_INVALID_ARGUMENT);

  updraft_load_options opts = updraft_load_options_default();
  opts.num_threads = 1;
  ASSERT_EQ(updraft_model_load(mlp_.c_str(), &opts, &m), UPDRAFT_OK) << updraft_last_error();
  ASSERT_EQ(updraft_model_num_inputs(m), 1u);
  ASSERT_EQ(updraft_model_num_outputs(m), 2u);
  updraft_io_info info;
  ASSERT_EQ(updraft_model_input_info(m, 0, &info), UPDRAFT_OK);
  EXPECT_STREQ(info.name, "x");
  EXPECT_EQ(info.ndim, 2);
  EXPECT_EQ(info.shape[0], -1);
  EXPECT_STREQ(info.dims[0], "s0");
  ASSERT_EQ(updraft_model_output_info(m, 1, &info), UPDRAFT_OK);
  EXPECT_STREQ(info.name, "rowsum");
  EXPECT_EQ(updraft_model_output_info(m, 2, &info), UPDRAFT_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(updraft_model_signature(m)).find("rowsum"), std::string::npos);
  ASSERT_EQ(updraft_model_num_symbols(m), 1u);
  const char* sym = nullptr;
  int64_t lo = 0, hi = 0;
  ASSERT_EQ(updraft_model_symbol(m, 0, &sym, &lo, &hi), UPDRAFT_OK);
  EXPECT_STREQ(sym, "s0");
  EXPECT_EQ(lo, 1);
  EXPECT_EQ(hi, 64);
  EXPECT_EQ(updraft_model_symbol(m, 1, &sym, &lo, &hi), UPDRAFT_ERR_INVALID_ARGUMENT);

  const int64_t rows = 3;
  std::vector<float> x = input_rows(rows, 5), y(rows * 3), s(rows);
  int64_t xs[] = {rows, 4}, ys[] = {rows, 3}, ss[] = {rows};
  updraft_tensor in = {x.data(), UPDRAFT_F32, 2, xs, nullptr};
  int64_t dims[3];
  ASSERT_EQ(updraft_model_output_shapes(m, &in, 1, dims, 3), UPDRAFT_OK);
  EXPECT_EQ(dims[0], rows);
  EXPECT_EQ(dims[1], 3);
  EXPECT_EQ(dims[2], rows);
  EXPECT_EQ(updraft_model_output_shapes(m, &in, 1, dims, 2), UPDRAFT_ERR_INVALID_ARGUMENT);
  size_t arena = 0;
  EXPECT_EQ(updraft_model_arena_bytes(m, &in, 1, &arena), UPDRAFT_OK);
  updraft_tensor out[] = {{y.data(), UPDRAFT_F32, 2, ys, nullptr}, {s.data(), UPDRAFT_F32, 1, ss, nullptr}};
  ASSERT_EQ(updraft_model_run(m, &in, 1, out, 2), UPDRAFT_OK) << updraft_last_error();
  ur::Model cpp = ur::Model::load(mlp_);
  Outputs want = run_public(cpp, x, rows);
  EXPECT_EQ(y, want.y);
  EXPECT_EQ(s, want.rowsum);

  int64_t wrong[] = {rows, 5};
  updraft_tensor bad_in = {x.data(), UPDRAFT_F32, 2, wrong, nullptr};
  EXPECT_EQ(updraft_model_run(m, &bad_in, 1, out, 2), UPDRAFT_ERR_SHAPE);
  std::string shape_error = updraft_last_error();
  EXPECT_NE(shape_error.find("dim 1 is 5"), std::string::npos) << shape_error;
  int64_t big[] = {rows + 1, 3};
  updraft_tensor bad_out[] = {{y.data(), UPDRAFT_F32, 2, big, nullptr}, out[1]};
  EXPECT_EQ(updraft_model_run(m, &in, 1, bad_out, 2), UPDRAFT_ERR_SHAPE);
  updraft_tensor bad_dtype = {x.data(), 42, 2, xs, nullptr};
  EXPECT_EQ(updraft_model_run(m, &bad_dtype, 1, out, 2), UPDRAFT_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(updraft_model_run(nullptr, &in, 1, out, 2), UPDRAFT_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(updraft_model_run(m, nullptr, 1, out, 2), UPDRAFT_ERR_INVALID_ARGUMENT);

  // Each thread has its own last error.
  updraft_model_run(m, &bad_in, 1, out, 2);
  std::string other;
  std::thread([&] {
    updraft_model* none = nullptr;
    updraft_model_load((dir_ + "/missing.updraft").c_str(), nullptr, &none);
    other = updraft_last_error();
  }).join();
  EXPECT_NE(other.find("missing.updraft"), std::string::npos);
  EXPECT_EQ(updraft_last_error(), shape_error);

  EXPECT_STREQ(updraft_status_name(UPDRAFT_ERR_SHAPE), "UPDRAFT_ERR_SHAPE");
  EXPECT_STREQ(updraft_dtype_name(UPDRAFT_I64), "i64");
  EXPECT_STREQ(updraft_dtype_name(42), "?");
  EXPECT_STREQ(updraft_status_name(-1), "UPDRAFT_ERR_UNKNOWN");
  EXPECT_EQ(updraft_dtype_size(UPDRAFT_F64), 8u);
  EXPECT_STREQ(updraft_version(), ur::version());
  EXPECT_EQ(updraft_model_num_inputs(nullptr), 0u);
  updraft_model_free(m);
  updraft_model_free(nullptr);
}
