#include "passes/match_gelu.h"

#include <cmath>
#include <optional>
#include <utility>

namespace updraft {

namespace {

// The value of a one-element f32 literal constant (Value::literal_scalar).
std::optional<double> scalar_of(const Value* v) {
  return v->type.dtype == DType::f32 ? v->literal_scalar() : std::nullopt;
}

bool near(std::optional<double> v, double want) { return v && std::abs(*v - want) <= 1e-6 * std::abs(want); }

// The node producing v when it is `op` with two inputs.
const Node* binary(const Value* v, const char* op) {
  const Node* n = v->producer;
  return n && n->op_name() == op && n->inputs.size() == 2 ? n : nullptr;
}

// For a commutative binary node, the operand that is not a scalar constant equal to `c`.
Value* other_than_scalar(const Node* n, double c) {
  if (near(scalar_of(n->inputs[1]), c)) return n->inputs[0];
  if (near(scalar_of(n->inputs[0]), c)) return n->inputs[1];
  return nullptr;
}

// x when v = 0.5 * x * (1 + tanh(...(x)...)) in the form described in the header, else null.
Value* gelu_input(const Value* v) {
  const Node* outer = binary(v, "mul");
  if (!outer) return nullptr;
  for (int side = 0; side < 2; ++side) {
    const Node* half = binary(outer->inputs[side], "mul");
    const Node* one_plus = binary(outer->inputs[1 - side], "add");
    if (!half || !one_plus) continue;
    Value* x = other_than_scalar(half, 0.5);
    Value* th = other_than_scalar(one_plus, 1.0);
    if (!x || !th || !th->producer || th->producer->op_name() != "tanh") continue;
    const Node* scaled = binary(th->producer->inputs[0], "mul");
    if (!scaled) continue;
    const Node* inner = nullptr;
    if (Value* s = other_than_scalar(scaled, std::sqrt(2.0 / M_PI))) inner = binary(s, "add");
    if (!inner) continue;
    // inner = x + 0.044715 * x^3
    for (int k = 0; k < 2; ++k) {
      if (inner->inputs[k] != x) continue;
      const Node* cube_term = binary(inner->inputs[1 - k], "mul");
      if (!cube_term) continue;
      Value* cube = other_than_scalar(cube_term, 0.044715);
      const Node* pow = cube ? cube->producer : nullptr;
      if (pow && pow->op_name() == "pow_scalar" && pow->inputs[0] == x && pow->attr("exponent").f() == 3.0)
        return x->type.dtype == DType::f32 && v->type == x->type ? x : nullptr;
    }
  }
  return nullptr;
}

}  // namespace

bool match_gelu(Graph& g) {
  bool changed = false;
  for (Node* n : g.nodes()) {
    if (n->op_name() != "mul" || n->outputs.size() != 1) continue;
    Value* x = gelu_input(n->output());
    if (!x) continue;
    g.set_insert_point(n);
    Value* y = g.add_node("gelu", {x}, {{"approximate", Attr("tanh")}})->output();
    g.set_insert_point(nullptr);
    y->name = n->output()->name;
    g.replace_all_uses(n->output(), y);
    changed = true;
  }
  return changed;
}

}  // namespace updraft
