// Size inputs: an i64 scalar graph input whose value binds a symbol that no tensor input has
// as a dim (arange(n + 1), a cache position). Text IR round trip and its parse errors; one
// compile run at several values, a plan per value, matched by value; the value read as a
// tensor too; a conflict with a tensor dim binding the same symbol; the interpreter agrees.
#include <gtest/gtest.h>

#include "core/error.h"
#include "ir/text.h"
#include "runtime/executable.h"
#include "runtime/interpreter.h"
#include "test_util.h"

using namespace updraft;

namespace {

// out[i, j] = 2 + n for i in [0, n + 1), j in [0, 4); the tensor input's rows are summed in.
const char* kGraph = R"(graph(%x: f32[s0, 4], %n: i64[] = s1) {
  %c = constant f32[1, 1] [2.0]
  %e = expand(%c) {shape=[(s1+1), 4]} : f32[(s1+1), 4]
  %nf = cast(%n) {dtype="f32"} : f32[]
  %a = add(%e, %nf) : f32[(s1+1), 4]
  %r = sum(%x) {dims=[0], keepdim=true} : f32[1, 4]
  %o = add(%a, %r) : f32[(s1+1), 4]
  return (%o)
}
)";

Tensor scalar_i64(int64_t v) {
  Tensor t(DType::i64, {});
  *t.ptr<int64_t>() = v;
  return t;
}

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(SizeInput, TextIrRoundTrip) {
  auto g = parse_graph(kGraph);
  ASSERT_EQ(g->inputs().size(), 2u);
  EXPECT_TRUE(g->inputs()[0]->binds.empty());
  EXPECT_EQ(g->inputs()[1]->binds, "s1");
  EXPECT_EQ(g->inputs()[1]->type.str(), "i64[]");
  std::string once = print_graph(*g, PrintOptions{-1});
  EXPECT_NE(once.find("%n: i64[] = s1"), std::string::npos) << once;
  EXPECT_EQ(print_graph(*parse_graph(once), PrintOptions{-1}), once);
}

TEST(SizeInput, ParseErrors) {
  EXPECT_NE(error_of([] { parse_graph("graph(%n: f32[] = s1) {\n  %0 = copy(%n)\n  return (%0)\n}"); })
                .find("a size input has type i64[]"),
            std::string::npos);
  EXPECT_NE(error_of([] { parse_graph("graph(%n: i64[2] = s1) {\n  %0 = copy(%n)\n  return (%0)\n}"); })
                .find("i64[]"),
            std::string::npos);
  EXPECT_NE(error_of([] {
              parse_graph("graph(%n: i64[] = s1, %m: i64[] = s1) {\n  %0 = add(%n, %m)\n  return (%0)\n}");
            }).find("binds already"),
            std::string::npos);
  EXPECT_NE(error_of([] { parse_graph("graph(%n: i64[] = 3) {\n  %0 = copy(%n)\n  return (%0)\n}"); }), "");
}

TEST(SizeInput, OneCompileServesEveryValue) {
  auto cg = Executable::compile(parse_graph(kGraph), CompileOptions{});
  Tensor x = updraft::testing::random_tensor(DType::f32, {3, 4}, 7);
  float colsum[4] = {0, 0, 0, 0};
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 4; ++j) colsum[j] += x.ptr<float>()[i * 4 + j];
  for (int64_t n : {0, 3, 7, 3, 12}) {
    // The signature entry of a size input is {value}.
    auto shapes = cg->prepare({{3, 4}, {n}});
    ASSERT_EQ(shapes, (std::vector<std::vector<int64_t>>{{n + 1, 4}}));
    Tensor out(DType::f32, shapes[0]);
    Tensor nv = scalar_i64(n);
    cg->run({x.view(), nv.view()}, {out.view()});
    for (int64_t i = 0; i < n + 1; ++i)
      for (int j = 0; j < 4; ++j)
        ASSERT_NEAR(out.ptr<float>()[i * 4 + j], 2.0f + static_cast<float>(n) + colsum[j], 1e-5)
            << "n=" << n << " at " << i << "," << j;
  }
  // Four distinct values, four plans: the repeated n=3 matched its plan by value.
  EXPECT_EQ(cg->plan_stats().built, 4u);
  // A plan is chosen by the value, not the (always empty) shape: n=7's plan does not run n=5.
  auto plan7 = cg->plan({{3, 4}, {7}});
  Tensor out(DType::f32, {8, 4});
  Tensor five = scalar_i64(5);
  EXPECT_NE(error_of([&] { cg->run_plan(*plan7, {x.view(), five.view()}, {out.view()}); }).find("not the plan's"),
            std::string::npos);
  // The signature entry must hold the value, and a size input takes an i64 scalar.
  EXPECT_NE(error_of([&] { cg->prepare({{3, 4}, {}}); }).find("size input"), std::string::npos);
  Tensor wrong(DType::i32, {});
  EXPECT_NE(error_of([&] { cg->run({x.view(), wrong.view()}, {out.view()}); }).find("dtype"), std::string::npos);
}

TEST(SizeInput, ConflictWithATensorDimIsAnError) {
  auto cg = Executable::compile(parse_graph(R"(graph(%x: f32[s1], %n: i64[] = s1) {
  %nf = cast(%n) {dtype="f32"}
  %o = add(%x, %nf)
  return (%o)
})"),
                                   CompileOptions{});
  EXPECT_EQ(cg->prepare({{4}, {4}}), (std::vector<std::vector<int64_t>>{{4}}));
  EXPECT_NE(error_of([&] { cg->prepare({{4}, {5}}); }).find("already 4"), std::string::npos);
}

TEST(SizeInput, InterpreterBindsByValue) {
  auto g = parse_graph(kGraph);
  Tensor x = updraft::testing::random_tensor(DType::f32, {2, 4}, 3);
  auto outs = interpret(*g, {x, scalar_i64(5)}, Device::ref);
  ASSERT_EQ(outs.size(), 1u);
  EXPECT_EQ(outs[0].shape(), (std::vector<int64_t>{6, 4}));
  auto cg = Executable::compile(parse_graph(kGraph), CompileOptions{});
  Tensor out(DType::f32, {6, 4});
  Tensor n = scalar_i64(5);
  cg->run({x.view(), n.view()}, {out.view()});
  EXPECT_TRUE(updraft::testing::all_close(out, outs[0], 1e-6, 1e-6));
}
