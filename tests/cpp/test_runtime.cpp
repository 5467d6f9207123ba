// Executable end to end: compile + run small graphs and compare with the reference
// kernels run node by node; outputs that are inputs/constants/views/duplicates; symbolic
// shapes and the plan cache; input validation; strided inputs; concurrency; no steady-state
// allocation; large caller outputs advised huge pages.
#include <gtest/gtest.h>
#include <sys/mman.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <new>
#include <thread>

#include "core/error.h"
#include "ir/graph.h"
#include "ir/op_table.h"
#include "kernels/kernel.h"
#include "passes/options.h"
#include "runtime/executable.h"
#include "runtime/plan.h"
#include "test_util.h"

using namespace updraft;
using updraft::testing::all_close;
using updraft::testing::random_tensor;

// Allocation counter for the steady-state test: counts operator new on threads that opted in.
namespace {
std::atomic<long> g_allocs{0};
thread_local bool t_count_allocs = false;
}  // namespace
void* operator new(size_t n) {
  if (t_count_allocs) g_allocs.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}
void* operator new[](size_t n) { return operator new(n); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, size_t) noexcept { std::free(p); }
void operator delete[](void* p, size_t) noexcept { std::free(p); }
// The nothrow forms too (std::stable_sort's buffer uses them): a sanitizer runtime supplies its
// own for any form left unreplaced, and its nothrow new freed by the delete above is a mismatch.
void* operator new(size_t n, const std::nothrow_t&) noexcept {
  if (t_count_allocs) g_allocs.fetch_add(1, std::memory_order_relaxed);
  return std::malloc(n ? n : 1);
}
void* operator new[](size_t n, const std::nothrow_t& t) noexcept { return operator new(n, t); }
void operator delete(void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { std::free(p); }

namespace {

using Builder = std::function<std::unique_ptr<Graph>()>;
using Ints = std::vector<int64_t>;

TensorType f32(std::vector<Dim> s) { return {DType::f32, std::move(s)}; }

// The oracle: every node through its reference kernel, in order, on a fresh copy of the graph
// (compile() runs passes that rewrite the graph it is given).
std::vector<Tensor> reference(const Graph& g, const std::vector<Tensor>& inputs) {
  std::map<int, Tensor> val;
  for (size_t k = 0; k < inputs.size(); ++k) val[g.inputs()[k]->id] = inputs[k];
  for (const Value* c : g.constants()) val[c->id] = *c->constant;
  for (const Node* n : g.nodes()) {
    std::vector<TensorView> ins;
    for (const Value* v : n->inputs) ins.push_back(val.at(v->id).view());
    auto outs = run_node(*n, ins, Device::ref);
    for (size_t k = 0; k < outs.size(); ++k) val[n->outputs[k]->id] = outs[k];
  }
  std::vector<Tensor> r;
  for (const Value* v : g.outputs()) r.push_back(val.at(v->id));
  return r;
}

// Compiles, runs with fresh output tensors (pre-filled with garbage), returns the outputs.
std::vector<Tensor> run_compiled(Executable& cg, const std::vector<TensorView>& inputs) {
  std::vector<std::vector<int64_t>> shapes;
  for (const TensorView& v : inputs) shapes.push_back(v.shape());
  auto out_shapes = cg.prepare(shapes);
  auto dts = cg.output_dtypes();
  std::vector<Tensor> outs;
  std::vector<TensorView> views;
  for (size_t k = 0; k < out_shapes.size(); ++k) {
    outs.emplace_back(dts[k], out_shapes[k]);
    std::memset(outs.back().data(), 0x7f, outs.back().nbytes());
    views.push_back(outs.back().view());
  }
  cg.run(inputs, views);
  return outs;
}

std::vector<TensorView> views_of(const std::vector<Tensor>& ts) {
  std::vector<TensorView> v;
  for (const Tensor& t : ts) v.push_back(t.view());
  return v;
}

// Tolerance: fast f32 kernels (SIMD exp/tanh approximations) against double-accumulating
// reference kernels, through chains of a dozen ops.
void expect_matches_reference(const Builder& build, const std::vector<Tensor>& inputs, CompileOptions opts = {},
                              double tol = 1e-5) {
  auto ref_graph = build();
  auto want = reference(*ref_graph, inputs);
  auto cg = Executable::compile(build(), opts);
  auto got = run_compiled(*cg, views_of(inputs));
  ASSERT_EQ(got.size(), want.size());
  for (size_t k = 0; k < got.size(); ++k)
    EXPECT_TRUE(all_close(got[k], want[k], tol, tol)) << "output " << k << "\n" << cg->plan_text([&] {
      std::vector<std::vector<int64_t>> s;
      for (const Tensor& t : inputs) s.push_back(t.shape());
      return s;
    }());
}

// x, y f32[3, 5]: relu(add(x, y)) reshaped to [5, 3], plus relu(x) * y.
std::unique_ptr<Graph> small_graph() {
  auto g = std::make_unique<Graph>();
  Value* x = g->add_input("x", f32({3, 5}));
  Value* y = g->add_input("y", f32({3, 5}));
  Value* a = g->add_node("add", {x, y})->output();
  Value* r = g->add_node("relu", {a})->output();
  Value* v = g->add_node("reshape", {r}, {{"shape", Ints{5, 3}}})->output();
  Value* m = g->add_node("mul", {g->add_node("relu", {x})->output(), y})->output();
  g->set_outputs({v, m});
  return g;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    EXPECT_EQ(e.component(), "runtime") << e.what();
    return e.what();
  }
  ADD_FAILURE() << "expected an Error";
  return "";
}

}  // namespace

