// bind_input_shapes: the symbol bindings an input signature implies for a graph, the one check
// of "do these inputs fit this graph's input types" that both the execution plan
// (Plan::build) and the interpreter run.
//
//   SymBindings b = bind_input_shapes(g, {{4, 64}, {8, 64}}, "runtime");  // s0 = 4
//
// A dim written as a plain symbol binds it (the first input that does so wins, the others
// must agree); a size input (Graph::add_size_input) binds its symbol to its value, given as
// {value} in the signature. Static dims and dims that are expressions are then checked against
// the binding. It does not check dtypes or strides: the caller sees the views, this sees shapes.
#pragma once
#include <cstdint>
#include <vector>

#include "ir/dim.h"
#include "ir/graph.h"

namespace updraft {

// Throws Error(component, ...) naming the input, the dim, what was expected and, for a
// symbol bound twice, which input bound it first.
SymBindings bind_input_shapes(const Graph& g, const std::vector<std::vector<int64_t>>& input_shapes,
                              const char* component);

}  // namespace updraft
