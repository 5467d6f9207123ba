#include <nanobind/nanobind.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <set>
#include <nanobind/stl/map.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include "convert.h"
#include "core/error.h"
#include "graph_handle.h"
#include "ir/text.h"
#include "kernels/onednn/packed_weights.h"
#include "passes/pipeline.h"
#include "runtime/executable.h"
#include "runtime/plan.h"
#include "runtime/watchdog.h"

#include <sys/syscall.h>
#include <unistd.h>

namespace updraft::py {

std::string graph_text(const Graph& g, bool origins) {
  PrintOptions opts;
  opts.origins = origins;
  return print_graph(g, opts);
}

// Every key updraft._C.compile accepts and where it goes: one table, so the error for an
// unknown key lists exactly the keys that work.
using OptionSetter = void (*)(CompileOptions&, nb::handle);
static const std::vector<std::pair<const char*, OptionSetter>>& option_setters() {
  static const std::vector<std::pair<const char*, OptionSetter>> table = {
      {"fold_constants", [](CompileOptions& o, nb::handle v) { o.fold_constants = nb::cast<bool>(v); }},
      {"fuse", [](CompileOptions& o, nb::handle v) { o.fuse = nb::cast<bool>(v); }},
      {"num_threads", [](CompileOptions& o, nb::handle v) { o.num_threads = nb::cast<int>(v); }},
      {"debug", [](CompileOptions& o, nb::handle v) { o.debug = nb::cast<int>(v); }},
      {"plan_cache_size", [](CompileOptions& o, nb::handle v) { o.plan_cache_size = nb::cast<size_t>(v); }},
      {"range_plans", [](CompileOptions& o, nb::handle v) { o.range_plans = nb::cast<bool>(v); }},
      {"channel_block", [](CompileOptions& o, nb::handle v) { o.channel_block = nb::cast<int>(v); }},
      {"weight_dtype",
       [](CompileOptions& o, nb::handle v) { o.weight_dtype = weight_dtype_from_name(nb::cast<std::string>(v)); }},
      {"activation_dtype",
       [](CompileOptions& o, nb::handle v) {
         o.activation_dtype = activation_dtype_from_name(nb::cast<std::string>(v));
       }},
      // The kernel knobs (kernels/kernel_options.h); updraft.CompilerConfig validated them.
      {"prepack_weights", [](CompileOptions& o, nb::handle v) { o.kernels.prepack_weights = nb::cast<bool>(v); }},
      {"static_gemm", [](CompileOptions& o, nb::handle v) { o.kernels.static_gemm = nb::cast<bool>(v); }},
      {"cpu_isa",
       [](CompileOptions& o, nb::handle v) { o.kernels.cpu_isa = cpu_isa_from_name(nb::cast<std::string>(v)); }},
      {"min_work_per_thread",
       [](CompileOptions& o, nb::handle v) { o.kernels.min_work_per_thread = nb::cast<double>(v); }},
      // The bisect switches (passes/options.h); run_pipeline checks the pass names.
      {"disable_passes",
       [](CompileOptions& o, nb::handle v) { o.disable_passes = nb::cast<std::vector<std::string>>(v); }},
      {"fault_pass", [](CompileOptions& o, nb::handle v) { o.fault_pass = nb::cast<std::string>(v); }},
      {"fault_op", [](CompileOptions& o, nb::handle v) { o.kernels.fault_op = nb::cast<std::string>(v); }},
      // Graph dumps (updraft/debug/dump.py) and the watchdog (validated by CompilerConfig).
      {"record_ir", [](CompileOptions& o, nb::handle v) { o.record_ir = nb::cast<bool>(v); }},
      {"watchdog_s", [](CompileOptions& o, nb::handle v) { o.watchdog_s = nb::cast<double>(v); }},
      {"keep_arenas", [](CompileOptions& o, nb::handle v) { o.keep_arenas = nb::cast<bool>(v); }},
  };
  return table;
}

CompileOptions options_from(const nb::dict& d) {
  CompileOptions o;
  const auto& table = option_setters();
  for (auto [k, v] : d) {
    const std::string key = nb::cast<std::string>(k);
    auto it = std::find_if(table.begin(), table.end(), [&](const auto& e) { return key == e.first; });
    if (it == table.end()) {
      std::string known;
      for (const auto& e : table) known += (known.empty() ? "" : ", ") + std::string(e.first);
      throw Error("bindings", "unknown compile option '" + key + "' (known: " + known + ")");
    }
    it->second(o, v);
  }
  return o;
}

// A torch tensor over an engine Tensor's memory (no copy); the capsule keeps the storage alive.
static nb::object torch_view(const Tensor& t) {
  using C = nb::dlpack::dtype_code;
  auto code = [](C c, int bits) { return nb::dlpack::dtype{static_cast<uint8_t>(c), static_cast<uint8_t>(bits), 1}; };
  nb::dlpack::dtype dt;
  switch (t.dtype()) {
    case DType::f32: dt = code(C::Float, 32); break;
    case DType::f64: dt = code(C::Float, 64); break;
    case DType::f16: dt = code(C::Float, 16); break;
    case DType::bf16: dt = code(C::Bfloat, 16); break;
    case DType::i64: dt = code(C::Int, 64); break;
    case DType::i32: dt = code(C::Int, 32); break;
    case DType::i16: dt = code(C::Int, 16); break;
    case DType::i8: dt = code(C::Int, 8); break;
    case DType::u8: dt = code(C::UInt, 8); break;
    case DType::boolean: dt = code(C::Bool, 8); break;
  }
  std::vector<size_t> shape(t.shape().begin(), t.shape().end());
  nb::capsule owner(new Tensor(t), [](void* p) noexcept { delete static_cast<Tensor*>(p); });
  nb::ndarray<nb::pytorch, nb::device::cpu> arr(t.data(), shape.size(), shape.data(), owner, nullptr, dt);
  return nb::cast(arr, nb::rv_policy::reference);
}

static std::vector<TensorView> views_of(const std::vector<AnyArray>& arrays) {
  std::vector<TensorView> v;
  v.reserve(arrays.size());
  for (const AnyArray& a : arrays) v.push_back(view_of(a));
  return v;
}

// A plan bound to one input-shape signature, run with raw data pointers: the Python fast path
// (EnginePartition), which skips DLPack capsules and the plan lookup. The caller vouches for
// what DLPack would have said: each input is a contiguous CPU tensor with this plan's input
// shape and the graph's input dtype, each output a contiguous CPU tensor of output_shapes /
// the graph's output dtypes. Shapes, dtypes and strides of the views are taken from the plan,
// and Executable::run_plan still validates them.
struct PlannedCall {
  std::shared_ptr<Executable> cg;
  std::shared_ptr<const Plan> plan;
  std::vector<TensorView> ins, outs;  // templates: everything but the data pointers
  // Size inputs read their value from the plan's signature (the plan lives as long as this
  // call), so the caller passes any pointer for them (0 from Python).
  std::vector<size_t> size_inputs;

