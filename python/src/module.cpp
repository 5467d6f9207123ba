// updraft._C: the engine's Python surface. One file per C++ area: graph building
// (graph_bindings.cpp), compiling and running (runtime_bindings.cpp), compile-cache entries
// (cache_bindings.cpp), conversions (convert.cpp).
#include <nanobind/nanobind.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "convert.h"
#include "core/error.h"
#include "ir/op_table.h"
#include "kernels/kernel.h"

namespace nb = nanobind;
using namespace updraft;

namespace updraft::py {
void bind_graph(nb::module_& m);
void bind_runtime(nb::module_& m);
void bind_cache(nb::module_& m);
}  // namespace updraft::py

NB_MODULE(_C, m) {
  m.doc() = "updraft engine bindings (C++ graph engine, CPU, oneDNN)";
  static nb::exception<Error> exc(m, "UpdraftError", PyExc_RuntimeError);

  m.def("op_names", [] { return OpTable::get().names(); }, "Names of every op in the engine's op table.");
  m.def(
      "check_op",
      [](const std::string& op, const std::vector<std::pair<std::string, nb::list>>& inputs,
         const nb::dict& attrs) -> std::optional<std::string> {
        std::vector<TensorType> types;
        try {
          for (const auto& [dt, shape] : inputs) types.push_back({dtype_from_name(dt), py::shape_from_py(shape)});
          return check_op_support(op, types, py::attrs_from_py(attrs, op));
        } catch (const Error& e) {
          return std::string(e.what());
        }
      },
      nb::arg("op"), nb::arg("inputs"), nb::arg("attrs"),
      "None if the engine can run `op` on inputs [(dtype, shape)] with `attrs`; otherwise the reason.");
  m.def("op_doc", [](const std::string& op) { return OpTable::get().at(op).doc; });
  m.def("preferred_channel_block", [] { return preferred_channel_block(); },
        "The channel block the conv kernels prefer on this CPU (16: AVX-512, 8: AVX2, 0: none).");
  m.def("has_cpu_kernel", [](const std::string& op) { return KernelRegistry::get().has(op, Device::cpu); });

  py::bind_graph(m);
  py::bind_runtime(m);
  py::bind_cache(m);
}
