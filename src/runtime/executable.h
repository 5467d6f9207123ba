// Executable: the result of compiling one engine graph, ready to run many times (the C++
// engine's; python/updraft/backend.py's compiled-module class is another thing, one level up).
//
//   auto cg = Executable::compile(std::move(graph), CompileOptions{});
//   auto out_shapes = cg->prepare({{1, 3, 224, 224}});   // builds + caches the plan
//   cg->run({input_view}, {output_view});                 // thread-safe
//   cg->run({input_view}, {output_view}, &observer);      // with a per-step hook (plan.h)
//
// compile() runs the pass pipeline once. A Plan (flat list of kernel calls with resolved
// buffer slots and a memory plan) is built per concrete input-shape signature on first use
// and cached (bounded LRU). Each concurrent run() takes its own arena from a pool, so one
// Executable may be called from many threads at once. Inputs are read in place
// (zero-copy); outputs are written into caller-owned memory (torch tensors, from Python).
#pragma once
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "ir/graph.h"
#include "passes/options.h"

namespace updraft {

class Plan;          // runtime/plan.h
class StepObserver;  // runtime/plan.h
class OutputSource;  // runtime/plan.h

// One plan step's accumulated time while profiling is on (Executable::set_profiling).
struct StepTime {
  int step = 0;
  std::string op, kernel;  // "copy-out" / "strided_copy" for output copies
  int64_t calls = 0, total_ns = 0;
};
struct CrossShapeCache;  // runtime/cross_shape_cache.h

// Plans built over this Executable's life (evicted ones included): one per new input-shape
// signature, or more when the LRU evicted a signature that came back.
struct PlanStats {
  size_t built = 0;
  double last_ms = 0;   // Plan::build of the most recent new signature
  double total_ms = 0;
  // Kernels over all plans: made by a factory, or served from the KernelCache (cross_shape_cache.h)
  // because they are shape-generic or were built for the same shapes before.
  size_t kernels_created = 0, kernels_reused = 0;
  // CPU time of the building thread, same scopes as last_ms/total_ms: on a loaded machine
  // wall time also counts waiting for a core, this does not (threads a factory starts for
  // oneDNN reorders are not counted either).
  double last_cpu_ms = 0, total_cpu_ms = 0;
  // Range plans (Plan::build_range): plans made from a bucket's template without a build, and
  // the state of range planning: "" (not tried: no symbolic sizes seen yet), "on", or why the
  // graph builds one plan per signature instead.
  size_t instantiated = 0;
  std::string range;
  // The most recent plan build's relu / clamp post-ops for finite calls (runtime/finite_inputs.h):
  // kernels that have that form, and the graph inputs each call scans for it (0: no scan).
  size_t finite_kernels = 0, finite_scanned = 0;
};

class Executable {
 public:
  static std::shared_ptr<Executable> compile(std::unique_ptr<Graph> graph, const CompileOptions& opts);
  // A graph that is already optimised (a compile-cache entry, cache/entry.h): no passes run.
  // compile_ms() reports `load_ms`, and the pass log holds one record, "cache_load".
  static std::shared_ptr<Executable> from_optimized(std::unique_ptr<Graph> graph, const CompileOptions& opts,
                                                       double load_ms);
  ~Executable();

  // Concrete output shapes for these input shapes (builds and caches the plan if needed).
  // Input signature: a tensor input's shape; a size input's (Graph::add_size_input) value, as
  // {value}. At run() a size input is an i64 scalar view holding the value: each value it
  // takes is a signature of its own, with its own plan, as each size of a tensor input is.
  std::vector<std::vector<int64_t>> prepare(const std::vector<std::vector<int64_t>>& input_shapes);
  // Runs the plan for the inputs' shapes. Inputs may be strided; outputs must be contiguous
  // with the shapes prepare() returned. Throws Error("runtime", ...) on a mismatch. An
  // observer sees every step of this call (StepObserver, plan.h). With
  // CompileOptions::watchdog_s set, a call running longer is reported and stopped
  // (runtime/watchdog.h: WatchdogTimeout).
  void run(const std::vector<TensorView>& inputs, const std::vector<TensorView>& outputs,
           StepObserver* observer = nullptr);