  PlannedCall(std::shared_ptr<Executable> g, const std::vector<std::vector<int64_t>>& shapes) : cg(std::move(g)) {
    {
      nb::gil_scoped_release release;  // a first call with these shapes builds the plan
      plan = cg->plan(shapes);
    }
    const auto& gin = cg->graph().inputs();
    for (size_t k = 0; k < shapes.size() && k < gin.size(); ++k) {
      bool size_input = !gin[k]->binds.empty();
      ins.push_back(contiguous(size_input ? std::vector<int64_t>{} : shapes[k], gin[k]->type.dtype));
      if (size_input) size_inputs.push_back(k);
    }
    std::vector<DType> odt = cg->output_dtypes();
    for (size_t k = 0; k < plan->output_shapes().size(); ++k) outs.push_back(contiguous(plan->output_shapes()[k], odt[k]));
  }

  static TensorView contiguous(const std::vector<int64_t>& shape, DType dt) {
    UPDRAFT_CHECK(shape.size() <= static_cast<size_t>(kMaxDims), "bindings", "tensor rank exceeds the engine limit of 8");
    TensorView v;
    v.dtype = dt;
    v.ndim = static_cast<int>(shape.size());
    int64_t acc = 1;
    for (int i = v.ndim - 1; i >= 0; --i) {
      v.sizes[i] = shape[i];
      v.strides[i] = acc;
      acc *= shape[i];
    }
    return v;
  }

