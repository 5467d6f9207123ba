// Text IR: print/parse round trips (symbolic dims, every attribute kind, multi-output nodes,
// constants of every printable dtype) and the parser's error messages.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "core/error.h"
#include "ir/op_table.h"
#include "ir/text.h"

using namespace updraft;

namespace {

// print(parse(text)) is a fixed point: printing the reparsed print gives the same text.
std::string roundtrip(const std::string& text, const PrintOptions& opts = {}) {
  auto g = parse_graph(text);
  std::string once = print_graph(*g, opts);
  auto g2 = parse_graph(once);
  EXPECT_EQ(print_graph(*g2, opts), once);
  return once;
}

std::string parse_error(const std::string& text) {
  try {
    parse_graph(text);
  } catch (const Error& e) {
    EXPECT_EQ(e.component(), "parse");
    return e.what();
  }
  ADD_FAILURE() << "parsed without error:\n" << text;
  return "";
}

}  // namespace

TEST(TextIr, RoundTripsSymbolicDimsAndAttrs) {
  const std::string text = R"(graph(%x: f32[s0, 3, (s1*2), ((s1+1)//2)], %y: f32[8]) {
  %w = constant f32[2, 3] [1.0, -2.5, 0.125, 1e-20, inf, nan]   // comment after data
  %0 = gelu(%x) {approximate="tanh"} : f32[s0, 3, (s1*2), ((s1+1)//2)]
  %1 = clamp(%0) {max=6.0, min=-inf}
  %2 = sum(%1) {dims=[1, -1], keepdim=true} : f32[s0, 1, (s1*2), 1]
  %a, %b = split(%y) {dim=0, sizes=[3, 5]} : f32[3], f32[5]
  %3 = add(%w, %a) : f32[2, 3]
  return (%2, %3, %b)
})";
  std::string printed = roundtrip(text);
  EXPECT_NE(printed.find("graph(%x: f32[s0, 3, (s1*2), ((s1+1)//2)], %y: f32[8])"), std::string::npos) << printed;
  EXPECT_NE(printed.find("%w = constant f32[2, 3] [1.0, -2.5, 0.125, 9.99999968e-21, inf, nan]"), std::string::npos)
      << printed;
  EXPECT_NE(printed.find("clamp(%0) {max=6.0, min=-inf}"), std::string::npos) << printed;
  EXPECT_NE(printed.find("{dims=[1, -1], keepdim=true}"), std::string::npos) << printed;
  EXPECT_NE(printed.find("%a, %b = split(%y) {dim=0, sizes=[3, 5]} : f32[3], f32[5]"), std::string::npos) << printed;
  EXPECT_NE(printed.find("return (%2, %3, %b)"), std::string::npos) << printed;

  auto g = parse_graph(printed);
  ASSERT_EQ(g->num_nodes(), 5u);
  EXPECT_EQ(g->inputs()[0]->type.shape[2], Dim::sym("s1") * 2);
  Node* clamp = g->nodes()[1];
  EXPECT_EQ(clamp->attr("min").kind(), Attr::Kind::Float);
  EXPECT_TRUE(std::isinf(clamp->attr("min").f()));
  EXPECT_EQ(g->nodes()[2]->attr("keepdim").kind(), Attr::Kind::Bool);
  EXPECT_EQ(g->outputs().size(), 3u);
}

TEST(TextIr, IntWrittenForFloatAttrBecomesFloat) {
  auto g = parse_graph("graph(%x: f32[4]) {\n %0 = leaky_relu(%x) {negative_slope=1}\n return (%0)\n}");
  EXPECT_EQ(g->nodes()[0]->attrs.at("negative_slope").kind(), Attr::Kind::Float);
  EXPECT_NE(print_graph(*g).find("{negative_slope=1.0}"), std::string::npos);
}

TEST(TextIr, StringAttrsEscapeQuotes) {
  auto g = parse_graph("graph(%x: f32[4]) {\n %0 = cast(%x) {dtype=\"f64\"}\n return (%0)\n}");
  g->nodes()[0]->attrs["dtype"] = Attr(std::string("a\"b\\c"));  // not a valid dtype; printing only
  std::string s = print_graph(*g);
  EXPECT_NE(s.find(R"({dtype="a\"b\\c"})"), std::string::npos) << s;
}