TEST(Runtime, SmallGraphMatchesReference) {
  std::vector<Tensor> in = {random_tensor(DType::f32, {3, 5}, 1), random_tensor(DType::f32, {3, 5}, 2)};
  expect_matches_reference(small_graph, in);
  CompileOptions nofuse;
  nofuse.fuse = false;
  nofuse.fold_constants = false;
  expect_matches_reference(small_graph, in, nofuse);
}

// A flash attention gradient's elementwise passes (p = exp(s * scale - lse), then
// ds = p * (dp - rowsum) * scale): fused programs whose input 0 dies at the node write their
// result into its buffer (fused_elementwise is in place), and the values match the reference.
TEST(Runtime, FusedProgramsWriteInPlaceOfADyingInput) {
  auto build = [] {
    auto g = std::make_unique<Graph>();
    Value* q = g->add_input("q", f32({2, 9, 8}));
    Value* k = g->add_input("k", f32({2, 11, 8}));
    Value* dy = g->add_input("dy", f32({2, 9, 8}));
    Value* lse = g->add_input("lse", f32({2, 9, 1}));
    Value* rs = g->add_input("rs", f32({2, 9, 1}));
    Tensor c(DType::f32, {});
    c.ptr<float>()[0] = 0.35f;
    Value* scale = g->add_constant("scale", c);
    Value* s = g->add_node("matmul", {q, k}, {{"transpose_b", true}})->output();
    Value* p = g->add_node("exp", {g->add_node("sub", {g->add_node("mul", {s, scale})->output(), lse})->output()})->output();
    Value* dp = g->add_node("matmul", {dy, k}, {{"transpose_b", true}})->output();  // [2, 9, 11]: k read as v
    Value* ds = g->add_node("mul", {g->add_node("mul", {g->add_node("sub", {dp, rs})->output(), p})->output(), scale})->output();
    g->set_outputs({g->add_node("matmul", {ds, k})->output(), g->add_node("matmul", {p, k})->output()});
    return g;
  };
  std::vector<Tensor> inputs = {random_tensor(DType::f32, {2, 9, 8}, 1), random_tensor(DType::f32, {2, 11, 8}, 2),
                                random_tensor(DType::f32, {2, 9, 8}, 3), random_tensor(DType::f32, {2, 9, 1}, 4),
                                random_tensor(DType::f32, {2, 9, 1}, 5)};
  expect_matches_reference(build, inputs);
  auto cg = Executable::compile(build(), {});
  const std::string text = cg->plan_text({{2, 9, 8}, {2, 11, 8}, {2, 9, 8}, {2, 9, 1}, {2, 9, 1}});
  EXPECT_NE(text.find("fused_elementwise"), std::string::npos) << text;
  EXPECT_EQ(text.find("memory (0 in-place)"), std::string::npos) << text;
}

TEST(Runtime, CompileRecordsPassesAndTime) {
  auto cg = Executable::compile(small_graph(), {});
  EXPECT_FALSE(cg->pass_log().empty());
  EXPECT_GE(cg->compile_ms(), 0.0);
  EXPECT_EQ(cg->output_dtypes(), (std::vector<DType>{DType::f32, DType::f32}));
}

