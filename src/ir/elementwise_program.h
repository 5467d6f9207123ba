// Elementwise programs: the scalar-op vocabulary shared by the elementwise op declarations,
// their kernels (ref and cpu) and the elementwise-fusion pass.
//
// A program is a straight-line list of instructions over broadcast inputs ($k), earlier
// results (%k) and scalar immediates (#v); the last instruction is the result. The text form
// is the `program` attribute of fused_elementwise (format spec: src/passes/fuse_elementwise.cpp):
//
//   EwProgram p = parse_ew_program("f32: mul $0 #0.5; add %0 $1; relu %1", "fused_elementwise");
//   p.instrs.size();  // 3
//   p.str();          // the same text, normalised
//
// Single elementwise nodes are expressed as one-instruction programs too (ew_instr_for_node),
// so every kernel evaluates op semantics from one place.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "ir/graph.h"

namespace updraft {

// Scalar ops. Operand order follows the node's inputs; attributes become trailing operands
// (usually immediates): leaky_relu(x, slope), elu(x, alpha), clamp(x, lo, hi), pow(x, e).
enum class EwOp : uint8_t {
  // unary
  neg, abs, relu, sigmoid, tanh, exp, log, sqrt, rsqrt, erf, silu, reciprocal, sin, cos,
  floor, ceil, round, sign, hardswish, hardsigmoid, gelu, gelu_tanh, logical_not, isnan,
  acos, acosh, asin, asinh, atan, atanh, cosh, sinh, tan, log1p, expm1, log2, log10, exp2,
  // unary with a parameter operand
  leaky_relu, elu,
  // binary
  add, sub, mul, div, maximum, minimum, pow, remainder, floor_divide, atan2, fmod,
  eq, ne, lt, le, gt, ge, logical_and, logical_or, bitwise_and, bitwise_or,
  // ternary
  clamp, where,
  // node-only (never in a program): dtype conversion
  cast,
  count_
};

struct EwOpInfo {
  const char* name;   // program spelling
  int arity;          // operands in a program
  bool bool_result;   // compares, isnan, logical ops: the result is a truth value
  bool in_program;    // may appear in a fused_elementwise program (f32 evaluation)
};
const EwOpInfo& ew_op_info(EwOp op);
std::optional<EwOp> ew_op_from_name(const std::string& name);  // program spelling

struct EwOperand {
  enum class Kind : uint8_t { input, reg, imm };
  Kind kind = Kind::input;
  int index = 0;     // input: $index; reg: %index (an earlier instruction)
  double imm = 0.0;  // imm: the value
  static EwOperand in(int k) { return {Kind::input, k, 0.0}; }
  static EwOperand reg(int k) { return {Kind::reg, k, 0.0}; }
  static EwOperand value(double v) { return {Kind::imm, 0, v}; }
};

struct EwInstr {
  EwOp op = EwOp::add;
  std::vector<EwOperand> args;  // exactly ew_op_info(op).arity
};

struct EwProgram {
  DType out_dtype = DType::f32;  // f32 or bool (bool stores result != 0)
  std::vector<EwInstr> instrs;   // non-empty; the last one is the result
  std::string str() const;
  int num_inputs() const;  // 1 + the highest $k referenced (0 when none)
};

// Parses and validates (op names, arity, %k refers to an earlier instruction, output dtype).
// Throws Error(component, ...) with the offending instruction.
EwProgram parse_ew_program(const std::string& text, const std::string& component);

// The instruction an elementwise node computes: operands $0..$n-1 are its inputs, attributes
// become immediates (gelu approximate="tanh" becomes gelu_tanh, pow_scalar becomes pow).
// Throws Error(op, ...) for ops with no scalar form (cast) or unknown ops.
EwInstr ew_instr_for_node(const Node& n);

// Values (registers) an evaluator keeps live at once when each result buffer is reused after
// its last use; inputs and immediates not counted. Kernels use this to size scratch.
int ew_program_max_live(const EwProgram& p);

}  // namespace updraft
