// interpret: the pass-test oracle. Binds symbols from input shapes and checks inputs.
#include <gtest/gtest.h>

#include "core/error.h"
#include "ir/text.h"
#include "runtime/interpreter.h"
#include "runtime/plan.h"
#include "test_util.h"

using namespace updraft;
using namespace updraft::testing;

namespace {
const char* kGraph = R"(graph(%x: f32[s0, 3], %y: f32[(s0*2), 3]) {
  %c = constant f32[3] [1.0, 2.0, 3.0]
  %0 = add(%x, %c)
  %1 = reshape(%0) {shape=[-1]}
  %2 = sum(%y) {dims=[0]}
  return (%1, %2, %x)
})";
}  // namespace

TEST(Interpreter, BindsSymbolsAndComputes) {
  auto g = parse_graph(kGraph);
  Tensor x = random_tensor(DType::f32, {2, 3}, 1), y = random_tensor(DType::f32, {4, 3}, 2);
  auto out = interpret(*g, {x, y}, Device::ref);
  ASSERT_EQ(out.size(), 3u);
  EXPECT_EQ(out[0].shape(), (std::vector<int64_t>{6}));
  for (int i = 0; i < 6; ++i) EXPECT_FLOAT_EQ(out[0].ptr<float>()[i], x.ptr<float>()[i] + 1.0f + (i % 3));
  for (int j = 0; j < 3; ++j) {
    double s = 0;
    for (int i = 0; i < 4; ++i) s += y.ptr<float>()[i * 3 + j];
    EXPECT_NEAR(out[1].ptr<float>()[j], s, 1e-5);
  }
  EXPECT_EQ(out[2].data(), x.data());  // an input returned as an output is that input
}

TEST(Interpreter, RejectsInputsThatDoNotMatch) {
  auto g = parse_graph(kGraph);
  auto msg = [&](std::vector<Tensor> in) -> std::string {
    try {
      interpret(*g, in, Device::ref);
    } catch (const Error& e) {
      return e.what();
    }
    return "no error";
  };
  EXPECT_NE(msg({Tensor(DType::f32, {2, 3}), Tensor(DType::f32, {5, 3})}).find("input 1 dim 0 is 5, expected 4 ((s0*2))"),
            std::string::npos);
  EXPECT_NE(msg({Tensor(DType::f32, {2, 3})}).find("expected 2 input shapes, got 1"), std::string::npos);
  EXPECT_NE(msg({Tensor(DType::f64, {2, 3}), Tensor(DType::f32, {4, 3})}).find("input 0 is f64"), std::string::npos);
  EXPECT_NE(msg({Tensor(DType::f32, {2, 4}), Tensor(DType::f32, {4, 3})}).find("input 0 dim 1 is 4"), std::string::npos);
}

// The interpreter and the execution plan bind symbols with one function: the same bad input
// shapes get the same words from both (only the component differs).
TEST(Interpreter, ChecksInputShapesAsThePlanDoes) {
  auto g = parse_graph(kGraph);
  auto only_expr = parse_graph("graph(%x: f32[(s0*2)]) {\n  %0 = relu(%x)\n  return (%0)\n}");
  auto strip = [](const std::string& what, const std::string& component) {
    const std::string tag = "[" + component + "] ";
    return what.rfind(tag, 0) == 0 ? what.substr(tag.size()) : "component is not " + component + ": " + what;
  };
  auto both = [&](const Graph& graph, const std::vector<std::vector<int64_t>>& shapes) {
    std::vector<Tensor> ins;
    for (const auto& s : shapes) ins.emplace_back(DType::f32, s);
    std::string a = "no error", b = "no error";
    try {
      interpret(graph, ins, Device::ref);
    } catch (const Error& e) {
      a = strip(e.what(), "interpret");
    }
    try {
      Plan::build(graph, shapes, CompileOptions{});
    } catch (const Error& e) {
      b = strip(e.what(), "runtime");
    }
    EXPECT_NE(a, "no error");
    EXPECT_EQ(a, b);
  };
  both(*g, {{2, 3}, {5, 3}});     // an expression of a bound symbol
  both(*g, {{2, 3}});             // too few inputs
  both(*g, {{2, 4}, {4, 3}});     // a static dim
  both(*g, {{2, 3, 1}, {4, 3}});  // a rank
  both(*only_expr, {{4}});        // a symbol that only appears inside an expression
}