TEST(Runtime, OutputsThatAreInputsConstantsViewsAndDuplicatesAreCopies) {
  Tensor w = random_tensor(DType::f32, {2, 3}, 7);
  auto build = [&] {
    auto g = std::make_unique<Graph>();
    Value* x = g->add_input("x", f32({2, 3}));
    Value* c = g->add_constant("w", w);
    Value* r = g->add_node("relu", {x})->output();
    Value* v = g->add_node("reshape", {r}, {{"shape", Ints{3, 2}}})->output();
    Value* vx = g->add_node("reshape", {x}, {{"shape", Ints{6}}})->output();
    g->set_outputs({x, c, v, r, r, vx, x});
    return g;
  };
  Tensor x = random_tensor(DType::f32, {2, 3}, 3);
  expect_matches_reference(build, {x});

  auto cg = Executable::compile(build(), {});
  auto outs = run_compiled(*cg, {x.view()});
  // Every output has its own memory: none aliases the input, the constant or another output.
  EXPECT_NE(outs[0].data(), x.data());
  outs[0].ptr<float>()[0] += 100.f;
  EXPECT_NE(x.ptr<float>()[0], outs[0].ptr<float>()[0]);
  EXPECT_TRUE(all_close(outs[1], w, 0, 0));
  EXPECT_TRUE(all_close(outs[3], outs[4], 0, 0));
  EXPECT_TRUE(all_close(outs[6], x, 0, 0));
  std::string text = cg->plan_text({{2, 3}});
  EXPECT_NE(text.find("copy-out"), std::string::npos) << text;
}

TEST(Runtime, SymbolicShapesBuildOnePlanPerSignatureWithinTheCacheBound) {
  auto build = [] {
    auto g = std::make_unique<Graph>();
    Value* x = g->add_input("x", f32({Dim::sym("s0"), 4}));
    Value* y = g->add_input("y", f32({Dim::sym("s0"), 4}));
    Value* s = g->add_node("relu", {g->add_node("sub", {x, y})->output()})->output();
    g->set_outputs({g->add_node("mul", {s, x})->output()});
    return g;
  };
  CompileOptions opts;
  opts.plan_cache_size = 2;
  auto cg = Executable::compile(build(), opts);
  auto ref = build();
  EXPECT_EQ(cg->prepare({{2, 4}, {2, 4}}), (std::vector<std::vector<int64_t>>{{2, 4}}));
  for (int64_t n : {2, 7, 2, 0, 9, 2}) {
    std::vector<Tensor> in = {random_tensor(DType::f32, {n, 4}, 10 + n), random_tensor(DType::f32, {n, 4}, 20 + n)};
    auto got = run_compiled(*cg, views_of(in));
    auto want = reference(*ref, in);
    EXPECT_TRUE(all_close(got[0], want[0], 1e-6, 1e-6)) << "s0=" << n;
    EXPECT_LE(cg->num_plans(), 2u);
  }
  EXPECT_EQ(cg->num_plans(), 2u);
  EXPECT_NE(cg->plan_text({{5, 4}, {5, 4}}).find("s0=5"), std::string::npos);
}

