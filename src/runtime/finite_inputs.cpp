#include "runtime/finite_inputs.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <unordered_set>

#include "core/error.h"
#include "ir/elementwise_program.h"
#include "ir/op_table.h"
#include "ir/ops/params.h"
#include "kernels/cpu/finite_scan.h"

namespace updraft {

namespace {

// Elementwise ops that give finite results for finite operands, overflow aside (exp, cosh and
// mul can pass FLT_MAX; see the header). Left out: log*, sqrt, rsqrt, reciprocal, div, pow,
// remainder, floor_divide, fmod, acos, acosh, asin, atanh, erfinv, logit, tan (0 or a domain
// edge gives inf or NaN).
bool keeps_finite(EwOp op) {
  switch (op) {
    case EwOp::neg: case EwOp::abs: case EwOp::relu: case EwOp::sigmoid: case EwOp::tanh:
    case EwOp::exp: case EwOp::erf: case EwOp::silu: case EwOp::sin: case EwOp::cos:
    case EwOp::floor: case EwOp::ceil: case EwOp::round: case EwOp::sign: case EwOp::hardswish:
    case EwOp::hardsigmoid: case EwOp::gelu: case EwOp::gelu_tanh: case EwOp::logical_not:
    case EwOp::isnan: case EwOp::asinh: case EwOp::atan: case EwOp::cosh: case EwOp::sinh:
    case EwOp::expm1: case EwOp::exp2: case EwOp::leaky_relu: case EwOp::elu: case EwOp::add:
    case EwOp::sub: case EwOp::mul: case EwOp::maximum: case EwOp::minimum: case EwOp::atan2:
    case EwOp::copysign: case EwOp::eq: case EwOp::ne: case EwOp::lt: case EwOp::le: case EwOp::gt:
    case EwOp::ge: case EwOp::logical_and: case EwOp::logical_or: case EwOp::bitwise_and:
    case EwOp::bitwise_or: case EwOp::clamp: case EwOp::where: case EwOp::fma:
    case EwOp::cast:
      return true;
    default:
      return false;
  }
}

// Immediates that keep a finite operand finite: finite ones, and clamp's open bounds (a min of
// -inf or a max of +inf binds nothing).
bool finite_immediates(EwOp op, const std::vector<double>& imms) {
  for (size_t k = 0; k < imms.size(); ++k) {
    const double v = imms[k];
    if (std::isfinite(v)) continue;
    const bool open_bound = op == EwOp::clamp && ((k == 0 && v == -INFINITY) || (k == 1 && v == INFINITY));
    if (!open_bound) return false;
  }
  return true;
}

bool keeps_finite(const EwInstr& in) {
  std::vector<double> imms;
  for (const EwOperand& a : in.args)
    if (a.kind == EwOperand::Kind::imm) imms.push_back(a.imm);
  return keeps_finite(in.op) && finite_immediates(in.op, imms);
}

// Non-elementwise ops that keep finite values finite when their float attributes are finite
// (pad's value, sdpa's scale) and, for the norms, eps > 0.
const std::unordered_set<std::string>& finite_ops() {
  static const std::unordered_set<std::string> ops = {
      // views and copies
      "reshape", "permute", "slice", "concat", "expand", "copy", "embedding", "index_select", "gather", "scatter",
      "pad", "split", "flip", "as_strided", "channel_block",
      // compute (their epilogues are checked as elementwise ops)
      "conv2d", "linear", "matmul", "max_pool2d", "avg_pool2d", "adaptive_avg_pool2d", "sdpa",
      // reductions and norms
      "sum", "amax", "amin", "argmax", "argmin", "softmax", "log_softmax", "layer_norm", "rms_norm"};
  return ops;
}

// mean divides by the reduced count: over an empty dim it is 0 / 0. Kept only when every
// reduced dim is static and not empty.
bool mean_of_nonempty(const Node& n) {
  const Shape& x = n.input(0)->type.shape;
  std::vector<int64_t> dims = n.attr("dims").ints();
  if (dims.empty())
    for (size_t d = 0; d < x.size(); ++d) dims.push_back(static_cast<int64_t>(d));
  for (int64_t d : dims) {
    const int64_t k = d < 0 ? d + static_cast<int64_t>(x.size()) : d;
    if (k < 0 || k >= static_cast<int64_t>(x.size())) return false;
    const Dim& dim = x[static_cast<size_t>(k)];
    if (!dim.is_static() || dim.value() <= 0) return false;
  }
  return true;
}

bool finite_attrs(const Node& n) {
  for (const auto& [name, a] : n.attrs) {
    if (a.kind() == Attr::Kind::Float && !std::isfinite(a.f())) return false;
    if (a.kind() == Attr::Kind::Floats)
      for (double v : a.floats())
        if (!std::isfinite(v)) return false;
  }
  return !n.has_attr("eps") || n.attr("eps").f() > 0;
}

// The op takes an epilogue (ir/ops/params.h): its schema has the activation attributes.
bool has_epilogue(const Node& n) {
  for (const AttrSpec& a : n.op->attrs)
    if (a.name == "act_alpha") return true;
  return false;
}

// The epilogue's activation keeps finite values finite (none does).
bool finite_epilogue(const Node& n) {
  if (!has_epilogue(n)) return true;
  const std::optional<EwOp> act = Epilogue::activation(n.attr("activation").s());
  if (!act) return true;
  Epilogue ep = Epilogue::of(n, 0);
  std::vector<double> imms = {ep.alpha, ep.beta};
  imms.resize(static_cast<size_t>(ep.num_act_params()));
  return keeps_finite(*act) && finite_immediates(*act, imms);
}

bool keeps_finite_op(const Node& n) {
  const std::string& op = n.op_name();
  if (op == "fused_elementwise") {
    for (const EwInstr& in : parse_ew_program(n.attr("program").s(), "finite_inputs").instrs)
      if (!keeps_finite(in)) return false;
    return true;
  }
  if (op == "cast") return true;
  if (op == "mean") return mean_of_nonempty(n);
  if (ew_node_info(op) || ew_op_from_name(op)) return keeps_finite(ew_instr_for_node(n));
  return finite_ops().count(op) && finite_attrs(n) && finite_epilogue(n);
}

// A node the proof cannot read (an attribute it does not expect) keeps nothing finite: the
// proof only ever loses a fusion, never a compile.
bool keeps_finite(const Node& n) {
  try {
    return keeps_finite_op(n);
  } catch (const Error&) {
    return false;
  }
}

bool all_finite(const Tensor& t) {
  const int64_t n = t.numel();
  switch (t.dtype()) {
    case DType::f32:
      return cpu::all_finite(t.ptr<const float>(), n, 0);  // threaded: an LLM's weights are GBs
    case DType::f64: {
      const double* p = t.ptr<const double>();
      for (int64_t i = 0; i < n; ++i)
        if (!std::isfinite(p[i])) return false;
      return true;
    }
    case DType::f16:
    case DType::bf16:
      return false;  // not scanned: the proof stops there
    default:
      return true;  // integers and bools
  }
}

// A conv2d / linear / matmul whose activation the engine applies after oneDNN (engine_epi).
bool engine_act_node(const Node& n) {
  const std::string& op = n.op_name();
  if ((op != "conv2d" && op != "linear" && op != "matmul") || !has_epilogue(n)) return false;
  try {
    const std::optional<EwOp> act = Epilogue::activation(n.attr("activation").s());
    return act && ew_op_info(*act).epi == EwEpi::engine;
  } catch (const Error&) {
    return false;
  }
}

}  // namespace

bool FiniteInputs::any() const {
  for (char c : node)
    if (c) return true;
  return false;
}

FiniteInputs prove_finite_inputs(const Graph& g) {
  FiniteInputs r;
  const std::vector<Node*> nodes = g.nodes();
  bool candidates = false;
  for (const Node* n : nodes) candidates |= engine_act_node(*n);
  if (!candidates) return r;

  std::vector<char> finite(g.num_values(), 0);
  for (const Value* v : g.inputs()) finite[v->id] = v->type.dtype != DType::f16 && v->type.dtype != DType::bf16 &&
                                                    v->type.dtype != DType::f64;
  std::vector<char> scanned(g.num_values(), 0);
  auto is_finite = [&](const Value* v) {
    if (v->is_constant() && !scanned[v->id]) {
      scanned[v->id] = 1;
      finite[v->id] = all_finite(*v->constant);
    }
    return finite[v->id] != 0;
  };
  int max_id = 0;
  for (const Node* n : nodes) max_id = std::max(max_id, n->id);
  r.node.assign(static_cast<size_t>(max_id) + 1, 0);
  for (const Node* n : nodes) {
    bool ins = true;
    for (const Value* v : n->inputs) ins = ins && is_finite(v);
    if (!ins) continue;
    if (engine_act_node(*n)) r.node[n->id] = 1;
    if (keeps_finite(*n))
      for (const Value* v : n->outputs) finite[v->id] = 1;
  }

  // The f32 graph inputs the marked nodes depend on.
  std::vector<char> seen(g.num_values(), 0);
  std::vector<const Value*> stack;
  for (const Node* n : nodes)
    if (r.marks(*n))
      for (const Value* v : n->inputs) stack.push_back(v);
  while (!stack.empty()) {
    const Value* v = stack.back();
    stack.pop_back();
    if (seen[v->id]) continue;
    seen[v->id] = 1;
    if (v->producer)
      for (const Value* u : v->producer->inputs) stack.push_back(u);
  }
  for (size_t k = 0; k < g.inputs().size(); ++k) {
    const Value* v = g.inputs()[k];
    if (seen[v->id] && v->type.dtype == DType::f32) r.inputs.push_back(static_cast<int>(k));
  }
  return r;
}

}  // namespace updraft
