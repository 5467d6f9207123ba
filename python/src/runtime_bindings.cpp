#include <nanobind/nanobind.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include "convert.h"
#include "core/error.h"
#include "graph_handle.h"
#include "ir/text.h"
#include "runtime/executable.h"
#include "runtime/plan.h"

namespace updraft::py {

std::string graph_text(const Graph& g, bool origins) {
  PrintOptions opts;
  opts.origins = origins;
  return print_graph(g, opts);
}

CompileOptions options_from(const nb::dict& d) {
  CompileOptions o;
  for (auto [k, v] : d) {
    std::string key = nb::cast<std::string>(k);
    if (key == "fold_constants") o.fold_constants = nb::cast<bool>(v);
    else if (key == "fuse") o.fuse = nb::cast<bool>(v);
    else if (key == "num_threads") o.num_threads = nb::cast<int>(v);
    else if (key == "debug") o.debug = nb::cast<int>(v);
    else if (key == "plan_cache_size") o.plan_cache_size = nb::cast<size_t>(v);
    else if (key == "channel_block") o.channel_block = nb::cast<int>(v);
    // The kernel knobs (kernels/kernel_options.h); updraft.CompilerConfig validated them.
    else if (key == "prepack_weights") o.kernels.prepack_weights = nb::cast<bool>(v);
    else if (key == "static_gemm") o.kernels.static_gemm = nb::cast<bool>(v);
    else if (key == "cpu_isa") o.kernels.cpu_isa = cpu_isa_from_name(nb::cast<std::string>(v));
    else if (key == "min_work_per_thread") o.kernels.min_work_per_thread = nb::cast<double>(v);
    else throw Error("bindings", "unknown compile option '" + key +
                                     "' (known: fold_constants, fuse, num_threads, debug, plan_cache_size, "
                                     "channel_block, prepack_weights, static_gemm, cpu_isa, min_work_per_thread)");
  }
  return o;
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

  void run(const std::vector<uintptr_t>& in_ptrs, const std::vector<uintptr_t>& out_ptrs) const {
    UPDRAFT_CHECK(in_ptrs.size() == ins.size() && out_ptrs.size() == outs.size(), "bindings",
                  "PlannedCall.run: expected " + std::to_string(ins.size()) + " input and " +
                      std::to_string(outs.size()) + " output pointers, got " + std::to_string(in_ptrs.size()) +
                      " and " + std::to_string(out_ptrs.size()));
    std::vector<TensorView> in = ins, out = outs;  // per call: concurrent callers share this object
    for (size_t k = 0; k < in.size(); ++k) in[k].data = reinterpret_cast<void*>(in_ptrs[k]);
    for (size_t k : size_inputs) in[k].data = const_cast<int64_t*>(plan->input_shapes()[k].data());
    for (size_t k = 0; k < out.size(); ++k) out[k].data = reinterpret_cast<void*>(out_ptrs[k]);
    nb::gil_scoped_release release;
    cg->run_plan(*plan, in, out);
  }
};

void bind_runtime(nb::module_& m) {
  nb::class_<PlannedCall>(m, "PlannedCall")
      .def("run", &PlannedCall::run, nb::arg("input_ptrs"), nb::arg("output_ptrs"),
           "Runs the plan on raw data pointers (see runtime_bindings.cpp for the contract).")
      .def_prop_ro("output_shapes", [](const PlannedCall& p) { return p.plan->output_shapes(); });

  using CG = Executable;
  nb::class_<CG>(m, "Executable")
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
      .def("nodes", [](const CG& cg) { return node_rows(cg.graph()); },
           "The optimised graph's nodes with their provenance (graph_handle.h, node_rows).")
      .def("pass_log",
           [](const CG& cg) {
             std::vector<std::tuple<std::string, bool, double, std::string>> r;
             for (const PassRecord& p : cg.pass_log()) r.emplace_back(p.name, p.changed, p.ms, p.ir_after);
             return r;
           })
      .def_prop_ro("compile_ms", &CG::compile_ms)
      .def("plan_text", &CG::plan_text, nb::arg("input_shapes"))
      .def_prop_ro("num_plans", &CG::num_plans)
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
                   "Plans built so far (one per new input-shape signature; evicted ones count).")
      .def_prop_ro("last_plan_ms", [](const CG& cg) { return cg.plan_stats().last_ms; },
                   "Milliseconds the most recent plan build took (Executable::prepare on a new shape).")
      .def_prop_ro("total_plan_ms", [](const CG& cg) { return cg.plan_stats().total_ms; })
      .def_prop_ro("total_plan_cpu_ms", [](const CG& cg) { return cg.plan_stats().total_cpu_ms; },
                   "CPU milliseconds of the building thread over all plan builds (excludes waiting for a core).")
      .def_prop_ro("kernels_created", [](const CG& cg) { return cg.plan_stats().kernels_created; },
                   "Kernels made by a factory over all plans (shape-generic ones once per compile).")
      .def_prop_ro("kernels_reused", [](const CG& cg) { return cg.plan_stats().kernels_reused; },
                   "Plan nodes served by an already built kernel (KernelCache).");

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
