#include "memory/liveness.h"

#include <algorithm>

#include "core/error.h"
#include "ir/op_table.h"

namespace updraft {

std::string value_label(const Value* v) {
  if (!v->name.empty()) return v->name;
  std::string s = "%";  // (built in two steps: GCC 12 -Wrestrict false positive on "%" + str)
  return s += std::to_string(v->id);
}

Liveness compute_liveness(const Graph& g) {
  Liveness lv;
  lv.order.reserve(g.num_nodes());
  for (const Node* n : g.nodes()) lv.order.push_back(n);
  lv.at_end = static_cast<int>(lv.order.size());
  lv.values.assign(g.num_values(), ValueLife{});
  lv.root_last.assign(g.num_values(), ValueLife::kNever);

  auto define = [&](const Value* v, int step, int root) {
    ValueLife& l = lv.values.at(v->id);
    l.def = step;
    l.last = step;  // a value nobody reads still lives while it is written
    l.root = root;
    lv.root_last[root] = std::max(lv.root_last[root], step);
  };
  // Every read extends the value and, through it, its root buffer.
  auto use = [&](const Value* v, int step, const char* who) {
    ValueLife& l = lv.values.at(v->id);
    UPDRAFT_CHECK(l.live(), "plan",
                  std::string(who) + " reads " + value_label(v) +
                      " before it is defined; run the verifier (the graph is not in topological order)");
    l.last = std::max(l.last, step);
    lv.root_last[l.root] = std::max(lv.root_last[l.root], step);
  };

  for (const Value* v : g.inputs()) define(v, Liveness::kBeforeFirst, v->id);
  for (const Value* v : g.constants()) define(v, Liveness::kBeforeFirst, v->id);

  for (int i = 0; i < lv.at_end; ++i) {
    const Node* n = lv.order[i];
    for (const Value* in : n->inputs) use(in, i, n->op_name().c_str());
    for (size_t k = 0; k < n->outputs.size(); ++k) {
      const Value* out = n->outputs[k];
      // Only output 0 of a View op aliases (input 0); any other output owns its memory.
      bool aliases = n->op->alias && k == 0 && !n->inputs.empty();
      int root = aliases ? lv.values.at(n->inputs[0]->id).root : out->id;
      define(out, i, root);
    }
  }
  for (const Value* v : g.outputs()) use(v, lv.at_end, "the graph output list");
  return lv;
}

std::string Liveness::str() const {
  std::string s;
  for (size_t id = 0; id < values.size(); ++id) {
    const ValueLife& l = values[id];
    if (!l.live()) continue;
    s += "%" + std::to_string(id) + " def " + std::to_string(l.def) + " last " + std::to_string(l.last);
    if (l.root != static_cast<int>(id)) s += " root %" + std::to_string(l.root);
    s += " (buffer last " + std::to_string(root_last[l.root]) + ")\n";
  }
  return s;
}

}  // namespace updraft