  // `strides`: [(input index, its strides in elements)] for inputs that are strided views of
  // their memory (a saved activation that is a transpose); the plan packs them before its
  // first step, as it does on the general path.
  void run(const std::vector<uintptr_t>& in_ptrs, const std::vector<uintptr_t>& out_ptrs,
           const std::vector<std::pair<size_t, std::vector<int64_t>>>& strides) const {
    UPDRAFT_CHECK(out_ptrs.size() == outs.size(), "bindings",
                  "PlannedCall.run: expected " + std::to_string(outs.size()) + " output pointers, got " +
                      std::to_string(out_ptrs.size()));
    std::vector<TensorView> in = inputs(in_ptrs, strides), out = outs;  // per call: callers share this object
    for (size_t k = 0; k < out.size(); ++k) out[k].data = reinterpret_cast<void*>(out_ptrs[k]);
    nb::gil_scoped_release release;
    cg->run_plan(*plan, in, out);
  }

  // A call that frees as it goes (engine_partition.py, run_boxed: a training backward, whose
  // saved activations eager autograd frees after their nodes and whose gradients it allocates
  // as it reaches them). `owners` is a list of the input tensors, in input order: each entry
  // is dropped (set to None) after the input's last reader, so a tensor held by nothing else
  // is freed while the rest of the plan runs; after an error the None entries say which were
  // (the caller cannot run the call again in PyTorch once one is). Output k is asked of
  // `make_output(k)` (a contiguous torch tensor of its shape and dtype) just before its first
  // writer, so torch allocates it where the freed inputs left room (OutputSource); the outputs
  // are returned. The GIL is taken only at the steps that drop or allocate something. The
  // plan knows each input's last step (Plan::input_last_steps); this call sorts them by step.
  nb::list run_releasing(const std::vector<uintptr_t>& in_ptrs, nb::list owners,
                         const std::vector<std::pair<size_t, std::vector<int64_t>>>& strides,
                         nb::callable make_output) const {
    std::vector<TensorView> in = inputs(in_ptrs, strides), out = outs;
    for (TensorView& o : out) o.data = nullptr;
    std::vector<std::vector<int>> by_step(plan->steps().size() + 1);
    const std::vector<int>& last = plan->input_last_steps();
    for (size_t k = 0; k < last.size(); ++k)
      if (std::find(size_inputs.begin(), size_inputs.end(), k) == size_inputs.end())
        by_step[std::max(last[k], 0)].push_back(static_cast<int>(k));  // unread: after step 0
    ReleaseInputs drop(owners, by_step);
    TorchOutputs made(std::move(make_output), out.size());
    {
      nb::gil_scoped_release release;
      cg->run_plan(*plan, in, out, &drop, &made);
    }
    nb::list r;
    for (nb::object& t : made.tensors) r.append(t);
    return r;
  }

  std::vector<TensorView> inputs(const std::vector<uintptr_t>& in_ptrs,
                                 const std::vector<std::pair<size_t, std::vector<int64_t>>>& strides) const {
    UPDRAFT_CHECK(in_ptrs.size() == ins.size(), "bindings",
                  "PlannedCall.run: expected " + std::to_string(ins.size()) + " input pointers, got " +
                      std::to_string(in_ptrs.size()));
    std::vector<TensorView> in = ins;
    for (size_t k = 0; k < in.size(); ++k) in[k].data = reinterpret_cast<void*>(in_ptrs[k]);
    for (size_t k : size_inputs) in[k].data = const_cast<int64_t*>(plan->input_shapes()[k].data());
    for (const auto& [k, st] : strides) {
      UPDRAFT_CHECK(k < in.size() && static_cast<int>(st.size()) == in[k].ndim, "bindings",
                    "PlannedCall.run: strides for input " + std::to_string(k) + " do not match its rank");
      for (int d = 0; d < in[k].ndim; ++d) {
        UPDRAFT_CHECK(st[d] >= 0, "bindings", "PlannedCall.run: negative stride for input " + std::to_string(k));
        in[k].strides[d] = st[d];
      }
    }
    return in;
  }

