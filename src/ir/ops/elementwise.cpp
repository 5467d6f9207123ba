// Elementwise ops (docs/ops.md, "Elementwise") and fused_elementwise ("Fused").
// Shapes broadcast numpy-style over symbolic Dims; binary ops require equal input dtypes (the
// front end inserts casts for PyTorch's type promotion). `dtypes` lists input 0's dtypes the
// kernels run; compares and predicates produce bool.
#include <limits>

#include "ir/elementwise_program.h"
#include "ir/op_table.h"

namespace updraft {
namespace {

using DT = DType;
const std::vector<DType> kFloat = {DT::f32, DT::f64};
const std::vector<DType> kSigned = {DT::f32, DT::f64, DT::i64, DT::i32};
const std::vector<DType> kAll = {DT::f32, DT::f64, DT::i64, DT::i32, DT::boolean};
const std::vector<DType> kInts = {DT::i64, DT::i32, DT::boolean};

OpDef make(const std::string& name, int arity, std::vector<DType> dtypes, const std::string& doc,
           std::vector<AttrSpec> attrs = {}) {
  OpDef d;
  d.name = name;
  d.min_inputs = d.max_inputs = arity;
  d.dtypes = std::move(dtypes);
  d.cls = OpClass::Elementwise;
  d.attrs = std::move(attrs);
  d.doc = doc;
  return d;
}

// Same shape; output dtype is input 0's (inplace-capable) or bool (not inplace).
void add_unary(OpTable& t, const std::string& name, std::vector<DType> dtypes, const std::string& doc,
               std::vector<AttrSpec> attrs = {}, bool bool_out = false) {
  OpDef d = make(name, 1, std::move(dtypes), doc, std::move(attrs));
  d.inplace = !bool_out;
  d.infer = [bool_out](InferCtx& c) {
    c.set_output(0, {bool_out ? DType::boolean : c.in(0).dtype, c.in(0).shape});
  };
  t.add(std::move(d));
}

// Broadcast shapes; both inputs must share a dtype.
void add_binary(OpTable& t, const std::string& name, std::vector<DType> dtypes, const std::string& doc,
                bool bool_out = false) {
  OpDef d = make(name, 2, std::move(dtypes), doc);
  d.inplace = !bool_out;
  std::string op = name;
  d.infer = [bool_out, op](InferCtx& c) {
    const TensorType& a = c.in(0);
    const TensorType& b = c.in(1);
    if (a.dtype != b.dtype)
      c.fail(std::string("inputs are ") + dtype_name(a.dtype) + " and " + dtype_name(b.dtype) +
             "; cast them to one dtype first");
    c.set_output(0, {bool_out ? DType::boolean : a.dtype, broadcast_shapes(a.shape, b.shape, op)});
  };
  t.add(std::move(d));
}

void infer_where(InferCtx& c) {
  const TensorType &cond = c.in(0), &a = c.in(1), &b = c.in(2);
  if (cond.dtype != DType::boolean) c.fail(std::string("condition is ") + dtype_name(cond.dtype) + "; expected bool");
  if (a.dtype != b.dtype)
    c.fail(std::string("branches are ") + dtype_name(a.dtype) + " and " + dtype_name(b.dtype) +
           "; cast them to one dtype first");
  bool ok = false;
  for (DType t : kAll) ok |= (t == a.dtype);
  if (!ok) c.fail(std::string("branch dtype ") + dtype_name(a.dtype) + " is not supported");
  Shape s = broadcast_shapes(broadcast_shapes(cond.shape, a.shape, "where"), b.shape, "where");
  c.set_output(0, {a.dtype, s});
}

void infer_cast(InferCtx& c) {
  const std::string& name = c.attr_str("dtype");
  DType to = DType::f32;
  try {
    to = dtype_from_name(name);
  } catch (const Error&) {
    c.fail("unknown target dtype '" + name + "' (expected f32, f64, i64, i32 or bool)");
  }
  bool ok = false;
  for (DType t : kAll) ok |= (t == to);
  if (!ok) c.fail(std::string("casting to ") + name + " is not supported (f32, f64, i64, i32, bool)");
  c.set_output(0, {to, c.in(0).shape});
}

// Validates the program against the inputs; the output is the broadcast of every input.
void infer_fused(InferCtx& c) {
  EwProgram p = parse_ew_program(c.attr_str("program"), "fused_elementwise");
  if (p.num_inputs() > c.num_inputs())
    c.fail("program reads $" + std::to_string(p.num_inputs() - 1) + " but the node has " +
           std::to_string(c.num_inputs()) + " inputs");
  Shape s = c.in(0).shape;
  for (int k = 0; k < c.num_inputs(); ++k) {
    DType t = c.in(k).dtype;
    if (t != DType::f32 && t != DType::boolean)
      c.fail("input " + std::to_string(k) + " is " + dtype_name(t) + "; fused programs read f32 or bool");
    if (k) s = broadcast_shapes(s, c.in(k).shape, "fused_elementwise");
  }
  c.set_output(0, {p.out_dtype, s});
}

}  // namespace

void register_elementwise_ops(OpTable& t) {
  const double inf = std::numeric_limits<double>::infinity();
  add_unary(t, "neg", kSigned, "-x");
  add_unary(t, "abs", kSigned, "|x|");
  add_unary(t, "relu", kSigned, "max(x, 0); NaN stays NaN");
  add_unary(t, "sigmoid", kFloat, "1 / (1 + exp(-x))");
  add_unary(t, "tanh", kFloat, "tanh(x)");
  add_unary(t, "exp", kFloat, "e^x");
  add_unary(t, "log", kFloat, "natural log");
  add_unary(t, "sqrt", kFloat, "square root");
  add_unary(t, "rsqrt", kFloat, "1 / sqrt(x)");
  add_unary(t, "erf", kFloat, "error function");
  add_unary(t, "silu", kFloat, "x * sigmoid(x)");
  add_unary(t, "reciprocal", kFloat, "1 / x");
  add_unary(t, "sin", kFloat, "sine");
  add_unary(t, "cos", kFloat, "cosine");
  add_unary(t, "acos", kFloat, "arc cosine (NaN outside [-1, 1])");
  add_unary(t, "acosh", kFloat, "inverse hyperbolic cosine (NaN below 1)");
  add_unary(t, "asin", kFloat, "arc sine (NaN outside [-1, 1])");
  add_unary(t, "asinh", kFloat, "inverse hyperbolic sine");
  add_unary(t, "atan", kFloat, "arc tangent");
  add_unary(t, "atanh", kFloat, "inverse hyperbolic tangent (+-inf at +-1, NaN outside)");
  add_unary(t, "cosh", kFloat, "hyperbolic cosine");
  add_unary(t, "sinh", kFloat, "hyperbolic sine");
  add_unary(t, "tan", kFloat, "tangent");
  add_unary(t, "log1p", kFloat, "log(1 + x), accurate near 0");
  add_unary(t, "expm1", kFloat, "e^x - 1, accurate near 0");
  add_unary(t, "log2", kFloat, "base-2 log");
  add_unary(t, "log10", kFloat, "base-10 log");
  add_unary(t, "exp2", kFloat, "2^x");
  add_unary(t, "floor", kFloat, "round toward -inf");
  add_unary(t, "ceil", kFloat, "round toward +inf");
  add_unary(t, "round", kFloat, "round half to even");
  add_unary(t, "sign", kSigned, "-1, 0 or 1 (0 for NaN)");
  add_unary(t, "hardswish", kFloat, "x * clamp(x + 3, 0, 6) / 6");
  add_unary(t, "hardsigmoid", kFloat, "clamp(x + 3, 0, 6) / 6");
  add_unary(t, "gelu", kFloat, "x * Phi(x); approximate=\"tanh\" uses the tanh form",
            {{"approximate", Attr::Kind::Str, Attr("none")}});
  add_unary(t, "leaky_relu", kFloat, "x > 0 ? x : x * negative_slope",
            {{"negative_slope", Attr::Kind::Float, Attr(0.01)}});
  add_unary(t, "elu", kFloat, "x > 0 ? x : alpha * (exp(x) - 1)", {{"alpha", Attr::Kind::Float, Attr(1.0)}});
  add_unary(t, "clamp", kSigned, "min(max(x, min), max); NaN stays NaN",
            {{"min", Attr::Kind::Float, Attr(-inf)}, {"max", Attr::Kind::Float, Attr(inf)}});
  add_unary(t, "pow_scalar", kFloat, "x ** exponent", {{"exponent", Attr::Kind::Float, std::nullopt}});
  add_unary(t, "logical_not", kAll, "x == 0", {}, /*bool_out=*/true);
  add_unary(t, "isnan", kFloat, "x != x", {}, /*bool_out=*/true);
  {
    OpDef d = make("cast", 1, kAll, "convert to dtype (floats to ints truncate toward zero)",
                   {{"dtype", Attr::Kind::Str, std::nullopt}});
    d.infer = infer_cast;  // not inplace: the output dtype usually differs
    t.add(std::move(d));
  }

  add_binary(t, "add", kSigned, "a + b");
  add_binary(t, "sub", kSigned, "a - b");
  add_binary(t, "mul", kSigned, "a * b");
  add_binary(t, "div", kFloat, "a / b (true division)");
  add_binary(t, "maximum", kSigned, "max(a, b); NaN propagates");
  add_binary(t, "minimum", kSigned, "min(a, b); NaN propagates");
  add_binary(t, "pow", kFloat, "a ** b");
  add_binary(t, "remainder", kSigned, "a - b * floor(a / b) (sign of b, like Python %)");
  add_binary(t, "floor_divide", kSigned, "floor(a / b)");
  add_binary(t, "atan2", kFloat, "angle of (b, a) in [-pi, pi], signed zeros as C atan2");
  add_binary(t, "fmod", kFloat, "a - b * trunc(a / b) (sign of a, like C fmod)");
  for (const char* name : {"eq", "ne", "lt", "le", "gt", "ge"})
    add_binary(t, name, kAll, std::string("compare a ") + name + " b", /*bool_out=*/true);
  add_binary(t, "logical_and", {DT::boolean}, "a && b");
  add_binary(t, "logical_or", {DT::boolean}, "a || b");
  add_binary(t, "bitwise_and", kInts, "a & b");
  add_binary(t, "bitwise_or", kInts, "a | b");
  {
    OpDef d = make("where", 3, {DT::boolean}, "cond ? a : b, broadcast over all three");
    d.infer = infer_where;  // not inplace: input 0 is the bool condition
    t.add(std::move(d));
  }
}

void register_fused_ops(OpTable& t) {
  OpDef d;
  d.name = "fused_elementwise";
  d.min_inputs = 1;
  d.max_inputs = -1;
  d.attrs = {{"program", Attr::Kind::Str, std::nullopt}};
  d.dtypes = {DT::f32, DT::boolean};
  d.cls = OpClass::Fused;
  // Not declared inplace: input 0 may be bool or smaller than the (broadcast) output.
  d.infer = infer_fused;
  d.doc = "a chain of elementwise ops evaluated in one pass (program format: src/passes/fuse_elementwise.cpp)";
  t.add(std::move(d));
}

}  // namespace updraft
