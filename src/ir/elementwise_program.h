// Elementwise programs: the scalar-op vocabulary (one row per op in ir/elementwise_ops.def)
// shared by the elementwise op declarations, their kernels (ref and cpu), the epilogue
// activations and the elementwise-fusion pass.
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
#include <initializer_list>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "ir/graph.h"

namespace updraft {

// The number every elementwise row's attribute defaults use for "unbounded" (clamp).
inline constexpr double kEwInf = std::numeric_limits<double>::infinity();

// Scalar ops, one per row of ir/elementwise_ops.def (in row order). Operand order follows the
// node's inputs; attributes become trailing operands (usually immediates): leaky_relu(x, slope),
// elu(x, alpha), clamp(x, lo, hi), pow(x, e).
enum class EwOp : uint8_t {
#define UPDRAFT_EW_OP(name, ...) name,
#include "ir/elementwise_ops.def"
  count_
};

enum class EwForm : uint8_t { any, node, program };  // a node op and/or a program op
enum class EwResult : uint8_t { same, truth, branch, converted };  // the output dtype (see the .def)
// castable: cast's sources, `all` plus the compact storage forms a weight may come in (i8, u8,
// bf16: a model whose weights were quantised to int8 or stored as bf16 widens them to f32).
enum class EwDtypes : uint8_t { floats, signed_, all, ints, bools, cond, castable };
enum class EwEpi : uint8_t { no, engine, dnnl };  // as an epilogue activation (see the .def)

// A node attribute of an elementwise op. imm / required_imm are float attributes that become
// trailing immediate operands, in order; str / required_str are interpreted by the node code.
struct EwAttr {
  enum Kind : uint8_t { imm, required_imm, str, required_str };
  const char* name = nullptr;
  Kind kind = imm;
  double def = 0;              // imm
  const char* sdef = nullptr;  // str
};
struct EwAttrList {
  EwAttr at[2] = {};
  int size = 0;
  constexpr int num_imms() const {
    int n = 0;
    for (int i = 0; i < size; ++i) n += at[i].kind == EwAttr::imm || at[i].kind == EwAttr::required_imm;
    return n;
  }
};
constexpr EwAttrList ew_attrs(std::initializer_list<EwAttr> l) {
  EwAttrList r;
  for (const EwAttr& a : l) r.at[r.size++] = a;
  return r;
}
#define EW_IMM(n, d) ::updraft::EwAttr{#n, ::updraft::EwAttr::imm, d, nullptr}
#define EW_REQ(n) ::updraft::EwAttr{#n, ::updraft::EwAttr::required_imm, 0.0, nullptr}
#define EW_STR(n, d) ::updraft::EwAttr{#n, ::updraft::EwAttr::str, 0.0, d}
#define EW_STR_REQ(n) ::updraft::EwAttr{#n, ::updraft::EwAttr::required_str, 0.0, nullptr}

struct EwOpInfo {
  const char* name;   // program spelling (and node op name unless form is program)
  int arity;          // operands in a program
  bool bool_result;   // compares, isnan, logical ops: the result is a truth value
  bool in_program;    // may appear in a fused_elementwise program (f32 evaluation)
  EwForm form;
  EwResult result;
  EwDtypes dtypes;
  EwAttrList attrs;
  EwEpi epi;          // how it runs as a fused epilogue activation (EwEpi::no: it cannot)
  const char* doc;
};

namespace ew_detail {
#define UPDRAFT_EW_ARGS(...) __VA_ARGS__
#define UPDRAFT_EW_EPI_no_epi ::updraft::EwEpi::no
#define UPDRAFT_EW_EPI_engine_epi(...) ::updraft::EwEpi::engine
#define UPDRAFT_EW_EPI_dnnl_epi(...) ::updraft::EwEpi::dnnl
inline constexpr EwOpInfo kOps[] = {
#define UPDRAFT_EW_OP(name, arity, form, result, dtypes, attrs, epi, doc, ...)                          \
  {#name, arity, EwResult::result == EwResult::truth, EwForm::form != EwForm::node, EwForm::form,      \
   EwResult::result, EwDtypes::dtypes, ew_attrs({UPDRAFT_EW_ARGS attrs}), UPDRAFT_EW_EPI_##epi, doc},
#include "ir/elementwise_ops.def"
};
static_assert(sizeof(kOps) / sizeof(kOps[0]) == static_cast<size_t>(EwOp::count_));
}  // namespace ew_detail

constexpr const EwOpInfo& ew_op_info(EwOp op) { return ew_detail::kOps[static_cast<int>(op)]; }
std::optional<EwOp> ew_op_from_name(const std::string& name);  // program spelling

// A node op of the elementwise family: one per row of form any/node, and one per
// UPDRAFT_EW_NODE row (pow_scalar). It computes `op` with its imm attributes as trailing
// operands; cast is in the list too, with its own kernels.
struct EwNodeInfo {
  const char* name;
  EwOp op;
  EwDtypes dtypes;
  EwAttrList attrs;
  const char* doc;
};
namespace ew_detail {
#define UPDRAFT_EW_NODE_ROW_any(name, dtypes, attrs, doc) {#name, EwOp::name, EwDtypes::dtypes, ew_attrs({UPDRAFT_EW_ARGS attrs}), doc},
#define UPDRAFT_EW_NODE_ROW_node UPDRAFT_EW_NODE_ROW_any
#define UPDRAFT_EW_NODE_ROW_program(...)
inline constexpr EwNodeInfo kNodes[] = {
#define UPDRAFT_EW_OP(name, arity, form, result, dtypes, attrs, epi, doc, ...) \
  UPDRAFT_EW_NODE_ROW_##form(name, dtypes, attrs, doc)
#define UPDRAFT_EW_NODE(name, op, dtypes, attrs, doc) {#name, EwOp::op, EwDtypes::dtypes, ew_attrs({UPDRAFT_EW_ARGS attrs}), doc},
#include "ir/elementwise_ops.def"
};
}  // namespace ew_detail
inline constexpr const auto& kEwNodeOps = ew_detail::kNodes;
// The node row named `name`, or null when it is not an elementwise node op.
const EwNodeInfo* ew_node_info(const std::string& name);
// The epilogue activation named `name` (an op whose row has epi != no), or nullopt.
std::optional<EwOp> ew_activation_from_name(const std::string& name);
// The activation names, comma separated (for error messages).
std::string ew_activation_names();

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
  // More results, stored as f32 outputs 1, 2, ... of the node: instructions other than the last,
  // distinct, in output order (text: " | %k %j" after the last instruction).
  std::vector<int> also;
  std::string str() const;
  int num_inputs() const;  // 1 + the highest $k referenced (0 when none)
  int num_outputs() const { return 1 + static_cast<int>(also.size()); }
};

// Parses and validates (op names, arity, %k refers to an earlier instruction, output dtype,
// the extra results).
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