TEST(TextIr, ConstantsOfEveryDtypeRoundTripExactly) {
  const std::string text = R"(graph() {
  %f = constant f32[3] [0.1, 3.4028234663852886e+38, -0.0]
  %d = constant f64[2] [0.1, 2.2250738585072014e-308]
  %i = constant i64[2] [-9223372036854775808, 9223372036854775807]
  %j = constant i32[2] [-5, 7]
  %b = constant bool[3] [true, false, true]
  %h = constant f16[2] bits[0x3c00, 0xc000]
  %u = constant u8[1] [255]
  %s = constant f32[] [2.5]
  return (%f, %d, %i, %j, %b, %h, %u, %s)
})";
  std::string printed = roundtrip(text);
  auto g = parse_graph(printed);
  const auto& outs = g->outputs();
  EXPECT_EQ(outs[0]->constant->ptr<float>()[0], 0.1f);
  EXPECT_TRUE(std::signbit(outs[0]->constant->ptr<float>()[2]));
  EXPECT_EQ(outs[1]->constant->ptr<double>()[0], 0.1);
  EXPECT_EQ(outs[2]->constant->ptr<int64_t>()[0], INT64_MIN);
  EXPECT_EQ(outs[3]->constant->ptr<int32_t>()[1], 7);
  EXPECT_FALSE(outs[4]->constant->ptr<bool>()[1]);
  EXPECT_EQ(outs[5]->constant->ptr<uint16_t>()[1], 0xc000);
  EXPECT_EQ(outs[6]->constant->ptr<uint8_t>()[0], 255);
  EXPECT_EQ(outs[7]->type.shape.size(), 0u);
  EXPECT_EQ(outs[7]->constant->ptr<float>()[0], 2.5f);
}

TEST(TextIr, RandomAndFullConstants) {
  const std::string text = R"(graph() {
  %r = constant f32[100] random(seed=7, lo=0.5, hi=2.0)
  %z = constant f32[2, 2] full(1.5)
  return (%r, %z)
})";
  auto g1 = parse_graph(text), g2 = parse_graph(text);
  const Tensor& r1 = *g1->outputs()[0]->constant;
  const Tensor& r2 = *g2->outputs()[0]->constant;
  EXPECT_EQ(std::memcmp(r1.data(), r2.data(), r1.nbytes()), 0);  // deterministic per seed
  float lo = 10, hi = -10;
  for (int i = 0; i < 100; ++i) lo = std::min(lo, r1.ptr<float>()[i]), hi = std::max(hi, r1.ptr<float>()[i]);
  EXPECT_GE(lo, 0.5f);
  EXPECT_LT(hi, 2.0f);
  EXPECT_GT(hi - lo, 1.0f);  // actually spread, not constant
  EXPECT_EQ(g1->outputs()[1]->constant->ptr<float>()[3], 1.5f);

  // Large constants print elided by default (not parseable) and in full on request.
  std::string brief = print_graph(*g1);
  EXPECT_NE(brief.find("elided(numel=100, fnv1a=0x"), std::string::npos) << brief;
  EXPECT_NE(parse_error(brief).find("elided by the printer"), std::string::npos);
  std::string full = roundtrip(text, PrintOptions{-1});
  auto g3 = parse_graph(full);
  EXPECT_EQ(std::memcmp(g3->outputs()[0]->constant->data(), r1.data(), r1.nbytes()), 0);
}

TEST(TextIr, NamesRenumberButKeepWords) {
  // Numeric names are positional; word names survive; a node output reuses no taken name.
  auto g = parse_graph(R"(graph(%7: f32[2]) {
  %5 = relu(%7)
  %act = neg(%5)
  return (%act)
})");
  EXPECT_EQ(print_graph(*g), "graph(%0: f32[2]) {\n  %1 = relu(%0) : f32[2]\n  %act = neg(%1) : f32[2]\n  return (%act)\n}\n");
}

TEST(TextIr, UnusedConstantsAreNotPrinted) {
  auto g = parse_graph("graph(%x: f32[2]) {\n %c = constant f32[2] [1.0, 2.0]\n %0 = relu(%x)\n return (%0)\n}");
  EXPECT_EQ(print_graph(*g).find("constant"), std::string::npos);
}

