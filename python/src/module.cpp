// updraft._C: the engine's Python surface. One file per C++ area: graph building
// (graph_bindings.cpp), compiling and running (runtime_bindings.cpp), compile-cache entries
// (cache_bindings.cpp), debugging (debug_bindings.cpp), conversions (convert.cpp).
#include <nanobind/nanobind.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "convert.h"
#include "core/error.h"
#include "ir/op_table.h"
#include "kernels/channel_block.h"
#include "kernels/kernel.h"
#include "kernels/philox.h"

namespace nb = nanobind;
using namespace updraft;

namespace updraft::py {
void bind_graph(nb::module_& m);
void bind_runtime(nb::module_& m);
void bind_cache(nb::module_& m);
void bind_model(nb::module_& m);  // model_bindings.cpp
void bind_debug(nb::module_& m);  // debug_bindings.cpp
}  // namespace updraft::py

namespace {

// The names Python sees for the op table's enums. A switch without a default, so adding an
// enumerator is a compiler warning here instead of a silent "?" in op_info().
const char* class_name(OpClass c) {
  switch (c) {
    case OpClass::Elementwise: return "Elementwise";
    case OpClass::Reduction: return "Reduction";
    case OpClass::Norm: return "Norm";
    case OpClass::View: return "View";
    case OpClass::DataMovement: return "DataMovement";
    case OpClass::Compute: return "Compute";
    case OpClass::Fused: return "Fused";
    case OpClass::Random: return "Random";
  }
  return "?";
}

// The attribute kinds as docs/ops.md writes them.
const char* kind_text(Attr::Kind k) {
  switch (k) {
    case Attr::Kind::Int: return "int";
    case Attr::Kind::Float: return "float";
    case Attr::Kind::Bool: return "bool";
    case Attr::Kind::Str: return "str";
    case Attr::Kind::Ints: return "ints";
    case Attr::Kind::Floats: return "floats";
    case Attr::Kind::Dims: return "dims";
    case Attr::Kind::Sym: return "sym";
  }
  return "?";
}

nb::object attr_to_py(const Attr& a) {
  switch (a.kind()) {
    case Attr::Kind::Int: return nb::int_(a.i());
    case Attr::Kind::Float: return nb::float_(a.f());
    case Attr::Kind::Bool: return nb::bool_(a.b());
    case Attr::Kind::Str: return nb::str(a.s().c_str());
    case Attr::Kind::Ints: return nb::cast(a.ints());
    case Attr::Kind::Floats: return nb::cast(a.floats());
    case Attr::Kind::Dims: return py::shape_to_py(a.dims());
    case Attr::Kind::Sym: return nb::str(a.dim().str().c_str());
  }
  return nb::none();
}

// One dict per OpTable row, in table order: what the front end derives its same-name
// lowerings and docs/ops.md's tables from.
nb::list op_info() {
  nb::list out;
  const OpTable& table = OpTable::get();
  for (const std::string& name : table.names()) {
    const OpDef& d = table.at(name);
    nb::list attrs;
    for (const AttrSpec& s : d.attrs) {
      nb::dict a;
      a["name"] = s.name;
      a["kind"] = kind_text(s.kind);
      a["required"] = !s.default_value.has_value();
      a["default"] = s.default_value ? attr_to_py(*s.default_value) : nb::none();
      attrs.append(a);
    }
    nb::list dtypes;
    for (DType t : d.dtypes) dtypes.append(dtype_name(t));
    nb::dict info;
    info["name"] = d.name;
    info["class"] = class_name(d.cls);
    info["min_inputs"] = d.min_inputs;
    info["max_inputs"] = d.max_inputs;
    info["num_outputs"] = d.num_outputs;
    info["attrs"] = attrs;
    info["dtypes"] = dtypes;
    info["inplace"] = d.inplace;
    info["alias"] = d.alias;
    info["doc"] = d.doc;
    out.append(info);
  }
  return out;
}

}  // namespace