TEST(Runtime, BadInputsAreRuntimeErrorsWithIndexAndExpectation) {
  auto build = [] {
    auto g = std::make_unique<Graph>();
    Value* x = g->add_input("x", f32({Dim::sym("s0"), 4}));
    Value* y = g->add_input("y", f32({Dim::sym("s0"), 4}));
    g->set_outputs({g->add_node("add", {x, y})->output()});
    return g;
  };
  auto cg = Executable::compile(build(), {});
  Tensor a = random_tensor(DType::f32, {4, 4}, 1), b = random_tensor(DType::f32, {7, 4}, 2);
  Tensor d = random_tensor(DType::f64, {4, 4}, 3), r3 = random_tensor(DType::f32, {4, 4, 1}, 4);
  Tensor w = random_tensor(DType::f32, {4, 5}, 5);
  Tensor out(DType::f32, {4, 4}), out_bad(DType::f32, {4, 5});

  std::string e = error_of([&] { cg->run({a.view()}, {out.view()}); });
  EXPECT_NE(e.find("expected 2 inputs, got 1"), std::string::npos) << e;
  e = error_of([&] { cg->run({a.view(), d.view()}, {out.view()}); });
  EXPECT_NE(e.find("input 1 has dtype f64, expected f32"), std::string::npos) << e;
  e = error_of([&] { cg->run({r3.view(), a.view()}, {out.view()}); });
  EXPECT_NE(e.find("input 0 has rank 3, expected 2"), std::string::npos) << e;
  e = error_of([&] { cg->run({a.view(), b.view()}, {out.view()}); });
  EXPECT_NE(e.find("input 1 dim 0 is 7 but s0 is already 4 from input 0"), std::string::npos) << e;
  e = error_of([&] { cg->run({a.view(), w.view()}, {out.view()}); });
  EXPECT_NE(e.find("input 1 dim 1 is 5, expected 4"), std::string::npos) << e;
  e = error_of([&] { cg->run({a.view(), a.view()}, {out_bad.view()}); });
  EXPECT_NE(e.find("output 0 has shape [4, 5], expected [4, 4]"), std::string::npos) << e;
  e = error_of([&] { cg->run({a.view(), a.view()}, {}); });
  EXPECT_NE(e.find("expected 1 outputs, got 0"), std::string::npos) << e;
  e = error_of([&] { cg->prepare({{4, 4}}); });
  EXPECT_NE(e.find("expected 2 input shapes, got 1"), std::string::npos) << e;
  // Failed calls leave the graph usable.
  cg->run({a.view(), a.view()}, {out.view()});
  EXPECT_FLOAT_EQ(out.ptr<float>()[5], 2 * a.ptr<float>()[5]);
}

TEST(Runtime, StridedInputsArePackedBeforeKernelsAndViewsReadThem) {
  auto build = [] {
    auto g = std::make_unique<Graph>();
    Value* x = g->add_input("x", f32({3, 4}));
    Value* v = g->add_node("reshape", {x}, {{"shape", Ints{12}}})->output();
    Value* r = g->add_node("relu", {x})->output();
    g->set_outputs({v, r, x});
    return g;
  };
  Tensor x = random_tensor(DType::f32, {3, 4}, 9);
  auto [strided, storage] = updraft::testing::transposed_copy(x);
  ASSERT_FALSE(strided.is_contiguous());
  auto ref = build();
  auto want = reference(*ref, {x});
  auto cg = Executable::compile(build(), {});
  for (int rep = 0; rep < 2; ++rep) {  // strided then contiguous on the same plan (and arena)
    auto got = run_compiled(*cg, {rep == 0 ? strided : x.view()});
    for (size_t k = 0; k < got.size(); ++k) EXPECT_TRUE(all_close(got[k], want[k], 0, 0)) << "rep " << rep << " out " << k;
  }
}

