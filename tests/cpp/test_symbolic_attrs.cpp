// Symbolic size attributes (Attr Dims / Sym): text IR round trips, reshape/expand/slice shape
// functions with two symbolic dims, and one compiled graph run at many shapes (one compile,
// one plan per shape, results checked against plain loops).
#include <gtest/gtest.h>

#include "core/error.h"
#include "ir/op_table.h"
#include "ir/text.h"
#include "runtime/executable.h"
#include "test_util.h"

using namespace updraft;
using updraft::testing::all_close;
using updraft::testing::random_tensor;

namespace {

TensorType f32(std::vector<Dim> s) { return {DType::f32, std::move(s)}; }
const Dim s0 = Dim::sym("s0"), s1 = Dim::sym("s1");

Shape infer1(const std::string& op, const Shape& in, const Attrs& attrs) {
  return OpTable::get().infer(op, {f32(in)}, attrs).at(0).shape;
}

std::string infer_error(const std::string& op, const Shape& in, const Attrs& attrs) {
  try {
    infer1(op, in, attrs);
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << op << " accepted " << shape_str(in);
  return "";
}

// The BERT attention pattern with batch s0 and sequence s1: split heads, move them, flatten
// batch and heads, add a broadcast row and a slice of a table cut to the sequence length.
const char* kGraph = R"(graph(%x: f32[s0, s1, 48], %y: f32[s1, 1]) {
  %c = constant f32[16, 12] random(seed=3)
  %r = reshape(%x) {shape=[s0, s1, 4, 12]} : f32[s0, s1, 4, 12]
  %p = permute(%r) {dims=[0, 2, 1, 3]} : f32[s0, 4, s1, 12]
  %f = reshape(%p) {shape=[(s0*4), s1, 12]} : f32[(s0*4), s1, 12]
  %e = expand(%y) {shape=[(s0*4), s1, 12]} : f32[(s0*4), s1, 12]
  %t = slice(%c) {dim=0, end=s1, start=0} : f32[s1, 12]
  %a = add(%f, %e)
  %o = add(%a, %t)
  return (%o)
}
)";

}  // namespace

TEST(SymbolicAttrs, AttrKindsPrintAndNormalise) {
  Attr a = Attr::from_dims({s0, s1 * 12, 64});
  EXPECT_EQ(a.kind(), Attr::Kind::Dims);
  EXPECT_EQ(a.str(), "[s0, (s1*12), 64]");
  // All-static lists are Ints, so they compare equal to Ints built directly.
  Attr st = Attr::from_dims({2, 3});
  EXPECT_EQ(st.kind(), Attr::Kind::Ints);
  EXPECT_EQ(st, Attr(std::vector<int64_t>{2, 3}));
  EXPECT_EQ(Attr::from_dim(Dim(5)).kind(), Attr::Kind::Int);
  EXPECT_EQ(Attr::from_dim(s1 + 1).str(), "(s1+1)");
  Attrs bound = bind_attrs({{"shape", a}, {"end", Attr::from_dim(s1)}, {"dim", Attr(1)}}, {{"s0", 2}, {"s1", 5}});
  EXPECT_EQ(bound.at("shape").ints(), (std::vector<int64_t>{2, 60, 64}));
  EXPECT_EQ(bound.at("end").i(), 5);
  EXPECT_EQ(bound.at("dim").i(), 1);
  try {
    bind_attrs({{"shape", a}}, {{"s0", 2}});
    ADD_FAILURE() << "bound without s1";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'shape'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("s1"), std::string::npos) << e.what();
  }
}