TEST(TextIr, ErrorsSayWhereAndWhat) {
  EXPECT_EQ(parse_error("graph(%x: f32[2]) {\n  %0 = relu(%x\n  return (%0)\n}"),
            "[parse] line 3, col 3: expected ')', found 'return'");
  EXPECT_EQ(parse_error("graph(%x: f32[2]) {\n  %0 = relu(%y)\n  return (%0)\n}"),
            "[parse] line 2, col 13: use of undefined value %y");
  EXPECT_EQ(parse_error("graph(%x: f32[2]) {\n  %0 = frobnicate(%x)\n  return (%0)\n}"),
            "[parse] line 2, col 8: unknown op 'frobnicate' (see docs/ops.md for the op table)");
  EXPECT_EQ(parse_error("graph(%x: q8[2]) {\n  return (%x)\n}"),
            "[parse] line 1, col 11: unknown dtype 'q8' (f32, f64, f16, bf16, i64, i32, i16, i8, u8, bool)");
  EXPECT_EQ(parse_error("graph(%x: f32[2]) {\n  %0 = relu(%x) : f32[3]\n  return (%0)\n}"),
            "[parse] line 2, col 19: declared type f32[3] but relu infers f32[2] for output 0");
  EXPECT_EQ(parse_error("graph(%x: f32[2]) {\n  %0 = relu(%x)\n  %0 = neg(%x)\n  return (%0)\n}"),
            "[parse] line 3, col 3: value %0 is defined twice");
  EXPECT_EQ(parse_error("graph() {\n  %c = constant f32[3] [1.0, 2.0]\n  return (%c)\n}"),
            "[parse] line 2, col 24: constant data has 2 values, its type needs 3");
  EXPECT_EQ(parse_error("graph() {\n  %c = constant i32[1] [1.5]\n  return (%c)\n}"),
            "[parse] line 2, col 25: a i32 constant holds integers, found a float");
  EXPECT_EQ(parse_error("graph(%x: f32[2]) {\n  %0 = relu(%x)\n  return (%0)\n} trailing"),
            "[parse] line 4, col 3: expected the end of input after the graph's '}', found 'trailing'");
  EXPECT_EQ(parse_error("graph(%x: f32[2]) {\n  %0 = relu(%x)\n"),
            "[parse] line 3, col 1: expected a statement (%name = ...) or 'return', found the end of input");
  // An int list must not hold floats; float lists are written f[...].
  EXPECT_EQ(parse_error("graph(%x: f32[4]) {\n  %0 = sum(%x) {dims=[0.5]}\n  return (%0)\n}"),
            "[parse] line 2, col 23: an int list holds a float; write float lists as f[0.5, 1.0]");
  // f[...] parses as a float list, which split's int-list attribute rejects (via the op table).
  std::string kind = parse_error("graph(%x: f32[4]) {\n  %a, %b = split(%x) {dim=0, sizes=f[2.0, 2.0]}\n  return (%a)\n}");
  EXPECT_NE(kind.find("line 2, col 12: [split] attribute 'sizes' has the wrong kind (f[2.0, 2.0])"), std::string::npos) << kind;
  // Op-table errors keep the op's own message.
  std::string arity = parse_error("graph(%x: f32[4]) {\n  %0 = relu(%x, %x)\n  return (%0)\n}");
  EXPECT_NE(arity.find("line 2, col 8: [relu] takes 1 inputs, got 2"), std::string::npos) << arity;
  std::string outs = parse_error("graph(%x: f32[4]) {\n  %a = split(%x) {dim=0, sizes=[2, 2]}\n  return (%a)\n}");
  EXPECT_NE(outs.find("split has 2 outputs but 1 names are given"), std::string::npos) << outs;
  std::string sym = parse_error("graph() {\n  %c = constant f32[s0] full(1.0)\n  return (%c)\n}");
  EXPECT_NE(sym.find("a constant's shape must be static"), std::string::npos) << sym;
}