// The plan's copy-in and copy-out are cpu::copy_strided (plan.h: who makes strided inputs
// contiguous): every element size, a broadcast row (stride 0), padded rows, and a transpose big
// enough for the threaded copy. x is read by a view (packed, then copied out through the view
// and as itself), y only returned (copied from its strided view). No kernel runs, so the
// allocation count is the runtime's own: a steady-state strided call allocates nothing.
TEST(Runtime, StridedInputsOfEveryLayoutAndElementSizeArriveExactly) {
  auto dense = [](const TensorView& v) {  // the view's elements, row-major, by a plain loop
    Tensor t(v.dtype, v.shape());
    const size_t es = dtype_size(v.dtype);
    for (int64_t i = 0; i < v.sizes[0]; ++i)
      for (int64_t j = 0; j < v.sizes[1]; ++j)
        std::memcpy(static_cast<char*>(t.data()) + (i * v.sizes[1] + j) * es,
                    static_cast<const char*>(v.data) + (i * v.strides[0] + j * v.strides[1]) * es, es);
    return t;
  };
  auto same_bytes = [](const Tensor& a, const Tensor& b) {
    return a.shape() == b.shape() && a.nbytes() == b.nbytes() && std::memcmp(a.data(), b.data(), a.nbytes()) == 0;
  };
  for (DType dt : {DType::u8, DType::bf16, DType::f32, DType::i64}) {
    for (const char* layout : {"broadcast", "padded", "transposed"}) {
      const bool big = std::string(layout) == "transposed" && dt == DType::f32;
      const int64_t rows = big ? 300 : 5, cols = big ? 400 : 7;
      // Storage of distinct bytes, viewed with the layout's strides as a [rows, cols] tensor.
      Tensor store(dt, {rows + 1, cols + 3});
      for (size_t b = 0; b < store.nbytes(); ++b) static_cast<uint8_t*>(store.data())[b] = static_cast<uint8_t>(b * 7 + 1);
      TensorView v = TensorView::contiguous(store.data(), dt, {rows, cols});
      if (std::string(layout) == "broadcast") v.strides[0] = 0;
      if (std::string(layout) == "padded") v.strides[0] = cols + 3;
      if (std::string(layout) == "transposed") {
        v.strides[0] = 1;
        v.strides[1] = rows;
      }
      ASSERT_FALSE(v.is_contiguous());
      auto g = std::make_unique<Graph>();
      Value* x = g->add_input("x", {dt, {rows, cols}});
      Value* y = g->add_input("y", {dt, {rows, cols}});
      Value* r = g->add_node("reshape", {x}, {{"shape", Ints{rows * cols}}})->output();
      g->set_outputs({x, r, y});
      auto cg = Executable::compile(std::move(g), {});
      const Tensor want = dense(v);
      Tensor o0(dt, {rows, cols}), o1(dt, {rows * cols}), o2(dt, {rows, cols});
      std::vector<TensorView> ins = {v, v}, outs = {o0.view(), o1.view(), o2.view()};
      cg->prepare({{rows, cols}, {rows, cols}});
      cg->run(ins, outs);
      const std::string what = std::string(dtype_name(dt)) + " " + layout;
      EXPECT_TRUE(same_bytes(o0, want)) << what;
      EXPECT_TRUE(std::memcmp(o1.data(), want.data(), want.nbytes()) == 0) << what;
      EXPECT_TRUE(same_bytes(o2, want)) << what;
      if (big) continue;  // the threaded copy's pool may allocate; the small copies run inline
      g_allocs = 0;
      t_count_allocs = true;
      for (int i = 0; i < 5; ++i) cg->run(ins, outs);
      t_count_allocs = false;
      EXPECT_EQ(g_allocs.load(), 0) << what;
    }
  }
}

// Caller outputs of 32 MB and more are advised huge pages before the call writes them (plan.cpp:
// glibc maps such blocks fresh for every torch.empty, so each call faulted them in 4 KB at a
// time); smaller ones are left alone. Both big outputs coalesce to one row, which copy_strided
// cuts into pieces over the threads: a broadcast fill (embedding gradients start as one) and a
// contiguous copy; their values must arrive whole.
namespace {
// VmFlags of the mapping holding `p` (/proc/self/smaps), or "" where there is none.
std::string vm_flags_at(const void* p) {
  std::ifstream smaps("/proc/self/smaps");
  const auto a = reinterpret_cast<uintptr_t>(p);
  bool inside = false;
  for (std::string line; std::getline(smaps, line);) {
    unsigned long lo = 0, hi = 0;
    if (std::sscanf(line.c_str(), "%lx-%lx ", &lo, &hi) == 2 && line.find(':') > line.find('-')) {
      inside = a >= lo && a < hi;
      continue;
    }
    if (inside && line.rfind("VmFlags:", 0) == 0) return line;
  }
  return "";
}
}  // namespace