  // For callers that look a plan up once per shape signature and then run it many times (the
  // Python fast path): plan() returns the cached plan for these input shapes (building it if
  // needed); run_plan() runs it with the same validation as run() but no plan lookup. The
  // plan stays valid while the caller holds it, even if the LRU evicts it.
  std::shared_ptr<const Plan> plan(const std::vector<std::vector<int64_t>>& input_shapes);
  // With a source, outputs passed without data (null) are allocated by it as the plan reaches
  // them (OutputSource, plan.h).
  void run_plan(const Plan& plan, const std::vector<TensorView>& inputs, const std::vector<TensorView>& outputs,
                StepObserver* observer = nullptr, OutputSource* source = nullptr);

  const Graph& graph() const { return *graph_; }
  const CompileOptions& options() const { return opts_; }  // as compiled (channel_block resolved)
  // What reports call this graph (the watchdog's): the Python partition's name; empty: none.
  void set_label(std::string label);
  std::string label() const;
  std::vector<DType> output_dtypes() const;
  const std::vector<PassRecord>& pass_log() const { return pass_log_; }
  double compile_ms() const { return compile_ms_; }
  // The memory plan and kernel schedule for one input-shape signature, as text.
  std::string plan_text(const std::vector<std::vector<int64_t>>& input_shapes);
  size_t num_plans() const;  // plans cached now (at most plan_cache_size)

  // Step profiling for every plan of this graph, cached now or built later (Plan::set_profiling).
  void set_profiling(bool on);
  // The step times of each cached plan: (input shapes, one entry per step).
  std::vector<std::pair<std::vector<std::vector<int64_t>>, std::vector<StepTime>>> step_times() const;
  PlanStats plan_stats() const;

 private:
  Executable() = default;
  std::shared_ptr<Plan> plan_for(const std::vector<std::vector<int64_t>>& input_shapes);
  void check_inputs(const std::vector<TensorView>& inputs) const;  // count, dtype, rank, data
  // Checks the outputs against the plan (count, dtype, shape, contiguity) and executes it.
  void execute_checked(const Plan& plan, const std::vector<TensorView>& inputs,
                       const std::vector<TensorView>& outputs, StepObserver* observer,
                       OutputSource* source = nullptr);

  std::unique_ptr<Graph> graph_;
  CompileOptions opts_;
  std::vector<PassRecord> pass_log_;
  double compile_ms_ = 0;
  mutable std::mutex mu_;
  mutable std::mutex label_mu_;  // its own: the watchdog reads the label while mu_ may be held for a plan build
  std::string label_;
  std::vector<std::pair<std::vector<std::vector<int64_t>>, std::shared_ptr<Plan>>> plans_;  // LRU, front = newest
  std::unique_ptr<CrossShapeCache> cross_shape_cache_;  // liveness + kernels its plans share; guarded by mu_
  size_t plans_built_ = 0;  // guarded by mu_, like the timings
  // Range plans: templates, most recently used first (a few buckets live at once), and why
  // range planning is off for this graph once it failed to qualify. Guarded by mu_.
  std::vector<std::shared_ptr<Plan>> ranges_;
  std::string range_state_;
  size_t plans_instantiated_ = 0;
  // The plan for a signature no cached plan has: an instance of a range template, or a build.
  std::shared_ptr<Plan> make_plan(const std::vector<std::vector<int64_t>>& input_shapes);
  std::shared_ptr<Plan> build_timed(const std::vector<std::vector<int64_t>>& input_shapes, bool range, std::string* why);
  bool profiling_ = false;  // guarded by mu_
  double last_plan_ms_ = 0, total_plan_ms_ = 0, last_plan_cpu_ms_ = 0, total_plan_cpu_ms_ = 0;
  size_t finite_kernels_ = 0, finite_scanned_ = 0;  // PlanStats, of the most recent build
};

}  // namespace updraft
