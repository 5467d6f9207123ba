// Elementwise ops (docs/ops.md, "Elementwise") and fused_elementwise ("Fused"). The op table
// rows come from ir/elementwise_ops.def (name, arity, dtypes, attributes, doc); here are their
// shape functions. Shapes broadcast numpy-style over symbolic Dims; binary ops require equal
// input dtypes (the front end inserts casts for PyTorch's type promotion). `dtypes` lists input
// 0's dtypes the kernels run; compares and predicates produce bool.
#include <limits>

#include "ir/elementwise_program.h"
#include "ir/op_table.h"

namespace updraft {
namespace {

using DT = DType;
const std::vector<DType> kAll = {DT::f32, DT::f64, DT::i64, DT::i32, DT::boolean};

std::vector<DType> dtypes_of(EwDtypes set) {
  switch (set) {
    case EwDtypes::floats: return {DT::f32, DT::f64};
    case EwDtypes::signed_: return {DT::f32, DT::f64, DT::i64, DT::i32};
    case EwDtypes::all: return kAll;
    case EwDtypes::ints: return {DT::i64, DT::i32, DT::boolean};
    case EwDtypes::bools: return {DT::boolean};
    case EwDtypes::cond: return {DT::boolean};  // input 0 is where's condition
    case EwDtypes::castable: return {DT::f32, DT::f64, DT::i64, DT::i32, DT::boolean, DT::i8, DT::u8, DT::bf16};
  }
  return {};
}

// Same shape (unary) or broadcast shapes of two inputs sharing a dtype; the output is input 0's
// dtype or bool.
void infer_pointwise(InferCtx& c, bool bool_out, const std::string& op) {
  const TensorType& a = c.in(0);
  if (c.num_inputs() == 1) {
    c.set_output(0, {bool_out ? DType::boolean : a.dtype, a.shape});
    return;
  }
  const TensorType& b = c.in(1);
  if (a.dtype != b.dtype)
    c.fail(std::string("inputs are ") + dtype_name(a.dtype) + " and " + dtype_name(b.dtype) +
           "; cast them to one dtype first");
  c.set_output(0, {bool_out ? DType::boolean : a.dtype, broadcast_shapes(a.shape, b.shape, op)});
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
  for (int k = 1; k < p.num_outputs(); ++k) c.set_output(k, {DType::f32, s});  // extra results: f32
}

}  // namespace

void register_elementwise_ops(OpTable& t) {
  for (const EwNodeInfo& row : kEwNodeOps) {
    const EwOpInfo& info = ew_op_info(row.op);
    OpDef d;
    d.name = row.name;
    d.min_inputs = d.max_inputs = info.arity - row.attrs.num_imms();
    d.dtypes = dtypes_of(row.dtypes);
    d.cls = OpClass::Elementwise;
    d.doc = row.doc;
    for (int i = 0; i < row.attrs.size; ++i) {
      const EwAttr& a = row.attrs.at[i];
      switch (a.kind) {
        case EwAttr::imm: d.attrs.push_back({a.name, Attr::Kind::Float, Attr(a.def)}); break;
        case EwAttr::required_imm: d.attrs.push_back({a.name, Attr::Kind::Float, std::nullopt}); break;
        case EwAttr::str: d.attrs.push_back({a.name, Attr::Kind::Str, Attr(a.sdef)}); break;
        case EwAttr::required_str: d.attrs.push_back({a.name, Attr::Kind::Str, std::nullopt}); break;
      }
    }
    switch (info.result) {
      case EwResult::same:  // the output may reuse input 0's buffer
        d.inplace = true;
        d.infer = [op = d.name](InferCtx& c) { infer_pointwise(c, false, op); };
        break;
      case EwResult::truth: d.infer = [op = d.name](InferCtx& c) { infer_pointwise(c, true, op); }; break;
      case EwResult::branch: d.infer = infer_where; break;  // not inplace: input 0 is the bool condition
      case EwResult::converted: d.infer = infer_cast; break;  // not inplace: the dtype usually differs
    }
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
  d.num_outputs = -1;  // 1 + the program's extra results
  // In place: output 0 may take input 0's buffer where input 0 dies here. The memory planner
  // only shares a buffer of the same element count and element size (so not a bool input 0
  // under an f32 result, nor one smaller than the broadcast output), and the kernels read each
  // element's inputs before storing it (the CPU kernel's last step writes the output after
  // every read of its block; the reference kernel goes element by element). An attention
  // gradient's ds = p * (dp - rowsum) * scale then overwrites dp: one [B, H, L, S] buffer
  // fewer in a flash backward's arena.
  d.inplace = true;
  d.infer = infer_fused;
  d.doc = "a chain of elementwise ops evaluated in one pass, with optional extra f32 results (program format: "
          "src/passes/fuse_elementwise.cpp)";
  t.add(std::move(d));
}

}  // namespace updraft
