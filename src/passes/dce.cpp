// dce: removes nodes none of whose outputs reach a graph output. No op has side effects
// today; an op that gains one must be kept alive here.
#include "passes/dce.h"

#include <unordered_set>

namespace updraft {

// Remove every node whose outputs are unused by live nodes and graph outputs.
bool dce(Graph& g) {
  // One backward sweep marks live values: graph outputs, then inputs of live nodes. Nodes are
  // in topological order, so each node's users have been seen before the node itself.
  std::unordered_set<const Value*> live(g.outputs().begin(), g.outputs().end());
  std::vector<Node*> nodes = g.nodes();
  std::vector<Node*> dead;  // in reverse order, so each removal finds its outputs unused
  for (auto it = nodes.rbegin(); it != nodes.rend(); ++it) {
    Node* n = *it;
    bool is_live = false;
    for (const Value* o : n->outputs) is_live = is_live || live.count(o) > 0;
    if (!is_live) {
      dead.push_back(n);
      continue;
    }
    for (const Value* v : n->inputs) live.insert(v);
  }
  for (Node* n : dead) g.remove_node(n);
  return !dead.empty();
}

}  // namespace updraft
