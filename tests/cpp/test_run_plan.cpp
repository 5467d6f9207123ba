// Executable::plan + run_plan, the lookup-free path the Python bindings use per call:
// same results as run(), the same validation, and a held plan outlives LRU eviction.
#include <gtest/gtest.h>

#include "core/error.h"
#include "ir/graph.h"
#include "runtime/executable.h"
#include "runtime/plan.h"
#include "test_util.h"

using namespace updraft;
using updraft::testing::all_close;
using updraft::testing::random_tensor;

namespace {

std::shared_ptr<Executable> relu_add(size_t cache = 16) {
  auto g = std::make_unique<Graph>();
  Value* x = g->add_input("x", {DType::f32, {Dim::sym("s0"), 5}});
  Value* y = g->add_input("y", {DType::f32, {Dim::sym("s0"), 5}});
  g->set_outputs({g->add_node("relu", {g->add_node("add", {x, y})->output()})->output()});
  CompileOptions o;
  o.plan_cache_size = cache;
  return Executable::compile(std::move(g), o);
}

}  // namespace

TEST(RunPlan, MatchesRun) {
  auto cg = relu_add();
  Tensor x = random_tensor(DType::f32, {3, 5}, 1), y = random_tensor(DType::f32, {3, 5}, 2);
  Tensor a(DType::f32, {3, 5}), b(DType::f32, {3, 5});
  cg->run({x.view(), y.view()}, {a.view()});
  auto plan = cg->plan({{3, 5}, {3, 5}});
  cg->run_plan(*plan, {x.view(), y.view()}, {b.view()});
  EXPECT_TRUE(all_close(a, b, 0, 0));
}

TEST(RunPlan, RejectsOtherShapesAndDtypes) {
  auto cg = relu_add();
  auto plan = cg->plan({{3, 5}, {3, 5}});
  Tensor x4 = random_tensor(DType::f32, {4, 5}, 1), out4(DType::f32, {4, 5});
  EXPECT_THROW(cg->run_plan(*plan, {x4.view(), x4.view()}, {out4.view()}), Error);
  Tensor x3 = random_tensor(DType::f32, {3, 5}, 1), out3(DType::f32, {3, 5});
  Tensor d3(DType::f64, {3, 5});
  EXPECT_THROW(cg->run_plan(*plan, {x3.view(), d3.view()}, {out3.view()}), Error);
  EXPECT_THROW(cg->run_plan(*plan, {x3.view(), x3.view()}, {out4.view()}), Error);
  EXPECT_NO_THROW(cg->run_plan(*plan, {x3.view(), x3.view()}, {out3.view()}));
}

TEST(RunPlan, HeldPlanSurvivesEviction) {
  auto cg = relu_add(/*cache=*/1);
  auto plan = cg->plan({{2, 5}, {2, 5}});
  (void)cg->plan({{7, 5}, {7, 5}});  // evicts the first from the LRU
  EXPECT_EQ(cg->num_plans(), 1u);
  Tensor x = random_tensor(DType::f32, {2, 5}, 3), out(DType::f32, {2, 5}), want(DType::f32, {2, 5});
  cg->run_plan(*plan, {x.view(), x.view()}, {out.view()});
  cg->run({x.view(), x.view()}, {want.view()});
  EXPECT_TRUE(all_close(out, want, 0, 0));
}

// Outputs that view an intermediate (a training forward returns reshape(x @ w) to save it): the
// intermediate is written into the first such output, which then needs no copy; a second view
// of it and a view of an output are still copied. Same results as the reference kernels.
TEST(RunPlan, OutputViewsOfIntermediatesAreNotCopied) {
  auto g = std::make_unique<Graph>();
  Value* x = g->add_input("x", {DType::f32, {6, 8}});
  Value* w = g->add_input("w", {DType::f32, {8, 5}});
  Value* y = g->add_node("matmul", {x, w})->output();
  Value* v = g->add_node("reshape", {y}, {{"shape", std::vector<int64_t>{30}}})->output();
  Value* v2 = g->add_node("reshape", {y}, {{"shape", std::vector<int64_t>{5, 6}}})->output();
  Value* z = g->add_node("relu", {y})->output();
  Value* zv = g->add_node("reshape", {z}, {{"shape", std::vector<int64_t>{3, 10}}})->output();
  g->set_outputs({z, v, v2, zv});
  CompileOptions o;
  auto cg = Executable::compile(std::move(g), o);
  cg->set_profiling(true);
  Tensor xt = random_tensor(DType::f32, {6, 8}, 1), wt = random_tensor(DType::f32, {8, 5}, 2);
  std::vector<Tensor> outs = {Tensor(DType::f32, {6, 5}), Tensor(DType::f32, {30}), Tensor(DType::f32, {5, 6}),
                              Tensor(DType::f32, {3, 10})};
  cg->run({xt.view(), wt.view()}, {outs[0].view(), outs[1].view(), outs[2].view(), outs[3].view()});
  // the reference: y = x @ w in double
  for (int64_t i = 0; i < 6; ++i)
    for (int64_t j = 0; j < 5; ++j) {
      double acc = 0;
      for (int64_t k = 0; k < 8; ++k) acc += double(xt.ptr<float>()[i * 8 + k]) * wt.ptr<float>()[k * 5 + j];
      const int64_t e = i * 5 + j;
      EXPECT_NEAR(outs[1].ptr<float>()[e], acc, 1e-4) << e;
      EXPECT_NEAR(outs[2].ptr<float>()[e], acc, 1e-4) << e;
      EXPECT_NEAR(outs[0].ptr<float>()[e], std::max(acc, 0.0), 1e-4) << e;
      EXPECT_EQ(outs[3].ptr<float>()[e], outs[0].ptr<float>()[e]) << e;
    }
  int copies = 0;
  for (const auto& [shapes, steps] : cg->step_times())
    for (const StepTime& t : steps) copies += t.op == "copy-out";
  EXPECT_EQ(copies, 2);  // v2 (y already hosts v) and zv (z is an output itself)
}

