// verify: checks the invariants every pass must keep. It changes nothing and throws
// Error("verify", ...) naming the node, the broken invariant and the usual cause.
#include "passes/verify.h"

#include <unordered_map>
#include <unordered_set>

#include "core/error.h"
#include "ir/op_table.h"

namespace updraft {

namespace {

std::string node_desc(const Node* n) { return "node #" + std::to_string(n->id) + " (" + n->op_name() + ")"; }
std::string value_desc(const Value* v) {
  return "value #" + std::to_string(v->id) + (v->name.empty() ? "" : " '" + v->name + "'");
}

// Inputs: flagged, no producer, no constant payload.
void check_inputs(const Graph& g, std::unordered_set<const Value*>& defined) {
  for (const Value* v : g.inputs()) {
    UPDRAFT_CHECK(v && v->is_input && !v->producer && !v->is_constant(), "verify",
                  "graph input " + (v ? value_desc(v) : "null") + " is not a plain input value");
    defined.insert(v);
  }
}

// A constant's payload matches its declared type (passes that replace data must retype).
void check_constant(const Value* v) {
  const Tensor& t = *v->constant;
  UPDRAFT_CHECK(t.dtype() == v->type.dtype && shape_is_static(v->type.shape) &&
                    shape_values(v->type.shape) == t.shape(),
                "verify",
                "constant " + value_desc(v) + " holds " + dtype_name(t.dtype()) + shape_str(shape_from(t.shape())) +
                    " but its type says " + v->type.str() + "; create a new constant instead of editing one in place");
  UPDRAFT_CHECK(t.defined(), "verify", "constant " + value_desc(v) + " has no data");
}

}  // namespace

// Topological order, producer links, types agree with the op table, outputs are defined.
bool verify(Graph& g) {
  std::unordered_set<const Value*> defined;
  check_inputs(g, defined);
  const OpTable& table = OpTable::get();
  std::unordered_set<int> node_ids;
  for (const Node* n : g.nodes()) {
    UPDRAFT_CHECK(n->op != nullptr, "verify", "node #" + std::to_string(n->id) + " has no op");
    UPDRAFT_CHECK(node_ids.insert(n->id).second, "verify", node_desc(n) + " reuses a node id");
    std::vector<TensorType> in_types;
    for (size_t k = 0; k < n->inputs.size(); ++k) {
      const Value* v = n->inputs[k];
      UPDRAFT_CHECK(v != nullptr, "verify", node_desc(n) + ": input " + std::to_string(k) + " is null");
      if (v->is_constant()) {
        check_constant(v);
      } else if (!defined.count(v)) {
        std::string why = v->producer ? "is produced later by " + node_desc(v->producer) +
                                            "; insert new producers before their users (Graph::set_insert_point)"
                                      : "has no producer in the graph (its node was removed while still used)";
        throw Error("verify", node_desc(n) + ": input " + std::to_string(k) + " (" + value_desc(v) + ") " + why);
      }
      in_types.push_back(v->type);
    }
    std::vector<TensorType> want;
    try {
      want = table.infer(n->op_name(), in_types, n->attrs);
    } catch (const Error& e) {
      throw Error("verify", node_desc(n) + " no longer type-checks: " + e.what());
    }
    UPDRAFT_CHECK(want.size() == n->outputs.size(), "verify",
                  node_desc(n) + " has " + std::to_string(n->outputs.size()) + " outputs, the op table says " +
                      std::to_string(want.size()));
    for (size_t k = 0; k < n->outputs.size(); ++k) {
      const Value* o = n->outputs[k];
      UPDRAFT_CHECK(o && o->producer == n && o->producer_index == static_cast<int>(k), "verify",
                    node_desc(n) + ": output " + std::to_string(k) + " does not point back at its producer");
      UPDRAFT_CHECK(!o->is_constant() && !o->is_input, "verify",
                    node_desc(n) + ": output " + std::to_string(k) + " is also marked as a constant or input");
      UPDRAFT_CHECK(o->type == want[k], "verify",
                    node_desc(n) + ": output " + std::to_string(k) + " is typed " + o->type.str() +
                        " but the op table infers " + want[k].str() + "; call Graph::reinfer() after retyping inputs");
      UPDRAFT_CHECK(defined.insert(o).second, "verify", node_desc(n) + ": output " + std::to_string(k) + " is defined twice");
    }
  }
  for (size_t i = 0; i < g.outputs().size(); ++i) {
    const Value* v = g.outputs()[i];
    UPDRAFT_CHECK(v != nullptr, "verify", "graph output " + std::to_string(i) + " is null");
    if (v->is_constant()) check_constant(v);
    else
      UPDRAFT_CHECK(defined.count(v), "verify",
                    "graph output " + std::to_string(i) + " (" + value_desc(v) + ") is not computed by any node in the graph");
  }
  return false;
}

}  // namespace updraft
