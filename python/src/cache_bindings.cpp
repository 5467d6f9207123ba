// Compile-cache entries (src/cache/entry.h) for updraft/cache.py, which owns the files.
#include <nanobind/nanobind.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <charconv>
#include <chrono>
#include <cstdio>

#include "cache/entry.h"
#include "convert.h"
#include "core/error.h"
#include "core/hash.h"
#include "core/version.h"
#include "runtime/executable.h"

namespace updraft::py {

namespace {

// An engine Tensor over the memory of a contiguous CPU torch tensor: it shares the memory and
// keeps `owner` alive, like Graph.add_constant does.
Tensor tensor_over(void* ptr, DType dt, std::vector<int64_t> shape, nb::handle owner) {
  auto* keep = new nb::object(nb::borrow(owner));
  std::shared_ptr<void> storage(ptr, [keep](void*) {
    if (!Py_IsInitialized()) return;  // interpreter gone: leak rather than crash at exit
    nb::gil_scoped_acquire gil;
    delete keep;
  });
  return Tensor(dt, std::move(shape), std::move(storage));
}

// The caller's frozen parameters as an entry load takes them (EntryParams below), read from the
// torch tensors in one pass here rather than per parameter in Python (BERT-base: 200).
struct EntryParams {
  std::vector<std::optional<Tensor>> sources;  // by placeholder index; nullopt where none
  std::string text;   // one line per parameter, "J DTYPE D0,D1,...": the cache key's part for them
  size_t tensors = 0;  // parameters that are tensors
};

// An attribute or method name, interned once (the GIL guards the static).
PyObject* interned(PyObject*& slot, const char* name) {
  if (!slot) slot = PyUnicode_InternFromString(name);
  return slot;
}

nb::object steal_checked(PyObject* o) {
  if (!o) throw nb::python_error();
  return nb::steal(o);
}

// `args[j]` for each j in `positions` (the placeholders that are frozen parameters): its data
// pointer, dtype and shape when it is a tensor of an engine dtype (`dtypes`: torch dtype ->
// engine dtype name, updraft.lowerer.DTYPES), and a line for the key that says its dtype (the
// engine's name, or torch's for other dtypes) and shape. A non-contiguous CPU tensor is taken as
// `detach().contiguous()`, as Lowerer.constant binds it in a cold compile. A tensor on another
// device is described with its device (so its key is not a CPU compile's) and not bound: a cold
// compile of it falls back to PyTorch (Lowerer.constant), and a load never reads its memory.
EntryParams entry_params(const nb::sequence& args, const std::vector<int>& positions, const nb::dict& dtypes,
                         const nb::handle& tensor_type) {
  static PyObject *s_dtype, *s_shape, *s_is_cpu, *s_is_contiguous, *s_data_ptr, *s_detach, *s_contiguous, *s_device;
  EntryParams r;
  nb::object fast = steal_checked(PySequence_Fast(args.ptr(), "[updraft.cache] args is not a sequence"));
  const Py_ssize_t n = PySequence_Fast_GET_SIZE(fast.ptr());
  r.sources.resize(static_cast<size_t>(n));
  r.text.reserve(positions.size() * 24);
  // Engine dtypes by torch dtype object (a handful: a linear scan beats hashing).
  std::vector<std::pair<PyObject*, DType>> table;
  for (auto [k, v] : dtypes) table.emplace_back(k.ptr(), dtype_from_name(nb::cast<std::string>(v)));
  UPDRAFT_CHECK(PyType_Check(tensor_type.ptr()), "bindings", "tensor_type is not a type");
  auto* tensor_type_obj = reinterpret_cast<PyTypeObject*>(tensor_type.ptr());
  char num[24];
  auto append_int = [&](long long v) {
    auto [end, ec] = std::to_chars(num, num + sizeof num, v);
    r.text.append(num, static_cast<size_t>(end - num));
  };
  for (int j : positions) {
    UPDRAFT_CHECK(j >= 0 && j < n, "bindings", "parameter position " + std::to_string(j) + " is out of range");
    nb::handle a(PySequence_Fast_GET_ITEM(fast.ptr(), j));
    append_int(j);
    // A subtype check, not isinstance(): no metaclass __instancecheck__ call per parameter.
    if (!PyObject_TypeCheck(a.ptr(), tensor_type_obj)) {
      r.text += " other ";
      r.text += Py_TYPE(a.ptr())->tp_name;
      r.text += '\n';
      continue;
    }
    ++r.tensors;
    nb::object t = nb::borrow(a);
    nb::object cpu = steal_checked(PyObject_GetAttr(t.ptr(), interned(s_is_cpu, "is_cpu")));
    if (cpu.ptr() != Py_True) {
      nb::object device = steal_checked(PyObject_GetAttr(t.ptr(), interned(s_device, "device")));
      r.text += " device ";
      r.text += nb::cast<std::string>(nb::str(device));
      r.text += '\n';
      continue;
    }
    nb::object contig = steal_checked(PyObject_CallMethodNoArgs(t.ptr(), interned(s_is_contiguous, "is_contiguous")));
    if (contig.ptr() != Py_True) {
      nb::object d = steal_checked(PyObject_CallMethodNoArgs(t.ptr(), interned(s_detach, "detach")));
      t = steal_checked(PyObject_CallMethodNoArgs(d.ptr(), interned(s_contiguous, "contiguous")));
    }
    nb::object dt = steal_checked(PyObject_GetAttr(t.ptr(), interned(s_dtype, "dtype")));
    nb::object shape = steal_checked(PyObject_GetAttr(t.ptr(), interned(s_shape, "shape")));
    std::optional<DType> edt;
    for (const auto& [obj, e] : table)
      if (obj == dt.ptr()) edt = e;
    r.text += ' ';
    if (edt) r.text += dtype_name(*edt);
    else r.text += nb::cast<std::string>(nb::str(dt));
    r.text += ' ';
    nb::object sizes = steal_checked(PySequence_Fast(shape.ptr(), "[updraft.cache] a tensor's shape is not a sequence"));
    const Py_ssize_t rank = PySequence_Fast_GET_SIZE(sizes.ptr());
    std::vector<int64_t> dims(static_cast<size_t>(rank));
    for (Py_ssize_t d = 0; d < rank; ++d) {
      long long v = PyLong_AsLongLong(PySequence_Fast_GET_ITEM(sizes.ptr(), d));
      if (v == -1 && PyErr_Occurred()) throw nb::python_error();
      dims[static_cast<size_t>(d)] = v;
      if (d) r.text += ',';
      append_int(v);
    }
    r.text += '\n';
    if (!edt) continue;  // no engine dtype: a load that needs it fails and the entry is rebuilt
    nb::object ptr = steal_checked(PyObject_CallMethodNoArgs(t.ptr(), interned(s_data_ptr, "data_ptr")));
    void* p = PyLong_AsVoidPtr(ptr.ptr());
    if (!p && PyErr_Occurred()) throw nb::python_error();
    r.sources[static_cast<size_t>(j)] = tensor_over(p, *edt, std::move(dims), t);
  }
  return r;
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
  m.def(
      "text_digest",
      [](const nb::str& text) {
        Py_ssize_t n = 0;
        const char* utf8 = PyUnicode_AsUTF8AndSize(text.ptr(), &n);  // cached by the str: no copy
        if (!utf8) throw nb::python_error();
        char hex[17];
        std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(xxh3_64(utf8, static_cast<size_t>(n))));
        return std::string(hex, 16);
      },
      nb::arg("text"),
      "XXH3-64 of text's UTF-8 bytes, as 16 hex digits: how a cache key covers a partition's code (~50 KB "
      "for BERT-base, hashed at memory speed rather than sha256's ~1 GB/s).");
  m.attr("ENTRY_FORMAT_VERSION") = kEntryFormatVersion;
  m.def(
      "save_entry",
      [](const Executable& cg, const std::string& key, const std::string& note, size_t max_folded_bytes) {
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
  nb::class_<EntryParams>(m, "EntryParams",
                          "The frozen parameters of a partition as a cache-entry load takes them (entry_params).")
      .def_prop_ro("text", [](const EntryParams& p) { return p.text; },
                   "One line per parameter, 'J DTYPE D0,D1,...': its dtype and shape, for the cache key.")
      .def_prop_ro("tensors", [](const EntryParams& p) { return p.tensors; }, "How many parameters are tensors.");
  m.def("entry_params", &entry_params, nb::arg("args"), nb::arg("positions"), nb::arg("dtypes"),
        nb::arg("tensor_type"),
        "EntryParams of args[j] for j in positions (frozen parameters): data pointers, engine dtypes "
        "(dtypes: torch dtype -> engine name) and shapes, read in one pass; non-tensors and tensors of other "
        "dtypes are described in .text but not bound.");
  auto load = [](auto&& loader, const EntryParams& params, const nb::dict& options) {
    CompileOptions opts = options_from(options);
    const std::vector<std::optional<Tensor>>& sources = params.sources;
    LoadInfo info;
    std::shared_ptr<Executable> cg;
    {
      nb::gil_scoped_release release;
      auto t0 = std::chrono::steady_clock::now();
      std::unique_ptr<Graph> g = loader(sources, &info);
      double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      cg = Executable::from_optimized(std::move(g), opts, ms);
    }
    return std::make_pair(cg, info_dict(info));
  };
  m.def(
      "load_entry",
      [load](const nb::bytes& data, const std::string& key, const EntryParams& params, const nb::dict& options) {
        std::string bytes(data.c_str(), data.size());
        return load([&](const auto& sources, LoadInfo* info) { return load_entry(bytes, key, sources, info); },
                    params, options);
      },
      nb::arg("data"), nb::arg("key"), nb::arg("params"), nb::arg("options") = nb::dict(),
      "(Executable, info) from a cache entry; params: the caller's parameters (entry_params). info: folded (constants), mapped (stored folds used), verify_ms (checksum_ms and fingerprint_ms, on two threads for a large entry), replay_ms. "
      "Raises UpdraftError('[cache] ...') on a corrupt, truncated or mismatched entry.");
  m.def(
      "load_entry_file",
      [load](const std::string& path, const std::string& key, const EntryParams& params, const nb::dict& options) {
        return load([&](const auto& sources, LoadInfo* info) { return load_entry_file(path, key, sources, info); },
                    params, options);
      },
      nb::arg("path"), nb::arg("key"), nb::arg("params"), nb::arg("options") = nb::dict(),
      "load_entry from a file: read into private memory once it passes the trust checks (a regular file, not a "
      "link, owned by this user, writable by no one else: docs/format.md); raises UpdraftError otherwise.");
}

}  // namespace updraft::py