namespace {

// x -> exp -> a (output 0); x is read last by the add; y only through its view; z is returned.
std::shared_ptr<Executable> release_graph() {
  auto g = std::make_unique<Graph>();
  Value* x = g->add_input("x", {DType::f32, {4, 6}});
  Value* y = g->add_input("y", {DType::f32, {6, 4}});
  Value* z = g->add_input("z", {DType::f32, {3}});
  Value* a = g->add_node("exp", {x})->output();
  Value* yv = g->add_node("reshape", {y}, {{"shape", std::vector<int64_t>{4, 6}}})->output();
  Value* b = g->add_node("mul", {a, yv})->output();
  Value* c = g->add_node("add", {b, x})->output();
  Value* d = g->add_node("relu", {c})->output();
  g->set_outputs({a, d, z});
  CompileOptions o;
  o.fuse = false;  // one step per node
  return Executable::compile(std::move(g), o);
}

// The steps as they run, and output requests between them.
struct Trace : StepObserver, OutputSource {
  std::vector<std::string> events;
  std::vector<Tensor> mem;
  explicit Trace(size_t n) { mem.resize(n); }
  void before(const Plan& plan, const StepEvent& ev) override { events.push_back("step " + ev.op()); }
  void* output(size_t k, size_t bytes) override {
    events.push_back("output " + std::to_string(k));
    mem[k] = Tensor(DType::u8, {static_cast<int64_t>(bytes)});
    return mem[k].data();
  }
};

}  // namespace

// Plan::input_last_steps follows views (y is read through its reshape by the mul) and counts
// an output copy of an input (z); output_first_steps gives each output's first writer.
TEST(RunPlan, InputLastAndOutputFirstSteps) {
  auto cg = release_graph();
  auto plan = cg->plan({{4, 6}, {6, 4}, {3}});
  std::vector<std::string> ops;
  for (const Step& s : plan->steps()) ops.push_back(s.kind == Step::Kind::CopyOut ? "copy-out" : s.node->op_name());
  ASSERT_EQ(ops, (std::vector<std::string>{"exp", "mul", "add", "relu", "copy-out"}));
  EXPECT_EQ(plan->input_last_steps(), (std::vector<int>{2, 1, 4}));
  EXPECT_EQ(plan->output_first_steps(), (std::vector<int>{0, 3, 4}));
}

// Outputs passed without memory are asked of the OutputSource just before their first step,
// and the results are those of a call with the outputs given.
TEST(RunPlan, OutputSourceSuppliesEachOutputAtItsFirstStep) {
  auto cg = release_graph();
  auto plan = cg->plan({{4, 6}, {6, 4}, {3}});
  Tensor x = random_tensor(DType::f32, {4, 6}, 1), y = random_tensor(DType::f32, {6, 4}, 2),
         z = random_tensor(DType::f32, {3}, 3);
  std::vector<Tensor> want = {Tensor(DType::f32, {4, 6}), Tensor(DType::f32, {4, 6}), Tensor(DType::f32, {3})};
  cg->run_plan(*plan, {x.view(), y.view(), z.view()}, {want[0].view(), want[1].view(), want[2].view()});
  std::vector<TensorView> outs = {want[0].view(), want[1].view(), want[2].view()};
  for (TensorView& v : outs) v.data = nullptr;
  Trace trace(outs.size());
  cg->run_plan(*plan, {x.view(), y.view(), z.view()}, outs, &trace, &trace);
  EXPECT_EQ(trace.events, (std::vector<std::string>{"output 0", "step exp", "step mul", "step add", "output 1",
                                                    "step relu", "output 2", "step copy-out"}));
  for (size_t k = 0; k < outs.size(); ++k)
    EXPECT_EQ(std::memcmp(trace.mem[k].data(), want[k].data(), want[k].nbytes()), 0) << k;
  // Without a source, a null output is still an error.
  EXPECT_THROW(cg->run_plan(*plan, {x.view(), y.view(), z.view()}, outs), Error);
}
