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