NB_MODULE(_C, m) {
  m.doc() = "updraft engine bindings (C++ graph engine, CPU, oneDNN)";
#ifdef NDEBUG
  // A script that keeps a loss tensor in a global holds its autograd graph, and through it the
  // compiled training graphs (Executables), until after this module is torn down at exit;
  // nanobind then reports them as leaks, a page of noise for a user who did nothing wrong.
  // Debug builds keep the report for work on the bindings.
  nb::set_leak_warnings(false);
#endif
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
  m.def("op_info", &op_info,
        "Every op in the engine's op table, in table order, as a dict: name, class (Elementwise, "
        "Reduction, Norm, View, DataMovement, Compute, Fused, Random), min_inputs, max_inputs (-1: variadic), "
        "num_outputs (-1: variable), attrs [{name, kind, required, default}], dtypes (input 0's; "
        "empty: any), inplace, alias, doc.");
  m.def("op_doc", [](const std::string& op) { return OpTable::get().at(op).doc; });
  m.def("preferred_channel_block", [] { return preferred_channel_block(); },
        "The conv activation layout the kernels prefer on this CPU (CHANNELS_LAST: AVX-512, 8: nChw8c with "
        "AVX2, 0: none).");
  m.attr("CHANNELS_LAST") = kChannelsLast;
  m.def(
      "bernoulli_fill",
      [](uintptr_t out, int64_t numel, double p, int64_t seed, int64_t stream) {
        UPDRAFT_CHECK(numel >= 0 && (out != 0 || numel == 0) && p >= 0.0 && p <= 1.0 && stream >= 0, "bindings",
                      "bernoulli_fill: needs a bool buffer of numel >= 0 elements, p in [0, 1], stream >= 0");
        nb::gil_scoped_release release;
        philox::bernoulli_fill(reinterpret_cast<bool*>(out), 0, numel, philox::bernoulli_threshold(p),
                               static_cast<uint64_t>(seed), static_cast<uint64_t>(stream));
      },
      nb::arg("out_ptr"), nb::arg("numel"), nb::arg("p"), nb::arg("seed"), nb::arg("stream"),
      "Fills `numel` contiguous bools at out_ptr as the engine's bernoulli op (p, stream) does under "
      "`seed`: the PyTorch side of a random op draws the engine's bits (python/updraft/random_ops.py).");
  // The float draws' fills, one binding each (uniform_fill, normal_fill); names and docs are
  // literals (nanobind keeps the pointers).
  using FloatFill = void (*)(float*, int64_t, int64_t, uint64_t, uint64_t);
  struct Fill {
    const char* name;
    const char* doc;
    FloatFill fill;
  };
  for (const Fill& f : {Fill{"uniform_fill",
                             "Fills `numel` contiguous float32s at out_ptr as the engine's uniform op (stream) does "
                             "under `seed`.",
                             philox::uniform_fill},
                        Fill{"normal_fill",
                             "Fills `numel` contiguous float32s at out_ptr as the engine's normal op (stream) does "
                             "under `seed`.",
                             philox::normal_fill}}) {
    m.def(
        f.name,
        [name = f.name, fill = f.fill](uintptr_t out, int64_t numel, int64_t seed, int64_t stream) {
          UPDRAFT_CHECK(numel >= 0 && (out != 0 || numel == 0) && stream >= 0, "bindings",
                        std::string(name) + ": needs a float32 buffer of numel >= 0 elements, stream >= 0");
          nb::gil_scoped_release release;
          fill(reinterpret_cast<float*>(out), 0, numel, static_cast<uint64_t>(seed), static_cast<uint64_t>(stream));
        },
        nb::arg("out_ptr"), nb::arg("numel"), nb::arg("seed"), nb::arg("stream"), f.doc);
  }
  m.def("has_cpu_kernel", [](const std::string& op) { return KernelRegistry::get().has(op, Device::cpu); });

  py::bind_graph(m);
  py::bind_runtime(m);
  py::bind_cache(m);
  py::bind_model(m);
  py::bind_debug(m);
}
