#include <nanobind/nanobind.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include "convert.h"
#include "core/error.h"
#include "graph_handle.h"
#include "ir/text.h"
#include "runtime/compiled_graph.h"

namespace updraft::py {

std::string graph_text(const Graph& g) { return print_graph(g); }

static CompileOptions options_from(const nb::dict& d) {
  CompileOptions o;
  for (auto [k, v] : d) {
    std::string key = nb::cast<std::string>(k);
    if (key == "fold_constants") o.fold_constants = nb::cast<bool>(v);
    else if (key == "fuse") o.fuse = nb::cast<bool>(v);
    else if (key == "num_threads") o.num_threads = nb::cast<int>(v);
    else if (key == "debug") o.debug = nb::cast<int>(v);
    else if (key == "plan_cache_size") o.plan_cache_size = nb::cast<size_t>(v);
    else throw Error("bindings", "unknown compile option '" + key +
                                     "' (known: fold_constants, fuse, num_threads, debug, plan_cache_size)");
  }
  return o;
}

static std::vector<TensorView> views_of(const std::vector<AnyArray>& arrays) {
  std::vector<TensorView> v;
  v.reserve(arrays.size());
  for (const AnyArray& a : arrays) v.push_back(view_of(a));
  return v;
}

void bind_runtime(nb::module_& m) {
  using CG = CompiledGraph;
  nb::class_<CG>(m, "CompiledGraph")
      .def("prepare", &CG::prepare, nb::arg("input_shapes"), nb::call_guard<nb::gil_scoped_release>(),
           "Output shapes for these input shapes; builds and caches the plan.")
      .def("run",
           [](CG& cg, const std::vector<AnyArray>& inputs, const std::vector<AnyArray>& outputs) {
             // The arrays (and so the tensors' memory) stay referenced by `inputs`/`outputs`
             // for the whole call; the engine needs no GIL while it runs.
             std::vector<TensorView> in = views_of(inputs), out = views_of(outputs);
             nb::gil_scoped_release release;
             cg.run(in, out);
           },
           nb::arg("inputs"), nb::arg("outputs"))
      .def("output_dtypes",
           [](const CG& cg) {
             std::vector<std::string> r;
             for (DType t : cg.output_dtypes()) r.push_back(dtype_name(t));
             return r;
           })
      .def("graph_text", [](const CG& cg) { return print_graph(cg.graph()); })
      .def("pass_log",
           [](const CG& cg) {
             std::vector<std::tuple<std::string, bool, double, std::string>> r;
             for (const PassRecord& p : cg.pass_log()) r.emplace_back(p.name, p.changed, p.ms, p.ir_after);
             return r;
           })
      .def_prop_ro("compile_ms", &CG::compile_ms)
      .def("plan_text", &CG::plan_text, nb::arg("input_shapes"))
      .def_prop_ro("num_plans", &CG::num_plans);

  m.def(
      "compile",
      [](GraphHandle& h, const nb::dict& options) {
        CompileOptions opts = options_from(options);
        std::unique_ptr<Graph> g = std::move(h.graph);
        UPDRAFT_CHECK(g != nullptr, "bindings", "this Graph was already compiled; build a new one");
        nb::gil_scoped_release release;
        return CG::compile(std::move(g), opts);
      },
      nb::arg("graph"), nb::arg("options") = nb::dict(),
      "Runs the pass pipeline on `graph` (which is consumed) and returns a CompiledGraph.");
}

}  // namespace updraft::py