  // Drops owners[k] after input k's last reader (the StepObserver hook runs on the calling thread).
  struct ReleaseInputs : StepObserver {
    nb::list owners;
    const std::vector<std::vector<int>>& by_step;
    ReleaseInputs(nb::list o, const std::vector<std::vector<int>>& b) : owners(std::move(o)), by_step(b) {}
    void after(const Plan&, const StepEvent& ev) override {
      const std::vector<int>& ks = by_step[ev.index];
      if (ks.empty()) return;
      nb::gil_scoped_acquire gil;
      for (int k : ks)
        if (static_cast<size_t>(k) < owners.size()) owners[k] = nb::none();
    }
  };

  // Output memory from torch as the plan reaches each output (DESIGN.md: torch allocates what
  // the user holds), checked to be contiguous and large enough.
  struct TorchOutputs : OutputSource {
    nb::callable make;
    std::vector<nb::object> tensors;
    TorchOutputs(nb::callable m, size_t n) : make(std::move(m)), tensors(n) {}
    void* output(size_t k, size_t bytes) override {
      nb::gil_scoped_acquire gil;
      nb::object t = make(k);
      UPDRAFT_CHECK(nb::cast<bool>(t.attr("is_contiguous")()) && nb::cast<size_t>(t.attr("nbytes")) >= bytes,
                    "bindings", "PlannedCall.run_releasing: make_output(" + std::to_string(k) +
                                    ") must return a contiguous tensor of at least " + std::to_string(bytes) + " bytes");
      void* p = reinterpret_cast<void*>(nb::cast<uintptr_t>(t.attr("data_ptr")()));
      tensors[k] = std::move(t);
      return p;
    }
  };
};

// A StepObserver for Python (updraft/profiler.py): per step of an Executable.run it records
// op, kernel, output types, thread and times (`record`), and/or opens a range through two
// Python callables, `enter(name, None) -> handle` before the step and `exit(handle)` after it
// (torch.ops.profiler._record_function_enter_new / _record_function_exit: real torch.profiler
// ranges, on the calling thread, so they nest in the caller's). Ranges take the GIL per step;
// recording does not. A step that throws leaves its range open: close() exits what is open.
struct PyStepObserver : StepObserver {
  struct Record {
    int index;
    std::string op, kernel;
    std::vector<std::string> outputs;  // "f32[4, 64]"
    long tid;
    int64_t start_ns, end_ns;
  };
  bool record = false;
  nb::object enter, exit;  // None: no ranges
  std::vector<Record> records;
  std::vector<nb::object> open;  // entered, not exited (touched with the GIL only)

  void before(const Plan&, const StepEvent& ev) override {
    if (enter.is_none()) return;
    std::string name = "updraft::" + ev.op() + " [" + ev.kernel() + "]";
    nb::gil_scoped_acquire gil;
    open.push_back(enter(name, nb::none()));
  }

  void after(const Plan&, const StepEvent& ev) override {
    if (!enter.is_none()) {
      nb::gil_scoped_acquire gil;
      nb::object handle = std::move(open.back());
      open.pop_back();
      exit(handle);
    }
    if (record) {
      Record r{static_cast<int>(ev.index), ev.op(), ev.kernel(), {}, static_cast<long>(::syscall(SYS_gettid)),
               ev.start_ns, ev.end_ns};
      for (size_t k = 0; k < ev.num_out; ++k) {
        const TensorView& v = ev.out[k];
        std::string t = std::string(dtype_name(v.dtype)) + "[";
        for (int d = 0; d < v.ndim; ++d) t += (d ? ", " : "") + std::to_string(v.sizes[d]);
        r.outputs.push_back(t + "]");
      }
      records.push_back(std::move(r));
    }
  }

