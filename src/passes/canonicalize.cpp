// canonicalize: small rewrites that never change results and make later passes' patterns
// simpler. Each rewrite leaves the nodes it bypasses for dce. A node is only bypassed when
// that keeps every graph output computed by a node of its own (the runtime writes each
// output into its own caller buffer), so e.g. an identity reshape that is a graph output of
// a graph input stays.
#include "passes/canonicalize.h"

#include "ir/op_table.h"

namespace updraft {

namespace {

// Route users of n's output to `to`, unless n's output is a graph output that must stay
// node-computed and distinct.
bool bypass(Graph& g, Node* n, Value* to) {
  Value* from = n->output();
  if (g.use_count(from) == 0) return false;
  if (g.is_output(from) && (to->producer == nullptr || g.is_output(to))) return false;
  g.replace_all_uses(from, to);
  return true;
}

// Drop reshape, expand, permute, cast, zero pad and copy nodes whose output equals their input.
bool drop_identity(Graph& g, Node* n) {
  const std::string& op = n->op_name();
  if (n->inputs.empty() || n->outputs.size() != 1) return false;
  Value* x = n->input(0);
  if (!(n->output()->type == x->type)) return false;
  if (op == "reshape" || op == "expand" || op == "cast") return bypass(g, n, x);
  if (op == "permute") {
    const auto& dims = n->attr("dims").ints();
    for (size_t i = 0; i < dims.size(); ++i)
      if (dims[i] != static_cast<int64_t>(i) && dims[i] != static_cast<int64_t>(i) - static_cast<int64_t>(dims.size()))
        return false;
    return bypass(g, n, x);
  }
  if (op == "pad") {  // zero amounts everywhere (HF MobileNet's "same" padding of 1x1 convs)
    for (int64_t p : n->attr("pads").ints())
      if (p != 0) return false;
    return bypass(g, n, x);
  }
  // copy materialises a value; between two nodes it is pointless, as a graph output it is not.
  if (op == "copy" && !g.is_output(n->output())) return bypass(g, n, x);
  return false;
}

// Drop elementwise ops that return one operand as it is: x * 1, 1 * x and x / 1 (exact for
// every float, -0, inf and NaN included), and where(c, a, b) with a literal condition. An
// optimizer step holds both (addcdiv's value=1, lerp's branch on a constant weight); a fused
// program would evaluate each for every element.
bool drop_elementwise_identity(Graph& g, Node* n) {
  const std::string& op = n->op_name();
  if (n->outputs.size() != 1 || n->inputs.size() < 2) return false;
  Value* keep = nullptr;
  if (op == "mul" || op == "div") {
    for (size_t k = 0; k < 2 && !keep; ++k) {
      auto c = n->input(k)->literal_scalar();
      if (c && *c == 1.0 && (k == 1 || op == "mul")) keep = n->input(1 - k);
    }
  } else if (op == "where") {
    if (auto c = n->input(0)->literal_scalar(); c && n->input(0)->type.dtype == DType::boolean)
      keep = n->input(*c != 0.0 ? 1 : 2);
  }
  if (!keep || !(keep->type == n->output()->type)) return false;
  return bypass(g, n, keep);
}

// Rewrite reshape(reshape(x, a), b) to reshape(x, b).
bool merge_reshapes(Graph& g, Node* n) {
  if (n->op_name() != "reshape") return false;
  Node* inner = n->input(0)->producer;
  if (!inner || inner->op_name() != "reshape") return false;
  // Same element count, so b (even with a -1) means the same shape when applied to x.
  n->inputs[0] = inner->input(0);
  return true;
}

// Rewrite permute(permute(x, p), q) to permute(x, r) with r[i] = p[q[i]]. Training graphs
// transpose a weight for the forward matmul and transpose it back for the backward one; merged,
// the pair is an identity that drop_identity removes instead of two copies per call.
bool merge_permutes(Graph& g, Node* n) {
  if (n->op_name() != "permute") return false;
  Node* inner = n->input(0)->producer;
  if (!inner || inner->op_name() != "permute") return false;
  const auto& p = inner->attr("dims").ints();
  const auto& q = n->attr("dims").ints();
  const auto r = static_cast<int64_t>(p.size());
  if (static_cast<int64_t>(q.size()) != r) return false;
  auto norm = [r](int64_t d) { return d < 0 ? d + r : d; };
  std::vector<int64_t> merged(static_cast<size_t>(r));
  for (int64_t i = 0; i < r; ++i) merged[static_cast<size_t>(i)] = norm(p[static_cast<size_t>(norm(q[static_cast<size_t>(i)]))]);
  n->inputs[0] = inner->input(0);
  n->attrs["dims"] = Attr(merged);
  return true;
}

// Rewrite linear(x, permute(w, [1, 0]), ...) to matmul(x, w, ...) for a w that is not a
// constant: linear multiplies by its
// weight's transpose, so a transposed 2-d weight is w itself read as [K, N], which matmul
// takes in place (the epilogue attributes and inputs are the same for both ops). A training
// graph's backward multiplies each gradient by an untransposed weight this way; the permute
// was a copy of the weight per call.
bool linear_of_transpose(Graph& g, Node* n) {
  if (n->op_name() != "linear" || g.use_count(n->output()) == 0) return false;
  Node* t = n->input(1)->producer;
  if (!t || t->op_name() != "permute" || t->input(0)->type.shape.size() != 2) return false;
  // A constant weight's transpose is folded once by constant_fold and prepacked for linear;
  // only a weight that arrives per call (training, freeze=False) is worth reading in place.
  if (t->input(0)->is_constant()) return false;
  std::vector<Value*> inputs = n->inputs;
  inputs[1] = t->input(0);
  g.set_insert_point(n);
  Node* m = g.add_node("matmul", inputs, n->attrs);
  g.set_insert_point(nullptr);
  if (!(m->output()->type == n->output()->type)) {  // not expected: same shape rule for 2-d w
    g.remove_node(m);
    return false;
  }
  g.replace_all_uses(n->output(), m->output());
  return true;
}

// Rewrite op(expand(x), y) to op(x, y) when the elementwise op's broadcast gives the same type.
bool absorb_expand(Graph& g, Node* n) {
  if (n->op->cls != OpClass::Elementwise || n->inputs.size() < 2) return false;
  bool changed = false;
  for (size_t k = 0; k < n->inputs.size(); ++k) {
    Node* e = n->inputs[k]->producer;
    if (!e || e->op_name() != "expand") continue;
    std::vector<TensorType> types;
    for (size_t j = 0; j < n->inputs.size(); ++j) types.push_back(j == k ? e->input(0)->type : n->inputs[j]->type);
    std::vector<TensorType> out;
    try {
      out = OpTable::get().infer(n->op_name(), types, n->attrs);
    } catch (const Error&) {
      continue;  // does not broadcast without the expand: keep it
    }
    if (out.size() != n->outputs.size()) continue;
    bool same = true;
    for (size_t o = 0; o < out.size(); ++o) same = same && out[o] == n->outputs[o]->type;
    if (!same) continue;
    n->inputs[k] = e->input(0);
    changed = true;
  }
  return changed;
}

}  // namespace

bool canonicalize(Graph& g) {
  bool changed = false;
  // Rewrites enable each other (a merged reshape may become an identity); a few rounds reach
  // the fixed point on real graphs, and the bound guards against a rewrite that oscillates.
  for (int round = 0; round < 8; ++round) {
    bool any = false;
    for (Node* n : g.nodes()) {
      any |= merge_reshapes(g, n);
      any |= merge_permutes(g, n);
      any |= linear_of_transpose(g, n);
      any |= drop_identity(g, n);
      any |= drop_elementwise_identity(g, n);
      any |= absorb_expand(g, n);
    }
    changed |= any;
    if (!any) break;
  }
  return changed;
}

}  // namespace updraft
