// Compile-cache entries (src/cache/entry.h) for updraft/cache.py, which owns the files.
#include <nanobind/nanobind.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <chrono>

#include "cache/entry.h"
#include "convert.h"
#include "core/error.h"
#include "core/version.h"
#include "runtime/compiled_graph.h"

namespace updraft::py {

namespace {

// params[j]: None, or (data pointer, dtype name, shape, owner) of the caller's contiguous CPU
// parameter j. The pointer form skips DLPack, which would need a detach() per parameter (a
// dispatched torch op, ~20 us each under the dispatch modes active during a first call); the
// tensor shares the owner's memory and keeps it alive, like Graph.add_constant does.
std::vector<std::optional<Tensor>> sources_from(const nb::list& params) {
  std::vector<std::optional<Tensor>> sources;
  sources.reserve(params.size());
  for (nb::handle p : params) {
    if (p.is_none()) {
      sources.push_back(std::nullopt);
      continue;
    }
    nb::tuple t = nb::cast<nb::tuple>(p);
    UPDRAFT_CHECK(t.size() == 4, "bindings", "a parameter is (data_ptr, dtype, shape, owner)");
    auto ptr = reinterpret_cast<void*>(nb::cast<uintptr_t>(t[0]));
    DType dt = dtype_from_name(nb::cast<std::string>(t[1]));
    std::vector<int64_t> shape = nb::cast<std::vector<int64_t>>(t[2]);
    auto* keep = new nb::object(nb::borrow(t[3]));
    std::shared_ptr<void> storage(ptr, [keep](void*) {
      if (!Py_IsInitialized()) return;  // interpreter gone: leak rather than crash at exit
      nb::gil_scoped_acquire gil;
      delete keep;
    });
    sources.push_back(Tensor(dt, std::move(shape), std::move(storage)));
  }
  return sources;
}

nb::dict info_dict(const LoadInfo& li) {
  nb::dict d;
  d["folded"] = li.folded;
  d["mapped"] = li.mapped;
  d["verify_ms"] = li.verify_ms;
  d["checksum_ms"] = li.checksum_ms;
  d["fingerprint_ms"] = li.fingerprint_ms;
  d["replay_ms"] = li.replay_ms;
  return d;
}

}  // namespace

void bind_cache(nb::module_& m) {
  m.def("engine_version", [] { return std::string(kEngineVersion); });
  m.def("cpu_features", &cpu_features, "CPU features this process runs with (part of every cache key).");
  m.attr("ENTRY_FORMAT_VERSION") = kEntryFormatVersion;
  m.def(
      "save_entry",
      [](const CompiledGraph& cg, const std::string& key, const std::string& note, size_t max_folded_bytes) {
        SaveOptions opts;
        opts.max_folded_bytes = max_folded_bytes;
        std::string bytes;
        {
          nb::gil_scoped_release release;  // hashing and copying ~100 MB for a ResNet-50
          bytes = save_entry(cg.graph(), {key, note, "", ""}, opts);
        }
        return nb::bytes(bytes.data(), bytes.size());
      },
      nb::arg("compiled"), nb::arg("key"), nb::arg("note") = "", nb::arg("max_folded_bytes") = SaveOptions{}.max_folded_bytes,
      "The compiled graph as a cache entry (docs/format.md): parameters by reference, folds as recipes, and "
      "the folded values too when they total at most max_folded_bytes.");
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
  auto load = [](auto&& loader, const nb::list& params, const nb::dict& options) {
    CompileOptions opts = options_from(options);
    std::vector<std::optional<Tensor>> sources = sources_from(params);
    LoadInfo info;
    std::shared_ptr<CompiledGraph> cg;
    {
      nb::gil_scoped_release release;
      auto t0 = std::chrono::steady_clock::now();
      std::unique_ptr<Graph> g = loader(sources, &info);
      double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      cg = CompiledGraph::from_optimized(std::move(g), opts, ms);
    }
    return std::make_pair(cg, info_dict(info));
  };
  m.def(
      "load_entry",
      [load](const nb::bytes& data, const std::string& key, const nb::list& params, const nb::dict& options) {
        std::string bytes(data.c_str(), data.size());
        return load([&](const auto& sources, LoadInfo* info) { return load_entry(bytes, key, sources, info); },
                    params, options);
      },
      nb::arg("data"), nb::arg("key"), nb::arg("params"), nb::arg("options") = nb::dict(),
      "(CompiledGraph, info) from a cache entry; params[j] is None or (data_ptr, dtype, shape, owner) of the "
      "caller's parameter j. info: folded (constants), mapped (stored folds used), verify_ms (checksum_ms and fingerprint_ms, on two threads for a large entry), replay_ms. "
      "Raises UpdraftError('[cache] ...') on a corrupt, truncated or mismatched entry.");
  m.def(
      "load_entry_file",
      [load](const std::string& path, const std::string& key, const nb::list& params, const nb::dict& options) {
        return load([&](const auto& sources, LoadInfo* info) { return load_entry_file(path, key, sources, info); },
                    params, options);
      },
      nb::arg("path"), nb::arg("key"), nb::arg("params"), nb::arg("options") = nb::dict(),
      "load_entry from a file, mapped rather than read.");
}

}  // namespace updraft::py
