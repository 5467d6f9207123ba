// fold_dequant_linear: linear over a widened compact constant -> linear_wq over the compact
// form; the header says which patterns and why it runs before constant_fold.
#include "passes/fold_dequant_linear.h"

#include <vector>

#include "passes/quantize_weights.h"

namespace updraft {

namespace {

// The compact constant under cast(c) to f32: c, when it has the storage dtype `want`.
Value* widened_constant(Value* v, DType want) {
  const Node* cast = v->producer;
  if (cast == nullptr || cast->op_name() != "cast" || v->type.dtype != DType::f32) return nullptr;
  Value* c = cast->input(0);
  return c->is_constant() && c->type.dtype == want && c->rank() == 2 ? c : nullptr;
}

// Whether v is a constant once constant_fold has run: a constant, or reshapes of one.
bool folds_to_constant(const Value* v) {
  while (v->producer != nullptr && v->producer->op_name() == "reshape") v = v->producer->input(0);
  return v->is_constant();
}

// A scale that multiplies whole rows of an [N, K] weight: f32, constant, [N, 1] or one element
// (then the same for every row); an [N] or [K] vector broadcasts over columns, so it is not one.
// Returns it as an [N] value (a reshape or expand that constant_fold folds), or null.
Value* row_scale(Graph& g, Value* s, int64_t n) {
  if (s->type.dtype != DType::f32 || !folds_to_constant(s)) return nullptr;
  const Shape& sh = s->type.shape;
  for (const Dim& d : sh)
    if (!d.is_static()) return nullptr;
  const bool per_row = sh.size() == 2 && sh[0] == Dim(n) && sh[1] == Dim(1);
  bool one = true;
  for (const Dim& d : sh) one = one && d == Dim(1);
  if (per_row) return g.add_node("reshape", {s}, {{"shape", Attr::from_dims({Dim(n)})}})->output();
  if (one) {
    Value* flat = g.add_node("reshape", {s}, {{"shape", Attr::from_dims({Dim(1)})}})->output();
    return g.add_node("expand", {flat}, {{"shape", Attr::from_dims({Dim(n)})}})->output();
  }
  return nullptr;
}

// The linear_wq inputs (w, then scale if any) for linear's weight w, or empty. New nodes (the
// scale's reshape) go before the insert point.
std::vector<Value*> compact_weight(Graph& g, Value* w) {
  if (Value* c = widened_constant(w, DType::bf16)) return {c};
  const Node* mul = w->producer;
  if (mul == nullptr || mul->op_name() != "mul" || mul->inputs.size() != 2) return {};
  for (int side = 0; side < 2; ++side) {
    Value* q = widened_constant(mul->input(side), DType::i8);
    if (q == nullptr || mul->input(side)->type.shape != w->type.shape) continue;
    if (Value* s = row_scale(g, mul->input(1 - side), q->constant->shape()[0])) return {q, s};
  }
  return {};
}

// Removes the widening chain under `v` (mul, cast) as far as nothing else reads it. Left for the
// pipeline's dce, constant_fold (which runs next) would fold a bf16 weight's cast into an f32 copy
// (2x its bytes is within its growth bound) that nothing reads, and the engine would keep it.
void drop_unused_chain(Graph& g, Value* v) {
  Node* n = v->producer;
  if (n == nullptr || g.use_count(v) > 0 || (n->op_name() != "mul" && n->op_name() != "cast")) return;
  std::vector<Value*> ins = n->inputs;
  g.remove_node(n);
  for (Value* in : ins) drop_unused_chain(g, in);
}

}  // namespace

bool fold_dequant_linear(Graph& g) {
  bool changed = false;
  for (Node* n : g.nodes()) {
    if (n->op_name() != "linear" || n->input(0)->type.dtype != DType::f32) continue;
    g.set_insert_point(n);
    std::vector<Value*> compact = compact_weight(g, n->input(1));
    if (compact.empty()) {
      g.set_insert_point(nullptr);
      continue;
    }
    g.set_insert_point(nullptr);
    Value* widened = n->input(1);
    replace_with_linear_wq(g, n, compact[0], compact.size() == 2 ? compact[1] : nullptr, "fold_dequant_linear");
    drop_unused_chain(g, widened);
    changed = true;
  }
  return changed;
}

}  // namespace updraft
