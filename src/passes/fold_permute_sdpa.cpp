#include "passes/fold_permute_sdpa.h"

#include <algorithm>
#include <vector>

#include "ir/ops/params.h"

namespace updraft {

namespace {

// A transpose(1, 2) of a 4-d [B, S, H, E]: dims -3 and -2 swapped, the rest in place.
bool swaps_seq_and_heads(const Node* p) {
  return p != nullptr && p->op_name() == "permute" && swaps_two_dims(p->attr("dims").ints(), -3, -2);
}

bool fold_one(Graph& g, Node* n) {
  if (n->output()->type.dtype != DType::f32) return false;
  std::vector<int64_t> seq_first = n->attr("seq_first").ints();
  const SdpaLayout layout = SdpaLayout::of(seq_first);
  std::vector<Value*> ins = n->inputs;
  bool inputs_folded = false;
  for (int i = 0; i < 3; ++i) {
    const Node* p = ins[static_cast<size_t>(i)]->producer;
    if (layout.seq_first[static_cast<size_t>(i)] || !swaps_seq_and_heads(p)) continue;
    ins[static_cast<size_t>(i)] = p->inputs[0];
    seq_first.push_back(i);
    inputs_folded = true;
  }
  // The result: folded when every reader transposes it back.
  const std::vector<Node*> readers = g.users(n->output());
  const bool out = !layout.seq_first[3] && !readers.empty() && !g.is_output(n->output()) &&
                   std::all_of(readers.begin(), readers.end(), [](const Node* r) { return swaps_seq_and_heads(r); });
  if (out) seq_first.push_back(3);
  if (!inputs_folded && !out) return false;
  std::sort(seq_first.begin(), seq_first.end());
  Attrs attrs = n->attrs;
  attrs["seq_first"] = Attr(seq_first);
  g.set_insert_point(n);
  Node* folded = g.add_node("sdpa", ins, attrs);
  g.set_insert_point(nullptr);
  if (out) {
    for (Node* r : readers) g.replace_all_uses(r->output(), folded->output(0));
  } else {
    g.replace_all_uses(n->output(), folded->output(0));
  }
  if (n->outputs.size() > 1) g.replace_all_uses(n->output(1), folded->output(1));  // with_lse: [.., H, L] either way
  return true;
}

}  // namespace

bool fold_permute_sdpa(Graph& g) {
  bool changed = false;
  for (Node* n : g.nodes())  // a snapshot: the sdpa nodes added here are not visited
    if (n->op_name() == "sdpa") changed |= fold_one(g, n);
  return changed;
}

}  // namespace updraft