// The parser reads plain sizes and numbers in place (std::from_chars) and takes the expression
// grammar only for what is not a plain size: both must give what the grammar says.
TEST(TextIr, PlainSizesAndNumbersReadExactly) {
  auto g = parse_graph(R"(graph(%x: f32[ 2 , 3 ], %y: f32[2*3, 2+s0, (s1*4), 007]) {
  %c = constant f64[5] [+1.5, 1e999, -1e999, 4.9e-324, -0.0]
  %i = constant i64[3] [9223372036854775807, -9223372036854775808, +7]
  %0 = leaky_relu(%x) {negative_slope=9.9999999999999998e-13}
  %1 = reshape(%x) {shape=[3 , 2]}
  return (%0, %1, %c, %i)
})");
  const Shape& x = g->inputs()[0]->type.shape;
  ASSERT_EQ(x.size(), 2u);
  EXPECT_EQ(x[0], Dim(2));
  EXPECT_EQ(x[1], Dim(3));
  const Shape& y = g->inputs()[1]->type.shape;
  ASSERT_EQ(y.size(), 4u);
  EXPECT_EQ(y[0], Dim(2) * Dim(3));
  EXPECT_EQ(y[1], Dim(2) + Dim::sym("s0"));
  EXPECT_EQ(y[2], Dim::sym("s1") * 4);
  EXPECT_EQ(y[3], Dim(7));
  const double* c = g->outputs()[2]->constant->ptr<double>();
  EXPECT_EQ(c[0], 1.5);
  EXPECT_TRUE(std::isinf(c[1]) && c[1] > 0);
  EXPECT_TRUE(std::isinf(c[2]) && c[2] < 0);
  EXPECT_EQ(c[3], std::strtod("4.9e-324", nullptr));  // a denormal, as strtod reads it
  EXPECT_GT(c[3], 0.0);
  EXPECT_TRUE(c[4] == 0.0 && std::signbit(c[4]));
  const int64_t* i = g->outputs()[3]->constant->ptr<int64_t>();
  EXPECT_EQ(i[0], INT64_MAX);
  EXPECT_EQ(i[1], INT64_MIN);
  EXPECT_EQ(i[2], 7);
  EXPECT_EQ(g->nodes()[0]->attr("negative_slope").f(), 1e-12);  // the printer's 17 digits, exactly
  EXPECT_EQ(g->nodes()[1]->attr("shape").ints(), (std::vector<int64_t>{3, 2}));

  EXPECT_EQ(parse_error("graph(%x: f32[2.5]) {\n  return (%x)\n}"),
            "[parse] line 1, col 15: expected a dimension, found a float");
  EXPECT_EQ(parse_error("graph(%x: f32[99999999999999999999]) {\n  return (%x)\n}"),
            "[parse] line 1, col 15: integer 99999999999999999999 does not fit in 64 bits");
  EXPECT_EQ(parse_error("graph() {\n  %c = constant i64[1] [9223372036854775808]\n  return (%c)\n}"),
            "[parse] line 2, col 25: integer 9223372036854775808 does not fit in 64 bits");
  EXPECT_EQ(parse_error("graph(%x: f32[2 3]) {\n  return (%x)\n}"), "[parse] line 1, col 17: expected ']', found '3'");
}

// Value names are read as views into the text: names that differ only after a shared prefix,
// with dots and digits, stay distinct, and numeric names still renumber.
TEST(TextIr, ValueNamesAreDistinctAndKept) {
  auto g = parse_graph(R"(graph(%arg1_1: f32[2], %arg1_10: f32[2], %a.b: f32[2]) {
  %12 = add(%arg1_1, %arg1_10)
  %arg1_100 = mul(%12, %a.b)
  return (%arg1_100, %12)
})");
  ASSERT_EQ(g->inputs().size(), 3u);
  EXPECT_EQ(g->inputs()[0]->name, "arg1_1");
  EXPECT_EQ(g->inputs()[1]->name, "arg1_10");
  EXPECT_EQ(g->inputs()[2]->name, "a.b");
  Node* add = g->nodes()[0];
  EXPECT_EQ(add->inputs[0], g->inputs()[0]);
  EXPECT_EQ(add->inputs[1], g->inputs()[1]);
  EXPECT_EQ(add->output()->name, "");  // numeric: positional
  EXPECT_EQ(g->outputs()[0]->name, "arg1_100");
  EXPECT_EQ(roundtrip(print_graph(*g)), print_graph(*g));
}
