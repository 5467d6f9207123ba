// The Python-side owner of a Graph under construction; compile() takes the graph out of it.
#pragma once
#include <memory>
#include <string>

#include <nanobind/nanobind.h>

#include "ir/graph.h"

namespace nb = nanobind;

namespace updraft::py {

struct GraphHandle {
  std::unique_ptr<Graph> graph = std::make_unique<Graph>();
  Graph& get();
  Value* value(int id);
};

// Text IR of a graph (the printer when present); with `origins`, each node's provenance as a comment.
std::string graph_text(const Graph& g, bool origins = false);

// The graph's nodes as Python dicts, in graph (= plan schedule) order: index, op, text (the
// node's IR line), inputs / outputs (value ids), types, origin (front-end node names) and
// output_origin (per output: the front-end node whose result it holds, or ""). The debug tools'
// view of provenance (updraft/debug/).
nb::list node_rows(const Graph& g);

// The graph's structure for pictures (updraft/debug/dump.py): {"inputs": [{id, name, type}],
// "constants": {id: {name, type}} (those nodes read), "nodes": node_rows(g), "outputs": [value ids]}.
nb::dict graph_outline(const Graph& g);

}  // namespace updraft::py
