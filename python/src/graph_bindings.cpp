#include <nanobind/nanobind.h>
#include <nanobind/stl/map.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <memory>

#include "convert.h"
#include "core/error.h"
#include "graph_handle.h"
#include "ir/text.h"
#include "kernels/kernel.h"

namespace updraft::py {

Graph& GraphHandle::get() {
  UPDRAFT_CHECK(graph != nullptr, "bindings", "this Graph was consumed by compile(); build a new one");
  return *graph;
}

Value* GraphHandle::value(int id) {
  Graph& g = get();
  UPDRAFT_CHECK(id >= 0 && static_cast<size_t>(id) < g.num_values(), "bindings",
                "value id " + std::to_string(id) + " does not exist in this graph");
  return g.value(id);
}

// Constants share the tensor's memory: the engine keeps the Python object alive and
// releases it (under the GIL) when the last engine reference goes away.
Tensor constant_from(const AnyArray& arr) {
  TensorView v = view_of(arr);
  UPDRAFT_CHECK(v.is_contiguous(), "bindings", "constants must be contiguous; call .contiguous() first");
  auto* keep = new AnyArray(arr);
  std::shared_ptr<void> storage(v.data, [keep](void*) {
    if (!Py_IsInitialized()) return;  // interpreter gone: leak rather than crash at exit
    nb::gil_scoped_acquire gil;
    delete keep;
  });
  return Tensor(v.dtype, v.shape(), std::move(storage));
}

nb::list node_rows(const Graph& g) {
  std::vector<std::string> lines = print_node_lines(g);
  std::vector<Node*> nodes = g.nodes();
  nb::list rows;
  for (size_t i = 0; i < nodes.size(); ++i) {
    const Node* n = nodes[i];
    nb::list ins, outs, types, origin, out_origin;
    for (const Value* v : n->inputs) ins.append(v->id);
    for (const Value* v : n->outputs) {
      outs.append(v->id);
      types.append(v->type.str());
      out_origin.append(v->origin);
    }
    for (const std::string& o : n->origin) origin.append(o);
    nb::dict row;
    row["index"] = i;
    row["op"] = n->op_name();
    row["text"] = lines[i];
    row["inputs"] = ins;
    row["outputs"] = outs;
    row["types"] = types;
    row["origin"] = origin;
    row["output_origin"] = out_origin;
    rows.append(row);
  }
  return rows;
}

nb::dict graph_outline(const Graph& g) {
  auto entry = [](const Value* v) {
    nb::dict d;
    d["id"] = v->id;
    d["name"] = v->name.empty() ? "c" + std::to_string(v->id) : v->name;
    d["type"] = v->type.str();
    return d;
  };
  nb::list inputs, outputs;
  nb::dict constants;
  for (const Value* v : g.inputs()) inputs.append(entry(v));
  for (const Node* n : g.nodes())
    for (const Value* v : n->inputs)
      if (v->is_constant()) constants[nb::int_(v->id)] = entry(v);
  for (const Value* v : g.outputs()) outputs.append(v->id);
  nb::dict d;
  d["inputs"] = inputs;
  d["constants"] = constants;
  d["nodes"] = node_rows(g);
  d["outputs"] = outputs;
  return d;
}

void bind_graph(nb::module_& m) {
  nb::class_<GraphHandle>(m, "Graph")
      .def(nb::init<>())
      .def("add_input",
           [](GraphHandle& h, const std::string& name, const std::string& dtype, const nb::list& shape) {
             return h.get().add_input(name, {dtype_from_name(dtype), shape_from_py(shape)})->id;
           },
           nb::arg("name"), nb::arg("dtype"), nb::arg("shape"))
      .def("add_size_input",
           [](GraphHandle& h, const std::string& name, const std::string& symbol) {
             return h.get().add_size_input(name, symbol)->id;
           },
           nb::arg("name"), nb::arg("symbol"),
           "An i64 scalar input whose value binds `symbol` (a size no tensor input has as a dim); "
           "its entry in prepare()'s input shapes is [value].")
      .def("add_constant",
           [](GraphHandle& h, const std::string& name, const AnyArray& t, int source) {
             Value* v = h.get().add_constant(name, constant_from(t));
             v->source = source;
             return v->id;
           },
           nb::arg("name"), nb::arg("tensor"), nb::arg("source") = -1,
           "A constant sharing the tensor's memory. source >= 0: it is the caller's parameter number "
           "`source`, which compile-cache entries store by reference (refit on load).")
      .def("add_node",
           [](GraphHandle& h, const std::string& op, const std::vector<int>& inputs, const nb::dict& attrs) {
             std::vector<Value*> ins;
             for (int id : inputs) ins.push_back(h.value(id));
             Node* n = h.get().add_node(op, std::move(ins), attrs_from_py(attrs, op));
             std::vector<int> outs;
             for (Value* v : n->outputs) outs.push_back(v->id);
             return outs;
           },
           nb::arg("op"), nb::arg("inputs"), nb::arg("attrs") = nb::dict())
      .def("set_outputs",
           [](GraphHandle& h, const std::vector<int>& ids) {
             std::vector<Value*> outs;
             for (int id : ids) outs.push_back(h.value(id));
             h.get().set_outputs(std::move(outs));
           })
      .def("value_type",
           [](GraphHandle& h, int id) {
             Value* v = h.value(id);
             return std::make_pair(std::string(dtype_name(v->type.dtype)), shape_to_py(v->type.shape));
           })
      .def("fast_kernel",
           [](GraphHandle& h, int id, int64_t probe_size) -> std::optional<std::string> {
             const Node* n = h.value(id)->producer;
             UPDRAFT_CHECK(n != nullptr, "bindings", "value " + std::to_string(id) + " is not a node's output");
             return probe_fast_kernel(*n, probe_size);
           },
           nb::arg("value_id"), nb::arg("probe_size") = 8,
           "The CPU kernel the runtime would pick for the node producing `value_id` (symbols bound to "
           "probe_size), or None when only the reference kernel would run it.")
      .def("set_origin", [](GraphHandle& h, std::vector<std::string> origin) { h.get().set_origin(std::move(origin)); },
           nb::arg("origin"),
           "Provenance: nodes added from now on come from these front-end nodes (Node::origin).")
      .def("set_value_origin", [](GraphHandle& h, int id, const std::string& origin) { h.value(id)->origin = origin; },
           nb::arg("value_id"), nb::arg("origin"),
           "Provenance: the front-end node whose result this value holds (Value::origin).")
      .def("nodes", [](GraphHandle& h) { return node_rows(h.get()); })
      .def("num_nodes", [](GraphHandle& h) { return h.get().num_nodes(); })
      .def("text", [](GraphHandle& h, bool origins) { return graph_text(h.get(), origins); },
           nb::arg("origins") = false)
      .def(
          "text_with_constants",
          [](GraphHandle& h, int64_t max_literal_numel, bool origins) {
            // Constants above max_literal_numel print as extern(cID) and come back as data, so
            // the text parses again with parse_graph(text, constants) (a bisect reproducer).
            std::map<std::string, std::tuple<std::string, std::vector<int64_t>, nb::bytes>> data;
            PrintOptions po;
            po.max_literal_numel = max_literal_numel;
            po.origins = origins;
            po.constant_ref = [&](const Value* v) -> std::string {
              if (v->constant->numel() <= max_literal_numel) return "";
              std::string ref = "c" + std::to_string(v->id);
              const Tensor& t = *v->constant;
              data[ref] = {dtype_name(t.dtype()), t.shape(),
                           nb::bytes(static_cast<const char*>(t.data()), t.nbytes())};
              return ref;
            };
            std::string text = print_graph(h.get(), po);
            return std::make_pair(text, data);
          },
          nb::arg("max_literal_numel") = 64, nb::arg("origins") = false,
          "(text, {ref: (dtype, shape, bytes)}): the text IR with every constant of more than "
          "max_literal_numel elements written extern(ref), and those constants' data; origins: the "
          "'// from: ...' comments (aten nodes).");
  m.def(
      "parse_graph",
      [](const std::string& text, const std::optional<nb::dict>& externs) {
        // extern(REF) data from `externs` (shared, not copied); the parser checks each type.
        ExternResolver resolve = [&](const std::string& ref, const TensorType&) -> Tensor {
          if (!externs || !externs->contains(ref.c_str()))
            throw Error("parse", "no tensor for extern(" + ref + ") in the externs given");
          return constant_from(nb::cast<AnyArray>((*externs)[ref.c_str()]));
        };
        GraphHandle h;
        h.graph = parse_graph(text, &resolve);
        return h;
      },
      nb::arg("text"), nb::arg("externs") = nb::none(),
      "A Graph from text IR (src/ir/text.h); externs: {REF: contiguous tensor} for extern(REF) constant data. "
      "Raises UpdraftError('[parse] line L, col C: ...').");
}

}  // namespace updraft::py