TEST(SymbolicAttrs, TextIrRoundTripsSymbolicShapeAttrs) {
  auto g = parse_graph(kGraph);
  std::string once = print_graph(*g, PrintOptions{-1});
  EXPECT_NE(once.find("{shape=[s0, s1, 4, 12]}"), std::string::npos) << once;
  EXPECT_NE(once.find("{shape=[(s0*4), s1, 12]}"), std::string::npos) << once;
  EXPECT_NE(once.find("end=s1"), std::string::npos) << once;
  auto g2 = parse_graph(once);
  EXPECT_EQ(print_graph(*g2, PrintOptions{-1}), once);
  const Node* r = g2->nodes()[0];
  ASSERT_EQ(r->op_name(), "reshape");
  EXPECT_EQ(r->attr("shape"), Attr::from_dims({s0, s1, 4, 12}));
  // max/min and floor division parse as attribute entries too; inf stays a float.
  auto g3 = parse_graph(R"(graph(%x: f32[s0, 6]) {
  %0 = reshape(%x) {shape=[max(s0,1), ((s0*6)//max(s0,1))]}
  %1 = clamp(%0) {max=inf, min=-inf}
  return (%1)
})");
  EXPECT_EQ(print_graph(*parse_graph(print_graph(*g3))), print_graph(*g3));
  EXPECT_EQ(parse_dim("s0*s1 + 1"), s0 * s1 + 1);
  EXPECT_THROW(parse_dim("s0 *"), Error);
  EXPECT_THROW(parse_graph("graph(%x: f32[s0]) {\n  %0 = reshape(%x) {shape=[s0, 1.5]}\n  return (%0)\n}"), Error);
}

TEST(SymbolicAttrs, ReshapeWithTwoSymbolicDims) {
  auto shape = [](Shape s) { return Attrs{{"shape", Attr::from_dims(s)}}; };
  EXPECT_EQ(infer1("reshape", {s0, s1, 768}, shape({s0, s1, 12, 64})), (Shape{s0, s1, 12, 64}));
  EXPECT_EQ(infer1("reshape", {s0, s1, 12, 64}, shape({s0, s1, 768})), (Shape{s0, s1, 768}));
  EXPECT_EQ(infer1("reshape", {s0, s1, 768}, shape({s0 * s1, 768})), (Shape{s0 * s1, 768}));
  // A -1 next to symbolic dims cancels the factors it can.
  EXPECT_EQ(infer1("reshape", {s0, s1, 768}, shape({s0, -1, 64})), (Shape{s0, s1 * 12, 64}));
  EXPECT_EQ(infer1("reshape", {s0 * s1, 768}, shape({s0, -1, 12, 64})), (Shape{s0, s1, 12, 64}));
  // The same symbols with a different constant are wrong for every binding.
  EXPECT_NE(infer_error("reshape", {s0, s1, 768}, shape({s0, s1, 12, 32})).find("constant factor"), std::string::npos);
  EXPECT_NE(infer_error("reshape", {s0, s1, 8}, shape({s0, -1, -1})).find("more than one -1"), std::string::npos);
  EXPECT_NE(infer_error("reshape", {s0, 8}, shape({4, 8})).find("symbolic"), std::string::npos);
  // Ints still work.
  EXPECT_EQ(infer1("reshape", {2, 6}, {{"shape", Attr(std::vector<int64_t>{3, -1})}}), (Shape{3, 4}));
}

TEST(SymbolicAttrs, ExpandWithTwoSymbolicDims) {
  auto shape = [](Shape s) { return Attrs{{"shape", Attr::from_dims(s)}}; };
  EXPECT_EQ(infer1("expand", {1, s1}, shape({s0, s1})), (Shape{s0, s1}));
  EXPECT_EQ(infer1("expand", {s1, 1}, shape({s0 * 4, s1, 12})), (Shape{s0 * 4, s1, 12}));
  EXPECT_EQ(infer1("expand", {1, 1}, shape({s0, s1})), (Shape{s0, s1}));
  EXPECT_EQ(infer1("expand", {s0, 1}, shape({-1, s1})), (Shape{s0, s1}));
  EXPECT_NE(infer_error("expand", {s0, 1}, shape({5, s1})).find("cannot expand"), std::string::npos);
  EXPECT_NE(infer_error("expand", {2}, shape({s0})).find("cannot expand"), std::string::npos);
}

TEST(SymbolicAttrs, SliceWithSymbolicEnd) {
  Attrs a{{"dim", Attr(0)}, {"start", Attr(0)}, {"end", Attr::from_dim(s1)}};
  EXPECT_EQ(infer1("slice", {512, 768}, a), (Shape{s1, 768}));
  a["start"] = Attr(2);
  EXPECT_EQ(infer1("slice", {512, 768}, a), (Shape{max(s1 - 2, Dim(0)), 768}));
  // Ints for a symbolic spec; a symbolic size where an int list is expected is rejected.
  EXPECT_EQ(infer1("slice", {8}, {{"dim", Attr(0)}, {"start", Attr(1)}, {"end", Attr(3)}}), (Shape{2}));
  EXPECT_NE(infer_error("permute", {s0, s1}, {{"dims", Attr::from_dims({s0, 1})}}).find("wrong kind"),
            std::string::npos);
}

TEST(SymbolicAttrs, OneCompileServesEveryShape) {
  auto cg = Executable::compile(parse_graph(kGraph), CompileOptions{});
  auto ref_graph = parse_graph(kGraph);
  const Tensor& c = *ref_graph->constants().at(0)->constant;
  const float* cp = c.ptr<float>();
  int runs = 0;
  for (auto [b, t] : std::vector<std::pair<int64_t, int64_t>>{{1, 3}, {2, 16}, {3, 7}, {1, 1}, {2, 16}, {4, 9}}) {
    Tensor x = random_tensor(DType::f32, {b, t, 48}, static_cast<uint32_t>(b * 100 + t));
    Tensor y = random_tensor(DType::f32, {t, 1}, static_cast<uint32_t>(b * 7 + t));
    auto shapes = cg->prepare({{b, t, 48}, {t, 1}});
    ASSERT_EQ(shapes, (std::vector<std::vector<int64_t>>{{b * 4, t, 12}}));
    Tensor out(DType::f32, shapes[0]);
    cg->run({x.view(), y.view()}, {out.view()});
    Tensor want(DType::f32, shapes[0]);
    const float* xp = x.ptr<float>();
    const float* yp = y.ptr<float>();
    float* wp = want.ptr<float>();
    for (int64_t bi = 0; bi < b; ++bi)
      for (int64_t h = 0; h < 4; ++h)
        for (int64_t ti = 0; ti < t; ++ti)
          for (int64_t e = 0; e < 12; ++e)
            wp[((bi * 4 + h) * t + ti) * 12 + e] = xp[(bi * t + ti) * 48 + h * 12 + e] + yp[ti] + cp[ti * 12 + e];
    EXPECT_TRUE(all_close(out, want, 1e-6, 1e-6)) << "s0=" << b << " s1=" << t;
    ++runs;
  }
  EXPECT_EQ(runs, 6);
  // Five distinct signatures, five plans over the one compile: built, or made from a size
  // bucket's template (range plans: the table's slice to s1 evaluates its end per call).
  const PlanStats st = cg->plan_stats();
  EXPECT_EQ(st.range, "on");
  EXPECT_GT(st.instantiated, 0u);
  EXPECT_LT(st.built, 5u);
  EXPECT_GT(cg->plan_stats().total_ms, 0.0);
  // s1 beyond the table: PyTorch clamps the slice to 16 rows, which no longer broadcasts
  // against s1 = 20; the plan says so instead of running mis-sized buffers.
  EXPECT_THROW(cg->prepare({{1, 20, 48}, {20, 1}}), Error);
}

TEST(SymbolicAttrs, UnprovableReshapeIsCheckedPerBinding) {
  // [s0, s1, 48] -> [s2, 48] cannot be shown equal symbolically; the plan checks each binding.
  auto g = parse_graph(R"(graph(%x: f32[s0, s1, 48], %n: f32[s2]) {
  %0 = reshape(%x) {shape=[s2, 48]}
  %1 = copy(%0)
  return (%1)
})");
  auto cg = Executable::compile(std::move(g), CompileOptions{});
  EXPECT_EQ(cg->prepare({{2, 3, 48}, {6}}), (std::vector<std::vector<int64_t>>{{6, 48}}));
  try {
    cg->prepare({{2, 3, 48}, {5}});
    ADD_FAILURE() << "a reshape of 288 elements to [5, 48] was planned";
  } catch (const Error& e) {
    EXPECT_EQ(e.component(), "runtime");
    EXPECT_NE(std::string(e.what()).find("reshape"), std::string::npos) << e.what();
  }
}