TEST(Runtime, LargeCallerOutputsAreAdvisedHugePages) {
  const int64_t big = (int64_t{36} << 20) / 4, small = (int64_t{8} << 20) / 4;  // f32 elements
  auto g = std::make_unique<Graph>();
  Value* c = g->add_input("c", f32({1}));
  Value* x = g->add_input("x", f32({big}));
  Value* fill = g->add_node("expand", {c}, {{"shape", Ints{big}}})->output();
  Value* part = g->add_node("expand", {c}, {{"shape", Ints{small}}})->output();
  g->set_outputs({fill, x, part});
  CompileOptions opts;
  opts.num_threads = 2;
  auto cg = Executable::compile(std::move(g), opts);
  // Outputs in fresh private mappings, as glibc gives torch.empty for blocks this large.
  auto map = [](int64_t n) {
    void* p = mmap(nullptr, static_cast<size_t>(n) * 4, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    EXPECT_NE(p, MAP_FAILED);
    return static_cast<float*>(p);
  };
  float *o_fill = map(big), *o_copy = map(big), *o_part = map(small);
  Tensor cv(DType::f32, {1}), xv = random_tensor(DType::f32, {big}, 3);
  *static_cast<float*>(cv.data()) = 0.25f;
  std::vector<TensorView> ins = {cv.view(), xv.view()};
  std::vector<TensorView> outs = {TensorView::contiguous(o_fill, DType::f32, {big}),
                                  TensorView::contiguous(o_copy, DType::f32, {big}),
                                  TensorView::contiguous(o_part, DType::f32, {small})};
  cg->run(ins, outs);
  int64_t wrong_fill = 0, wrong_part = 0;
  for (int64_t i = 0; i < big; ++i) wrong_fill += o_fill[i] != 0.25f;
  for (int64_t i = 0; i < small; ++i) wrong_part += o_part[i] != 0.25f;
  EXPECT_EQ(wrong_fill, 0);
  EXPECT_EQ(wrong_part, 0);
  EXPECT_EQ(std::memcmp(o_copy, xv.data(), static_cast<size_t>(big) * 4), 0);
  // The first whole huge page inside each buffer: its mapping carries "hg" once advised. A
  // kernel built without transparent huge pages (no /sys/kernel/mm/transparent_hugepage) refuses
  // the advice, and there is no flag to read: only the values above are checked there.
  const bool thp = static_cast<bool>(std::ifstream("/sys/kernel/mm/transparent_hugepage/enabled"));
  auto first_huge = [](const float* p) {
    return reinterpret_cast<const void*>((reinterpret_cast<uintptr_t>(p) + kHugePage - 1) / kHugePage * kHugePage);
  };
  if (thp) {
    EXPECT_NE(vm_flags_at(first_huge(o_fill)).find(" hg"), std::string::npos) << vm_flags_at(first_huge(o_fill));
    EXPECT_NE(vm_flags_at(first_huge(o_copy)).find(" hg"), std::string::npos);
  }
  EXPECT_EQ(vm_flags_at(first_huge(o_part)).find(" hg"), std::string::npos) << "an 8 MB output was advised";
  munmap(o_fill, static_cast<size_t>(big) * 4);
  munmap(o_copy, static_cast<size_t>(big) * 4);
  munmap(o_part, static_cast<size_t>(small) * 4);
}

TEST(Runtime, ManyThreadsShareOneExecutable) {
  auto cg = Executable::compile(small_graph(), {});
  auto ref = small_graph();
  struct Case {
    std::vector<Tensor> in, want;
  };
  std::vector<Case> cases;
  for (uint32_t s = 0; s < 8; ++s) {
    Case c;
    c.in = {random_tensor(DType::f32, {3, 5}, 100 + s), random_tensor(DType::f32, {3, 5}, 200 + s)};
    c.want = reference(*ref, c.in);
    cases.push_back(std::move(c));
  }
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      Tensor o0(DType::f32, {5, 3}), o1(DType::f32, {3, 5});
      for (int i = 0; i < 200; ++i) {
        const Case& c = cases[(t * 3 + i) % cases.size()];
        cg->run(views_of(c.in), {o0.view(), o1.view()});
        if (!all_close(o0, c.want[0], 1e-6, 1e-6) || !all_close(o1, c.want[1], 1e-6, 1e-6)) failures++;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(cg->num_plans(), 1u);
}

TEST(Runtime, SteadyStateCallDoesNotAllocate) {
  // Only runtime machinery here (a view and output copies), so the count is the runtime's own.
  auto g = std::make_unique<Graph>();
  Value* x = g->add_input("x", f32({4, 6}));
  Value* v = g->add_node("reshape", {x}, {{"shape", Ints{24}}})->output();
  g->set_outputs({v, x});
  auto cg = Executable::compile(std::move(g), {});
  Tensor in = random_tensor(DType::f32, {4, 6}, 5), o0(DType::f32, {24}), o1(DType::f32, {4, 6});
  std::vector<TensorView> ins = {in.view()}, outs = {o0.view(), o1.view()};
  cg->run(ins, outs);  // first call builds the plan and the pooled arena
  g_allocs = 0;
  t_count_allocs = true;
  for (int i = 0; i < 10; ++i) cg->run(ins, outs);
  t_count_allocs = false;
  EXPECT_EQ(g_allocs.load(), 0);
  EXPECT_TRUE(all_close(o1, in, 0, 0));
}

TEST(Runtime, ArenasFreedAfterEachCallWhenNotKept) {
  // keep_arenas=false (training graphs): every call makes its state (arena, views) anew and
  // frees it on return, so a call allocates where the pooled steady state does not, and the
  // results are the same call after call.
  std::vector<Tensor> in = {random_tensor(DType::f32, {3, 5}, 1), random_tensor(DType::f32, {3, 5}, 2)};
  CompileOptions freed;
  freed.keep_arenas = false;
  expect_matches_reference(small_graph, in, freed);
  auto cg = Executable::compile(small_graph(), freed);
  auto first = run_compiled(*cg, views_of(in));
  std::vector<Tensor> outs = {Tensor(DType::f32, {5, 3}), Tensor(DType::f32, {3, 5})};
  std::vector<TensorView> out_views = {outs[0].view(), outs[1].view()};
  g_allocs = 0;
  t_count_allocs = true;
  for (int i = 0; i < 3; ++i) cg->run(views_of(in), out_views);
  t_count_allocs = false;
  EXPECT_GE(g_allocs.load(), 3);  // one state per call at least
  for (size_t k = 0; k < outs.size(); ++k) EXPECT_TRUE(all_close(outs[k], first[k], 0, 0)) << "output " << k;
}

TEST(Runtime, RandomGraphsOfChainsViewsAndReusedValuesMatchReference) {
  // Random DAGs over f32 [6, 8] values: unary ops (in-place candidates), binary ops on values
  // of one shape, reshapes there and back (views), values read again much later, and output
  // lists with inputs, views and repeats. Exercises liveness, in-place reuse and copy-outs.
  const char* unary[] = {"relu", "neg", "abs", "sigmoid", "sqrt"};  // (sqrt: NaNs must match too)
  const char* binary[] = {"add", "sub", "mul", "maximum"};
  for (uint32_t seed = 0; seed < 40; ++seed) {
    auto build = [seed, &unary, &binary] {
      std::mt19937 rng(seed);
      auto g = std::make_unique<Graph>();
      std::vector<Value*> flat, square;  // values of shape [48] and [6, 8]
      square.push_back(g->add_input("x", f32({6, 8})));
      square.push_back(g->add_input("y", f32({6, 8})));
      int n = 3 + static_cast<int>(rng() % 12);
      for (int i = 0; i < n; ++i) {
        Value* a = square[rng() % square.size()];
        switch (rng() % 4) {
          case 0: square.push_back(g->add_node(unary[rng() % 5], {a})->output()); break;
          case 1: square.push_back(g->add_node(binary[rng() % 4], {a, square[rng() % square.size()]})->output()); break;
          case 2: flat.push_back(g->add_node("reshape", {a}, {{"shape", Ints{48}}})->output()); break;
          default:
            if (flat.empty()) break;
            square.push_back(g->add_node("reshape", {flat[rng() % flat.size()]}, {{"shape", Ints{6, 8}}})->output());
        }
      }
      std::vector<Value*> outs = {square.back()};
      int extra = static_cast<int>(rng() % 4);
      for (int i = 0; i < extra; ++i) {
        bool pick_flat = !flat.empty() && rng() % 3 == 0;
        outs.push_back(pick_flat ? flat[rng() % flat.size()] : square[rng() % square.size()]);
      }
      g->set_outputs(outs);
      return g;
    };
    std::vector<Tensor> in = {random_tensor(DType::f32, {6, 8}, seed), random_tensor(DType::f32, {6, 8}, seed + 99)};
    SCOPED_TRACE("seed " + std::to_string(seed));
    CompileOptions nofuse;
    nofuse.fuse = false;  // keep every node, so in-place and view decisions are all exercised
    expect_matches_reference(build, in, nofuse);
    expect_matches_reference(build, in);
  }
}

TEST(Runtime, PlanTextShowsScheduleKernelsAndMemory) {
  auto cg = Executable::compile(small_graph(), {});
  std::string t = cg->plan_text({{3, 5}, {3, 5}});
  EXPECT_NE(t.find("steps ("), std::string::npos) << t;
  EXPECT_NE(t.find("arena"), std::string::npos) << t;
  EXPECT_NE(t.find("input 0"), std::string::npos) << t;
  EXPECT_NE(t.find("output 1"), std::string::npos) << t;
  EXPECT_EQ(cg->num_plans(), 1u);
}
