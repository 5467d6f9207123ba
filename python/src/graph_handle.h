// The Python-side owner of a Graph under construction; compile() takes the graph out of it.
#pragma once
#include <memory>
#include <string>

#include "ir/graph.h"

namespace updraft::py {

struct GraphHandle {
  std::unique_ptr<Graph> graph = std::make_unique<Graph>();
  Graph& get();
  Value* value(int id);
};

// Text IR of a graph (the printer when present).
std::string graph_text(const Graph& g);

}  // namespace updraft::py
