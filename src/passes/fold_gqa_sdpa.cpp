#include "passes/fold_gqa_sdpa.h"

#include <optional>
#include <vector>

namespace updraft {

namespace {

// A k or v operand that is reshape(expand(x)) repeating dim -3 of a 5-d-or-more x: x, and R.
struct Repeat {
  Value* x = nullptr;
  int64_t r = 0;
};

std::optional<Repeat> repeat_of(Value* kv) {
  const Node* reshape = kv->producer;
  if (reshape == nullptr || reshape->op_name() != "reshape") return std::nullopt;
  const Node* expand = reshape->input(0)->producer;
  if (expand == nullptr || expand->op_name() != "expand") return std::nullopt;
  Value* x = expand->input(0);
  const Shape& xs = x->type.shape;
  const Shape& es = expand->output()->type.shape;
  const Shape& ks = kv->type.shape;
  const size_t n = xs.size();
  if (n < 5 || es.size() != n || ks.size() != n - 1) return std::nullopt;
  // x [b.., G, 1, S, E] -> [b.., G, R, S, E]: only dim -3 grows, from 1.
  for (size_t d = 0; d < n; ++d)
    if (d != n - 3 && xs[d] != es[d]) return std::nullopt;
  if (xs[n - 3] != Dim(1) || !es[n - 3].is_static() || !xs[n - 4].is_static()) return std::nullopt;
  // ... -> [b.., G * R, S, E]: the two head dims merged, nothing else moved. S may be another
  // symbol than x's (Dynamo names the k and v cache lengths apart); the reshape keeps the
  // element count, so with every other dim equal it is the same size at run time.
  for (size_t d = 0; d + 4 < n; ++d)
    if (ks[d] != xs[d]) return std::nullopt;
  if (ks[n - 4] != xs[n - 4] * es[n - 3] || ks[n - 2] != xs[n - 1]) return std::nullopt;
  if (ks[n - 3] != xs[n - 2] && ks[n - 3].is_static() && xs[n - 2].is_static()) return std::nullopt;
  return Repeat{x, es[n - 3].value()};
}

Shape with(const Shape& batch, std::initializer_list<Dim> tail) {
  Shape s = batch;
  s.insert(s.end(), tail);
  return s;
}

// v's bytes seen as `shape` (of a reshape's result, its input: no chain of views).
Value* reshaped(Graph& g, Value* v, const Shape& shape) {
  if (v->producer != nullptr && v->producer->op_name() == "reshape") v = v->producer->input(0);
  return g.add_node("reshape", {v}, {{"shape", Attr::from_dims(shape)}})->output(0);
}

// The mask viewed for the new scores shape, or nullptr when it cannot be. `heads` is H; the
// new scores are [.., G, R, L, S] (`rows_fold`: [.., G, R(rows), S], L == 1).
Value* mask_view(Graph& g, Value* m, int64_t groups, int64_t reps, bool rows_fold) {
  const Shape& ms = m->type.shape;
  const size_t r = ms.size();
  if (r < 3) return m;  // [L, S] or [S]: the same for every head, aligned to the right
  const Dim h = ms[r - 3];
  Shape lead(ms.begin(), ms.end() - 3);
  if (h == Dim(1)) {
    if (rows_fold) return m;  // [.., 1, 1, S] against [.., G, R, S]: both broadcast
    return reshaped(g, m, with(lead, {Dim(1), Dim(1), ms[r - 2], ms[r - 1]}));
  }
  if (h != Dim(groups * reps)) return nullptr;
  if (rows_fold) return reshaped(g, m, with(lead, {Dim(groups), Dim(reps), ms[r - 1]}));
  return reshaped(g, m, with(lead, {Dim(groups), Dim(reps), ms[r - 2], ms[r - 1]}));
}

bool fold_one(Graph& g, Node* n) {
  if (!n->attr("seq_first").ints().empty()) return false;  // views q, k, v by [.., H, S, E] shapes
  Value* q = n->input(0);
  const std::optional<Repeat> k = repeat_of(n->input(1)), v = repeat_of(n->input(2));
  if (!k || !v || k->r != v->r) return false;
  const Shape& qs = q->type.shape;
  const Shape& kx = k->x->type.shape;
  const Shape& vx = v->x->type.shape;
  const size_t nq = qs.size();
  if (kx.size() != nq + 1 || vx.size() != nq + 1) return false;
  const Shape batch(qs.begin(), qs.end() - 3);
  for (size_t d = 0; d + 3 < nq; ++d)
    if (kx[d] != qs[d] || vx[d] != qs[d]) return false;
  const Dim G = kx[nq - 3];
  if (vx[nq - 3] != G || qs[nq - 3] != G * Dim(k->r)) return false;
  const int64_t groups = G.value(), reps = k->r;
  const Dim L = qs[nq - 2], E = qs[nq - 1];
  const bool rows_fold = L == Dim(1) && !n->attr("is_causal").b();
  const bool has_mask = n->inputs.size() > 3;

  g.set_insert_point(n);
  Value* mask = has_mask ? mask_view(g, n->input(3), groups, reps, rows_fold) : nullptr;
  if (has_mask && mask == nullptr) {
    g.set_insert_point(nullptr);
    return false;
  }
  // k and v keep the lengths sdpa saw (their S symbols may differ from x's, see repeat_of).
  const Dim Sk = n->input(1)->type.shape[nq - 2], Sv = n->input(2)->type.shape[nq - 2];
  std::vector<Value*> ins;
  if (rows_fold) {  // R query heads as R rows over their group's k and v
    ins = {reshaped(g, q, with(batch, {G, Dim(reps), E})), reshaped(g, k->x, with(batch, {G, Sk, kx[nq]})),
           reshaped(g, v->x, with(batch, {G, Sv, vx[nq]}))};
  } else {  // k and v broadcast over R
    ins = {reshaped(g, q, with(batch, {G, Dim(reps), L, E})), reshaped(g, k->x, with(batch, {G, Dim(1), Sk, kx[nq]})),
           reshaped(g, v->x, with(batch, {G, Dim(1), Sv, vx[nq]}))};
  }
  if (has_mask) ins.push_back(mask);
  Node* folded = g.add_node("sdpa", ins, n->attrs);
  const Shape& ys = n->output()->type.shape;
  Value* y = reshaped(g, folded->output(0), ys);
  // with_lse: [.., G, R, L] (or [.., G, R] with the rows folded) is [.., H, L] in the same order.
  Value* lse = n->outputs.size() > 1 ? reshaped(g, folded->output(1), n->output(1)->type.shape) : nullptr;
  g.set_insert_point(nullptr);
  g.replace_all_uses(n->output(), y);
  if (lse != nullptr) g.replace_all_uses(n->output(1), lse);
  return true;
}

}  // namespace

bool fold_gqa_sdpa(Graph& g) {
  bool changed = false;
  std::vector<Node*> found;
  for (Node* n : g.nodes())
    if (n->op_name() == "sdpa") found.push_back(n);
  for (Node* n : found) changed |= fold_one(g, n);
  return changed;
}

}  // namespace updraft
