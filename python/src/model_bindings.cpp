// Compiled model files (src/model/model_file.h) for updraft.export and updraft.load.
#include <nanobind/nanobind.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include "convert.h"
#include "model/model_file.h"
#include "runtime/executable.h"

namespace updraft::py {

namespace {

nb::list io_list(const std::vector<ModelIO>& ios) {
  nb::list out;
  for (const ModelIO& io : ios) {
    nb::dict d;
    d["name"] = io.name;
    d["dtype"] = dtype_name(io.type.dtype);
    nb::list dims;
    for (const Dim& dim : io.type.shape) {
      if (dim.is_static()) dims.append(dim.value());
      else dims.append(dim.str());
    }
    d["shape"] = dims;
    d["binds"] = io.binds;  // a size input's symbol; "" for tensors
    out.append(d);
  }
  return out;
}

nb::dict signature_dict(const ModelSignature& sig) {
  nb::dict d;
  d["inputs"] = io_list(sig.inputs);
  d["outputs"] = io_list(sig.outputs);
  nb::dict ranges;
  for (const SymbolRange& r : sig.ranges) ranges[nb::str(r.symbol.c_str())] = nb::make_tuple(r.min, r.max);
  d["ranges"] = ranges;
  d["text"] = sig.str();
  return d;
}

}  // namespace

void bind_model(nb::module_& m) {
  m.attr("MODEL_FORMAT_VERSION") = kModelFormatVersion;
  nb::class_<ModelSignature>(m, "ModelSignature", "A model file's inputs, outputs and symbol ranges.")
      .def("to_dict", &signature_dict,
           "inputs/outputs as [{name, dtype, shape (ints and symbol strings), binds}], ranges {symbol: (min, max)}, "
           "text.")
      .def("check_shapes", &ModelSignature::check_shapes, nb::arg("shapes"),
           "Raises UpdraftError('[model] ...') when these input shapes (a size input as [value]) do not fit: "
           "count, rank, static sizes, one value per symbol, each symbol's range.")
      .def("__str__", &ModelSignature::str);
  m.def(
      "save_model",
      [](const Executable& cg, const std::vector<std::string>& output_names,
         const std::vector<std::tuple<std::string, int64_t, int64_t>>& ranges, const std::string& note) {
        ModelMeta meta;
        meta.note = note;
        meta.output_names = output_names;
        for (const auto& [sym, lo, hi] : ranges) meta.ranges.push_back({sym, lo, hi});
        std::string bytes;
        {
          nb::gil_scoped_release release;  // copying ~0.5 GB of BERT-base weights
          bytes = save_model(cg.graph(), meta);
        }
        return nb::bytes(bytes.data(), bytes.size());
      },
      nb::arg("compiled"), nb::arg("output_names") = std::vector<std::string>(),
      nb::arg("ranges") = std::vector<std::tuple<std::string, int64_t, int64_t>>(), nb::arg("note") = "",
      "The compiled graph as a model file (docs/format.md): every constant stored by value, with the "
      "signature (output names; ranges: (symbol, min, max)). Raises UpdraftError('[model] ...').");
  m.def(
      "load_model",
      [](const std::string& path, const nb::dict& options, bool map) {
        CompileOptions opts = options_from(options);
        LoadedModel lm;
        std::shared_ptr<Executable> cg;
        {
          nb::gil_scoped_release release;
          lm = load_model_file(path, map);
          cg = Executable::from_optimized(std::move(lm.graph), opts, lm.load_ms);
        }
        nb::dict info;
        info["note"] = lm.meta.note;
        info["engine"] = lm.meta.engine;
        info["requires_cpu"] = lm.meta.requires_cpu;
        info["file_bytes"] = lm.file_bytes;
        info["constant_bytes"] = lm.constant_bytes;
        info["mapped"] = lm.mapped;
        info["load_ms"] = lm.load_ms;
        info["verify_ms"] = lm.verify_ms;
        return std::make_tuple(cg, lm.signature, info);
      },
      nb::arg("path"), nb::arg("options") = nb::dict(), nb::arg("map") = true,
      "(Executable, signature, info) from a model file; map=True maps it (weights used in place, pages "
      "shared between processes). signature: a ModelSignature. Raises UpdraftError('[model] ...').");
}

}  // namespace updraft::py
