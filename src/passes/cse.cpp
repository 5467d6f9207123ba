// cse: two nodes with the same op, the same inputs and the same attributes (defaults
// resolved, so {approximate="none"} equals no attribute) compute the same values; the later
// one is replaced by the earlier, which comes first in topological order and so is defined
// wherever the later one was used. Small literal constants with identical type and bytes are
// merged first, so nodes reading equal constants merge too. Parameters, and constants folded
// from them, are never merged by content (Value::is_literal): two weights that are equal at
// compile time are still two weights once a cache hit binds another checkpoint or one of them
// is updated in place. No op has side effects today; an op
// that gains one (an in-place update, a random draw) must be excluded here.
#include "passes/cse.h"

#include <cstring>
#include <unordered_map>

#include "ir/op_table.h"

namespace updraft {

namespace {

constexpr size_t kMaxMergedConstantBytes = 64 << 10;  // hashing big weights costs more than it saves

// Merge literal constants that hold identical small data into the first of them.
bool merge_constants(Graph& g) {
  bool changed = false;
  std::unordered_map<std::string, std::vector<Value*>> by_key;  // type + hash of bytes
  for (Value* c : g.constants()) {
    const Tensor& t = *c->constant;
    if (!c->is_literal() || t.nbytes() > kMaxMergedConstantBytes || g.use_count(c) == 0) continue;
    uint64_t h = 1469598103934665603ull;
    const auto* p = static_cast<const unsigned char*>(t.data());
    for (size_t i = 0; i < t.nbytes(); ++i) h = (h ^ p[i]) * 1099511628211ull;
    std::vector<Value*>& same = by_key[c->type.str() + "#" + std::to_string(h)];
    Value* keep = nullptr;
    for (Value* k : same)
      if (t.nbytes() == 0 || std::memcmp(k->constant->data(), t.data(), t.nbytes()) == 0) keep = k;
    if (!keep || (g.is_output(keep) && g.is_output(c))) {
      same.push_back(c);
      continue;
    }
    g.replace_all_uses(c, keep);
    changed = true;
  }
  return changed;
}

// The node's identity: op, input ids, and every attribute of its schema with defaults filled.
std::string node_key(const Node& n) {
  std::string key = n.op_name() + "(";
  for (const Value* v : n.inputs) key += std::to_string(v->id) + ",";
  key += "){";
  for (const AttrSpec& s : n.op->attrs)
    if (n.has_attr(s.name) || s.default_value) {
      const Attr& a = n.attr(s.name);
      // An int given for a float attribute ("min=0") equals the float.
      std::string text = s.kind == Attr::Kind::Float ? Attr(a.f()).str() : a.str();
      key += s.name + "=" + text + ",";
    }
  return key + "}";
}

// Merging would list one value twice among the graph outputs; the runtime writes each
// output into its own caller buffer, so keep both producers instead.
bool outputs_collide(const Graph& g, const Node* a, const Node* b) {
  for (size_t k = 0; k < a->outputs.size(); ++k)
    if (g.is_output(a->outputs[k]) && g.is_output(b->outputs[k])) return true;
  return false;
}

// Replace each node that repeats an earlier (op, inputs, attrs) with the earlier node.
bool merge_nodes(Graph& g) {
  bool changed = false;
  std::unordered_map<std::string, Node*> seen;
  for (Node* n : g.nodes()) {
    auto [it, fresh] = seen.emplace(node_key(*n), n);
    if (fresh) continue;
    Node* keep = it->second;
    if (outputs_collide(g, n, keep)) continue;
    for (size_t k = 0; k < n->outputs.size(); ++k) {
      if (keep->outputs[k]->name.empty()) keep->outputs[k]->name = n->outputs[k]->name;
      g.replace_all_uses(n->outputs[k], keep->outputs[k]);
    }
    g.remove_node(n);
    changed = true;
  }
  return changed;
}

}  // namespace

bool cse(Graph& g) {
  bool changed = merge_constants(g);
  changed |= merge_nodes(g);
  return changed;
}

}  // namespace updraft