  void close() {
    while (!open.empty()) {
      nb::object handle = std::move(open.back());
      open.pop_back();
      exit(handle);
    }
  }
};

// Whether every (i, t, v) of `bound` still holds for `args`: args[i] is t and t._version == v.
// The per-call check of a graph's frozen parameters (backend.PartitionedGraph): the same test
// as a Python generator, without one interpreted iteration per parameter (97 us for
// MobileNetV2's 261 parameters at each call, docs/BENCHMARKS.md "The frozen-parameter check").
// An entry (i, t, v, snapshot, snapshot's data_ptr, nbytes) also needs t's first nbytes bytes
// equal to the snapshot's (a contiguous copy of t taken when the set was bound; the entry holds
// it, so its pointer stays valid): for tensors that kernels write in place without bumping their
// version (batch norm's running statistics under a train-mode forward, backend.py
// `_running_stats_inputs`). t's own pointer is read at each call (its storage may have been
// replaced); its size cannot differ from the snapshot's without its shape, which Dynamo guards.
bool frozen_unchanged(nb::handle args, nb::handle bound) {
  static PyObject* const version = PyUnicode_InternFromString("_version");
  static PyObject* const data_ptr = PyUnicode_InternFromString("data_ptr");
  PyObject* a = args.ptr();
  PyObject* b = bound.ptr();
  UPDRAFT_CHECK(PyList_Check(b) && (PyList_Check(a) || PyTuple_Check(a)), "bindings",
                "frozen_unchanged takes the call's arguments (a list or tuple) and a list of (index, tensor, version)");
  const Py_ssize_t na = PySequence_Fast_GET_SIZE(a);
  PyObject** items = PySequence_Fast_ITEMS(a);
  for (Py_ssize_t k = 0, n = PyList_GET_SIZE(b); k < n; ++k) {
    PyObject* e = PyList_GET_ITEM(b, k);
    UPDRAFT_CHECK(PyTuple_Check(e) && (PyTuple_GET_SIZE(e) == 3 || PyTuple_GET_SIZE(e) == 6), "bindings",
                  "frozen_unchanged: an entry is not (index, tensor, version[, snapshot, its data_ptr, nbytes])");
    const Py_ssize_t i = PyLong_AsSsize_t(PyTuple_GET_ITEM(e, 0));
    if (i < 0 || i >= na) {
      if (PyErr_Occurred()) throw nb::python_error();
      return false;  // fewer arguments than the set was built with: not the same call
    }
    PyObject* t = PyTuple_GET_ITEM(e, 1);
    if (items[i] != t) return false;
    PyObject* cur = PyObject_GetAttr(t, version);
    if (!cur) throw nb::python_error();
    const int same = PyObject_RichCompareBool(cur, PyTuple_GET_ITEM(e, 2), Py_EQ);
    Py_DECREF(cur);
    if (same < 0) throw nb::python_error();
    if (!same) return false;
    if (PyTuple_GET_SIZE(e) == 6) {
      PyObject* p = PyObject_CallMethodNoArgs(t, data_ptr);
      if (!p) throw nb::python_error();
      const void* now = PyLong_AsVoidPtr(p);
      Py_DECREF(p);
      const void* then = PyLong_AsVoidPtr(PyTuple_GET_ITEM(e, 4));
      const Py_ssize_t bytes = PyLong_AsSsize_t(PyTuple_GET_ITEM(e, 5));
      if (PyErr_Occurred()) throw nb::python_error();
      if (bytes > 0 && std::memcmp(now, then, static_cast<size_t>(bytes)) != 0) return false;
    }
  }
  return true;
}

void bind_runtime(nb::module_& m) {
  // A hang is not an input error: Python tells it apart by type (engine_partition.py).
  static nb::exception<WatchdogTimeout> watchdog_exc(m, "WatchdogTimeout", m.attr("UpdraftError"));
  m.def("frozen_unchanged", &frozen_unchanged, nb::arg("args"), nb::arg("bound"),
        "Whether args[i] is t and t._version == v for every (i, t, v) in bound (a list); an entry "
        "(i, t, v, snapshot, snapshot.data_ptr(), nbytes) also needs t's bytes equal to the snapshot's.");
  m.def("clock_ns", &runtime_clock_ns,
        "The engine's step clock in ns (steady_clock: CLOCK_MONOTONIC, as time.monotonic_ns).");

  nb::class_<PyStepObserver>(m, "StepObserver")
      .def(
          "__init__",
          [](PyStepObserver* self, bool record, nb::object enter, nb::object exit) {
            new (self) PyStepObserver();
            UPDRAFT_CHECK(enter.is_none() == exit.is_none(), "bindings",
                          "StepObserver: pass both enter and exit, or neither");
            self->record = record;
            self->enter = std::move(enter);
            self->exit = std::move(exit);
          },
          nb::arg("record") = false, nb::arg("enter").none() = nb::none(), nb::arg("exit").none() = nb::none())
      .def("close", &PyStepObserver::close, "Exits the ranges a failed step left open.")
      .def(
          "records",
          [](const PyStepObserver& o) {
            nb::list r;
            for (const auto& e : o.records)
              r.append(nb::make_tuple(e.index, e.op, e.kernel, e.outputs, e.tid, e.start_ns, e.end_ns));
            return r;
          },
          "[(step, op, kernel, [output types], thread id, start ns, end ns)] of the steps seen, in order.");

  nb::class_<PlannedCall>(m, "PlannedCall")
      .def("run", &PlannedCall::run, nb::arg("input_ptrs"), nb::arg("output_ptrs"),
           nb::arg("strides") = std::vector<std::pair<size_t, std::vector<int64_t>>>{},
           "Runs the plan on raw data pointers (see runtime_bindings.cpp for the contract).")
      .def("run_releasing", &PlannedCall::run_releasing, nb::arg("input_ptrs"), nb::arg("owners"),
           nb::arg("strides"), nb::arg("make_output"),
           "Runs the plan, dropping each entry of `owners` (the input tensors) after its last reader; output k "
           "is make_output(k), asked for just before its first writer. Returns the outputs.")
      .def_prop_ro("output_shapes", [](const PlannedCall& p) { return p.plan->output_shapes(); });

  using CG = Executable;
  nb::class_<CG>(m, "Executable")
      .def("prepare", &CG::prepare, nb::arg("input_shapes"), nb::call_guard<nb::gil_scoped_release>(),
           "Output shapes for these input shapes; builds and caches the plan.")
      .def("run",
           [](CG& cg, const std::vector<AnyArray>& inputs, const std::vector<AnyArray>& outputs,
              PyStepObserver* observer) {
             // The arrays (and so the tensors' memory) stay referenced by `inputs`/`outputs`
             // for the whole call; the engine needs no GIL while it runs.
             std::vector<TensorView> in = views_of(inputs), out = views_of(outputs);
             nb::gil_scoped_release release;
             cg.run(in, out, observer);
           },
           nb::arg("inputs"), nb::arg("outputs"), nb::arg("observer").none() = nb::none(),
           "Runs the graph; an optional StepObserver sees every step of this call.")
      .def("planned",
           [](std::shared_ptr<Executable> cg, const std::vector<std::vector<int64_t>>& shapes) {
             return PlannedCall(std::move(cg), shapes);
           },
           nb::arg("input_shapes"),
           "A PlannedCall for these input shapes: the plan looked up (or built) once, run by pointers.")
      .def("output_dtypes",
           [](const CG& cg) {
             std::vector<std::string> r;
             for (DType t : cg.output_dtypes()) r.push_back(dtype_name(t));
             return r;
           })
      .def("graph_text", [](const CG& cg, bool origins) { return graph_text(cg.graph(), origins); },
           nb::arg("origins") = false, "The optimised graph as text IR; origins: provenance comments.")
      .def("outline", [](const CG& cg) { return graph_outline(cg.graph()); },
           "The optimised graph's inputs, constants, nodes and outputs (graph_handle.h, graph_outline).")
      .def("nodes", [](const CG& cg) { return node_rows(cg.graph()); },
           "The optimised graph's nodes with their provenance (graph_handle.h, node_rows).")
      .def("pass_log",
           [](const CG& cg) {
             std::vector<std::tuple<std::string, bool, double, std::string>> r;
             for (const PassRecord& p : cg.pass_log()) r.emplace_back(p.name, p.changed, p.ms, p.ir_after);
             return r;
           })
      .def("skipped_passes",
           [](const CG& cg) {
             std::vector<std::string> r;
             for (const PassRecord& p : cg.pass_log())
               if (p.skipped && std::find(r.begin(), r.end(), p.name) == r.end()) r.push_back(p.name);
             return r;
           },
           "Passes CompileOptions.disable_passes skipped in this compile.")
      .def("low_precision_weights",
           [](const CG& cg) {
             // Constant linear weights linear_wq reads low-precision: stored so by quantize_weights
             // (CompilerConfig.weight_dtype) or by the model itself (updraft.quantize_weights). Per weight dtype, (count, bytes stored with their scales, bytes they had as f32).
             std::map<std::string, std::tuple<int64_t, int64_t, int64_t>> r;
             std::set<const Value*> seen;
             for (const Node* n : cg.graph().nodes()) {
               if (n->op_name() != "linear_wq" || !n->input(1)->is_constant() || !seen.insert(n->input(1)).second)
                 continue;
               const Tensor& w = *n->input(1)->constant;
               const bool int4 = w.dtype() == DType::u8;  // two values per byte (quantize_int4)
               auto& [count, bytes, f32_bytes] = r[int4 ? "i4" : dtype_name(w.dtype())];
               count += 1;
               bytes += static_cast<int64_t>(w.nbytes());
               if (n->attr("has_weight_scale").b() && n->input(2)->is_constant())
                 bytes += static_cast<int64_t>(n->input(2)->constant->nbytes());
               f32_bytes += w.numel() * (int4 ? 8 : 4);
             }
             return r;
           },
           "{weight dtype: (count, bytes stored incl. scales, bytes as f32)} of the linear weights stored "
           "low-precision (CompilerConfig.weight_dtype, or the model's own int8/bf16 weights).")
      .def("int8_activation_linears",
           [](const CG& cg) {
             int64_t count = 0;
             for (const Node* n : cg.graph().nodes())
               count += n->op_name() == "linear_wq" && n->attr("quantize_x").b();
             return count;
           },
           "How many linear_wq nodes quantise their x to int8 at every call (CompilerConfig.activation_dtype).")
      .def("ir_constants",
           [](const CG& cg) {
             nb::dict r;
             for (const PassRecord& p : cg.pass_log())
               for (const auto& [ref, t] : p.externs)
                 if (!r.contains(ref.c_str())) r[ref.c_str()] = torch_view(t);
             return r;
           },
           "The tensors the pass log's IR (compiled with record_ir) names as extern(REF): {REF: tensor}, "
           "sharing the engine's memory (read them, do not write).")
      .def_prop_ro("compile_ms", &CG::compile_ms)
      .def("plan_text", &CG::plan_text, nb::arg("input_shapes"))
      .def_prop_ro("num_plans", &CG::num_plans)
      .def_prop_rw("label", &CG::label, &CG::set_label,
                   "The name reports give this graph (the watchdog's): the partition's name.")
      .def("set_profiling", &CG::set_profiling, nb::arg("on"),
           "Time every step of every plan of this graph (now and later) until switched off.")
      .def("step_times",
           [](const CG& cg) {
             // [(input shapes, [(step, op, kernel, calls, total_ns), ...]), ...]
             std::vector<std::pair<std::vector<std::vector<int64_t>>,
                                   std::vector<std::tuple<int, std::string, std::string, int64_t, int64_t>>>>
                 r;
             for (const auto& [shapes, steps] : cg.step_times()) {
               std::vector<std::tuple<int, std::string, std::string, int64_t, int64_t>> rows;
               for (const StepTime& t : steps) rows.emplace_back(t.step, t.op, t.kernel, t.calls, t.total_ns);
               r.emplace_back(shapes, std::move(rows));
             }
             return r;
           })
      .def_prop_ro("plans_built", [](const CG& cg) { return cg.plan_stats().built; },
                   "Plans built so far (one per new input-shape signature or size bucket; evicted ones count).")
      .def_prop_ro("plans_instantiated", [](const CG& cg) { return cg.plan_stats().instantiated; },
                   "Plans made from a range plan's template without a build (one per size in a bucket).")
      .def_prop_ro("range_plans", [](const CG& cg) { return cg.plan_stats().range; },
                   "'' (no symbolic sizes seen), 'on', or why this graph builds a plan per signature.")
      .def_prop_ro("last_plan_ms", [](const CG& cg) { return cg.plan_stats().last_ms; },
                   "Milliseconds the most recent plan build took (Executable::prepare on a new shape).")
      .def_prop_ro("total_plan_ms", [](const CG& cg) { return cg.plan_stats().total_ms; })
      .def_prop_ro("total_plan_cpu_ms", [](const CG& cg) { return cg.plan_stats().total_cpu_ms; },
                   "CPU milliseconds of the building thread over all plan builds (excludes waiting for a core).")
      .def_prop_ro("kernels_created", [](const CG& cg) { return cg.plan_stats().kernels_created; },
                   "Kernels made by a factory over all plans (shape-generic ones once per compile).")
      .def_prop_ro("kernels_reused", [](const CG& cg) { return cg.plan_stats().kernels_reused; },
                   "Plan nodes served by an already built kernel (KernelCache).")
      .def_prop_ro("finite_kernels", [](const CG& cg) { return cg.plan_stats().finite_kernels; },
                   "Kernels of the most recent plan that run relu / clamp as oneDNN post-ops on calls whose "
                   "inputs are finite (runtime/finite_inputs.h).")
      .def_prop_ro("finite_scanned", [](const CG& cg) { return cg.plan_stats().finite_scanned; },
                   "Graph inputs the most recent plan scans for NaN / inf per call (0: no scan).")
      .def_prop_ro(
          "constant_bytes",
          [](const CG& cg) {
            // Who owns each constant's bytes: the caller (a frozen parameter, zero copy), the
            // engine (a value folded from parameters), or the graph (a literal).
            size_t param = 0, folded = 0, literal = 0;
            for (const Value* v : cg.graph().constants()) {
              const size_t n = v->constant->nbytes();
              (v->source >= 0 ? param : v->from_parameter ? folded : literal) += n;
            }
            nb::dict d;
            d["param"] = param;
            d["folded"] = folded;
            d["literal"] = literal;
            return d;
          },
          "Bytes of the optimised graph's constants by owner: 'param' (the caller's parameters, read in "
          "place), 'folded' (computed from parameters by a pass: engine-owned copies), 'literal'.");

  m.def(
      "packed_weight_stats",
      [] {
        onednn::PackedWeightStats s = onednn::PackedWeights::stats();
        nb::dict d;
        d["entries"] = s.entries;
        d["bytes"] = s.bytes;
        d["shared_bytes"] = s.shared_bytes;
        d["holders"] = s.holders;
        d["packs"] = s.packs;
        d["hits"] = s.hits;
        return d;
      },
      "The process's prepacked weights (src/kernels/onednn/packed_weights.h): live copies ('entries', "
      "'bytes', each once), references to them ('holders'), the bytes that sharing saved ('shared_bytes': "
      "size x (holders - 1)), and over the process's life the copies made ('packs') and lookups served "
      "by an existing copy ('hits').");

  m.def("pass_names", [] { return pipeline_pass_names(); },
        "The pipeline's pass names in order (what disable_passes and a pass fault may name).");
  m.def("pass_is_mandatory", &pass_is_mandatory, nb::arg("name"),
        "Whether a pass cannot be disabled (verify).");
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
      "Runs the pass pipeline on `graph` (which is consumed) and returns an Executable.");
}

}  // namespace updraft::py
