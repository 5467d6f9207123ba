// Compile-cache entries (src/cache/entry.h) for updraft/cache.py, which owns the files.
#include <nanobind/nanobind.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <chrono>

#include "cache/entry.h"
#include "convert.h"
#include "core/version.h"
#include "runtime/compiled_graph.h"

namespace updraft::py {

void bind_cache(nb::module_& m) {
  m.def("engine_version", [] { return std::string(kEngineVersion); });
  m.def("cpu_features", &cpu_features, "CPU features this process runs with (part of every cache key).");
  m.attr("ENTRY_FORMAT_VERSION") = kEntryFormatVersion;
  m.def(
      "save_entry",
      [](const CompiledGraph& cg, const std::string& key, const std::string& note) {
        std::string bytes = save_entry(cg.graph(), {key, note, "", ""});
        return nb::bytes(bytes.data(), bytes.size());
      },
      nb::arg("compiled"), nb::arg("key"), nb::arg("note") = "",
      "The compiled graph as a cache entry (docs/format.md): parameters by reference, folds as recipes.");
  m.def(
      "read_entry_meta",
      [](const nb::bytes& data) {
        EntryMeta meta = read_entry_meta(std::string(data.c_str(), data.size()));
        nb::dict d;
        d["key"] = meta.key;
        d["note"] = meta.note;
        d["engine"] = meta.engine;
        d["cpu"] = meta.cpu;
        return d;
      },
      nb::arg("data"), "Validates an entry's container and returns its metadata; raises UpdraftError.");
  m.def(
      "load_entry",
      [](const nb::bytes& data, const std::string& key, const std::vector<std::optional<AnyArray>>& params,
         const nb::dict& options) {
        CompileOptions opts = options_from(options);
        std::vector<std::optional<Tensor>> sources;
        for (const auto& p : params) sources.push_back(p ? std::optional<Tensor>(constant_from(*p)) : std::nullopt);
        std::string bytes(data.c_str(), data.size());
        nb::gil_scoped_release release;
        auto t0 = std::chrono::steady_clock::now();
        std::unique_ptr<Graph> g = load_entry(bytes, key, sources);
        double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
        return CompiledGraph::from_optimized(std::move(g), opts, ms);
      },
      nb::arg("data"), nb::arg("key"), nb::arg("params"), nb::arg("options") = nb::dict(),
      "A CompiledGraph from a cache entry; params[j] is the caller's parameter j (None where unused). "
      "Raises UpdraftError('[cache] ...') on a corrupt, truncated or mismatched entry.");
}

}  // namespace updraft::py
