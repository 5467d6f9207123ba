// Liveness: for a graph walked in node order, when each value is born and when it is last
// needed, and which buffer ("root") its memory belongs to.
//
//   Liveness lv = compute_liveness(g);
//   const ValueLife& l = lv.values[v->id];   // l.def, l.last, l.root
//   lv.buffer_last(l.root);                   // last step any alias of that buffer is read
//
// Steps are node indices in g.nodes() order. Graph inputs and constants are defined at step
// kBeforeFirst (-1, before the first node); graph outputs live to kAtEnd (== number of
// nodes: after the last node, where the caller still needs them). A node output that nobody
// reads still lives during its own step, because the kernel writes it.
//
// View ops (OpDef::alias) make output 0 share input 0's memory: its root is input 0's root,
// and the root buffer must stay alive until the last use of any of its aliases. That extended
// lifetime is buffer_last(root); l.last is only the value's own last use.
#pragma once
#include <climits>
#include <string>
#include <vector>

#include "ir/graph.h"

namespace updraft {

struct ValueLife {
  static constexpr int kNever = INT_MIN;  // value not reachable from this graph (removed node)
  int def = kNever;   // step that writes it (-1 for inputs and constants)
  int last = kNever;  // last step that reads it (kAtEnd for graph outputs)
  int root = -1;      // value id owning the memory (itself unless it is a view's output)
  bool live() const { return def != kNever; }
};

struct Liveness {
  static constexpr int kBeforeFirst = -1;
  int at_end = 0;                    // == number of nodes; graph outputs live to here
  std::vector<const Node*> order;    // step i runs order[i]
  std::vector<ValueLife> values;     // indexed by value id
  std::vector<int> root_last;        // indexed by value id; meaningful for roots only

  const ValueLife& of(const Value* v) const { return values.at(v->id); }
  int buffer_last(int root) const { return root_last.at(root); }
  // One line per live value: "%3 def 0 last 2 root %1 (buffer last 4)".
  std::string str() const;
};

Liveness compute_liveness(const Graph& g);

// How values are named in plans and dumps: the value's name when it has one, else "%id".
std::string value_label(const Value* v);

}  // namespace updraft
