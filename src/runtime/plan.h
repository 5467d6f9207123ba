// Plan, the execution plan: everything needed to run one graph for one concrete input-shape
// signature, decided once and immutable afterwards, so any number of threads may execute it at
// once. (Its memory plan is memory/memory_plan.h; what plans share is cross_shape_cache.h.)
//
//   auto plan = Plan::build(graph, {{4, 64}}, opts);   // binds s0 = 4, plans memory
//   auto state = plan->acquire();                       // a pooled arena + prebuilt views
//   plan->execute(*state, inputs, outputs);
//   plan->release(std::move(state));
//   std::cout << plan->str();                           // schedule + memory plan
//   plan->execute(*state, inputs, outputs, &observer);   // one call with a per-step hook
//
// Buffers are addressed through slots. A slot is a graph input, a graph output (the caller's
// memory), a constant, an arena offset, or an alias of an earlier slot (a View op: same
// pointer, another shape). Each call resolves slot pointers once and patches them into
// TensorViews prebuilt per step in its CallState, so a steady-state call allocates nothing.
//
// Graph outputs: the kernel producing an output value writes straight into the caller's
// buffer. When an output is a graph input, a constant, a view, or repeats an earlier output,
// a final copy step fills the caller's buffer instead; no output ever aliases other memory.
//
// Who makes strided inputs contiguous (the one statement of the rule):
// - The plan does, and it is the only layer that must. When a call passes a non-contiguous
//   view of a graph input that some node reads (aliases included), execute() packs it with the
//   kernels' cpu::copy_strided into a buffer of the call's state (grown on demand, so steady
//   state allocates nothing), and every reader (views included) sees the packed copy for the
//   whole call. Contiguous inputs are read in place and cost no memory: the packed copies are
//   not reserved in the arena, where a training graph, which reads every parameter and saved
//   activation, would have reserved as much again as its inputs. An input that is only
//   returned as an output is copied straight from the strided view. So a kernel run by a plan
//   sees contiguous inputs only. The plan owns this because it alone knows which inputs are
//   read.
// - Kernels may assume contiguous inputs under a plan. Their cpu::Packed (kernels/cpu/
//   strided_copy.h) of an input costs nothing on contiguous memory; it is there for kernels
//   run without a plan (run_node, whose engine callers pass contiguous tensors; kernel tests
//   that pass strided views). Views a kernel builds itself (a reduction's permute_view) are
//   its own layout choice, not input handling.
// - Python (updraft/engine_partition.py) does not: the bound fast path passes a strided
//   input's strides with its pointer, and the general path hands it over as a DLPack view, for
//   the plan to pack (no torch copy on top of the plan's). What it does instead, for an input
//   that came to the first call as a dense permuted view (a training backward's saved
//   transposes, a channels-last image), is avoid the pack: the engine graph takes that input in its memory order and
//   permutes it back inside (engine_partition.input_orders), so it arrives contiguous.
#pragma once
#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "ir/dim.h"
#include "ir/graph.h"
#include "kernels/kernel.h"
#include "memory/memory_plan.h"
#include "runtime/executable.h"
#include "runtime/cross_shape_cache.h"

namespace updraft {

enum class SlotKind : uint8_t { Input, Output, Constant, Arena, Alias };

struct Slot {
  SlotKind kind = SlotKind::Arena;
  int index = -1;          // Input/Output: position in the call; Alias: the aliased slot (earlier)
  size_t offset = 0;       // Arena: offset in the arena
  void* constant = nullptr;  // Constant: the tensor's data
  DType dtype = DType::f32;
  std::vector<int64_t> shape;
  const Value* value = nullptr;  // what it holds (null for outputs), named in Plan::str()
};

struct Step {
  enum class Kind : uint8_t { Kernel, CopyOut } kind = Kind::Kernel;
  int time = 0;  // the liveness step (graph node index; output copies at the end) used by the memory plan
  const Node* node = nullptr;            // Kernel only
  std::shared_ptr<const Kernel> kernel;  // Kernel only; may be shared with other plans (CrossShapeCache)
  std::vector<int> in_slots, out_slots;
  size_t scratch_offset = 0;  // in the arena; the kernel's scratch lives only during this step
  size_t scratch_bytes = 0;
  size_t view_base = 0;  // first of this step's TensorViews in CallState::views (ins, then outs)
};

// One step as a StepObserver sees it. The views are the ones the kernel is given, data
// pointers set for this call (an output copy of a strided graph input reads the caller's
// view); they are valid during the callback only. In before() the output views hold what the
// step is about to overwrite.
struct StepEvent {
  size_t index = 0;            // in Plan::steps()
  const Step* step = nullptr;  // its node (null for an output copy) and kernel
  const TensorView* in = nullptr;
  size_t num_in = 0;
  const TensorView* out = nullptr;
  size_t num_out = 0;
  int64_t start_ns = 0, end_ns = 0;  // runtime_clock_ns(); set in after() only

  const std::string& op() const;  // the node's op name; "copy-out" for an output copy
  std::string kernel() const;     // the kernel's name; "strided_copy" for an output copy
};

// A per-step hook for one call (Plan::execute, Executable::run / run_plan): before() and
// after() every step, on the calling thread, in schedule order. A hook that throws stops the
// call at that step (the exception leaves execute(); after() is not called for the step).
// Observed calls are timed with the same clock reads as step profiling; calls without an
// observer (and without profiling) run the plain loop and pay nothing.
class StepObserver {
 public:
  virtual ~StepObserver() = default;
  virtual void before(const Plan& plan, const StepEvent& ev) {}
  virtual void after(const Plan& plan, const StepEvent& ev) {}
};

// Memory for a call's outputs that the caller passed without any (data null): execute() asks
// for output k just before the first step that writes it, so the outputs are allocated as the
// call goes, where the inputs it has already freed left room (a training backward's gradients,
// as eager autograd allocates them), not all before the first step. Called on the calling
// thread; it must return at least `bytes` bytes aligned to kArenaAlign, or throw.
class OutputSource {
 public:
  virtual ~OutputSource() = default;
  virtual void* output(size_t k, size_t bytes) = 0;
};

// The clock of step times and StepEvent times: steady_clock in nanoseconds (CLOCK_MONOTONIC on
// Linux, the clock of Python's time.monotonic_ns), so Python can place its own ranges on it.
int64_t runtime_clock_ns();

// Per-call mutable state, pooled per plan: the arena, slot pointers and the views kernels see.
// A range template's instances share its pool (Plan::acquire): one arena for the bucket, and
// only the views of moving slots reshaped when a state passes from one instance to another.
struct CallState {
  std::shared_ptr<void> arena;
  std::vector<void*> ptrs;         // by slot
  std::vector<TensorView> views;   // per step: in views then out views, shapes prebuilt
  std::vector<TensorView> inputs;  // by input: what this call reads (the caller's view or its packed copy)
  std::shared_ptr<void> pack;      // packed copies of a call's strided inputs (grown on demand)
  size_t pack_bytes = 0;           // pack's size
  uint64_t shaped_for = 0;         // the Plan::uid_ whose shapes the views hold
};

// One symbol's size bucket in a range plan: every value in [lo, hi] runs on the plan built at hi.
struct SizeRange {
  std::string sym;
  int64_t lo = 0, hi = 0;
};

class Plan : public std::enable_shared_from_this<Plan> {
 public:
  // Binds symbols from the input shapes, infers concrete shapes, creates kernels, plans
  // memory. Throws Error("runtime", ...) on shapes the graph cannot take. With a CrossShapeCache
  // (one per compiled graph; Executable passes its own) the liveness is the cached one and
  // kernels come from its KernelCache, so shape-generic kernels are built once per compile.
  // A size input's entry in input_shapes is {value} (Executable::prepare).
  static std::shared_ptr<Plan> build(const Graph& g, const std::vector<std::vector<int64_t>>& input_shapes,
                                     const CompileOptions& opts, CrossShapeCache* cache = nullptr);

  // Range plans (size buckets), so that a size that changes on every call (a decode step's KV
  // length, a prompt length) builds one plan per bucket rather than one per size:
  // - range_refusal, asked of the first plan built for symbolic sizes, says whether the graph
  //   qualifies ("" when it does): no size inputs (the caller checks); every value's symbolic
  //   type evaluates to its concrete shape; every kernel whose shapes move with a symbol runs
  //   other sizes as it is (Kernel::runs_shapes_of at the bucket's bottom and top); and no
  //   kernel, moving or not, reads attributes that hold a symbol (Kernel::reads_attrs: an
  //   expand to [s0, 1, 1, s1] qualifies, its kernel reads sizes from the views; a slice
  //   starting at s0 does not). A graph that does not qualify builds a plan per signature.
  // - build_range builds a template at the top of each symbol's bucket (bucket_of), so its
  //   memory plan has room for every size in the bucket (null and `why` if that fails).
  // - instantiate makes the plan of one signature in the bucket without a build: the
  //   template's kernels, schedule and memory plan, with shapes evaluated from the types. It
  //   returns null (and why) when a buffer or a kernel's scratch would outgrow the template's.
  // A template is not run itself; its instances are ordinary plans of one signature each.
  std::string range_refusal(const Graph& g, const CompileOptions& opts, const CrossShapeCache& cache);
  static std::shared_ptr<Plan> build_range(const Graph& g, const std::vector<std::vector<int64_t>>& input_shapes,
                                           const CompileOptions& opts, CrossShapeCache& cache, std::string* why);
  static std::vector<SizeRange> bucket_of(const SymBindings& b);
  const std::vector<SizeRange>& ranges() const { return ranges_; }  // empty: not a template
  bool covers(const SymBindings& b) const;  // a template whose ranges hold every bound value
  std::shared_ptr<Plan> instantiate(const std::vector<std::vector<int64_t>>& input_shapes, const SymBindings& b,
                                    const CompileOptions& opts, std::string* why) const;
  // An instance's template ranges as text ("s0 in [33, 64]"); empty for a plan built for its own signature.
  const std::string& instance_of() const { return instance_of_; }

  const std::vector<std::vector<int64_t>>& input_shapes() const { return input_shapes_; }
  const std::vector<std::vector<int64_t>>& output_shapes() const { return output_shapes_; }
  const SymBindings& bindings() const { return bindings_; }
  const MemoryPlan& memory() const { return memory_; }
  const std::vector<Step>& steps() const { return *steps_; }
  const std::vector<Slot>& slots() const { return slots_; }
  int num_inplace() const { return num_inplace_; }
  // The graph inputs each call scans for NaN / inf before its steps (runtime/finite_inputs.h);
  // empty when no kernel of the plan has a form for finite calls, or the scan would cost more
  // than the activation passes it saves.
  const std::vector<int>& finite_inputs() const { return finite_inputs_; }
  // By input: the last step (index in steps()) that reads or writes its memory, through any
  // alias of it, or -1 when no step does. After that step a call no longer touches the input,
  // so a caller that owns it may free it while the rest of the call runs (a training backward's
  // saved activations: PlannedCall.run's `owners`, python/src/runtime_bindings.cpp).
  const std::vector<int>& input_last_steps() const { return input_last_steps_; }
  // By output: the first step that writes or reads its memory (through any alias of it), or
  // -1 when no step does: when execute() asks an OutputSource for it.
  const std::vector<int>& output_first_steps() const { return output_first_steps_; }

  // True when these views have exactly this plan's input shapes, and each size input's view
  // holds the value this plan was built for (allocates nothing).
  bool matches(const std::vector<TensorView>& inputs) const;

  // Pool of CallStates: acquire pops one (or makes one on first use), release pushes it back.
  // An instance of a range template uses the template's pool, reshaping the popped state's
  // moving views when another instance left it: a decode step over a growing KV cache is a new
  // instance per token, and a state of its own (arena and views) cost more than the step's
  // plan lookup.
  std::unique_ptr<CallState> acquire() const;
  void release(std::unique_ptr<CallState> state) const;
  // Runs the schedule. Inputs/outputs must already be validated against this plan
  // (Executable::run does that): count, dtype, shapes, contiguous outputs. With an observer,
  // it is called before and after every step (StepObserver).
  // With a source, outputs whose data is null are asked of it as the call reaches them. Before
  // the first step it scans finite_inputs() and tells the kernels (call_inputs_finite).
  void execute(CallState& st, const std::vector<TensorView>& inputs, const std::vector<TensorView>& outputs,
               StepObserver* observer = nullptr, OutputSource* source = nullptr) const;

  std::string str() const;  // bindings, schedule (step, op, kernel, slots), memory plan

  // Step profiling (updraft.profile): while on, execute() times every step with a steady
  // clock and adds the time to that step's counters (atomics: concurrent calls are summed).
  // Off by default; off costs one relaxed load per call. Observed calls count too.
  void set_profiling(bool on) const;
  std::vector<StepTime> step_times() const;  // one per step, in schedule order

 private:
  struct Builder;  // build()'s phases (plan.cpp)
  Plan() = default;
  std::unique_ptr<CallState> make_state() const;
  // Gives `st` this plan's shapes in the views of the template's moving slots (sym_views_).
  void reshape(CallState& st) const;
  // Whose pool of call states this plan uses: an instance's template's, else its own.
  const Plan& pool_owner() const { return template_ ? *template_ : *this; }
  static uint64_t new_uid();
  // Fills input_last_steps_, output_first_steps_ and output_aliases_ from the schedule (once
  // per build; instances share the template's schedule, so they copy them).
  void index_call_positions();
  // Whether this call's finite_inputs_ hold no NaN and no infinity.
  bool inputs_finite(const CallState& st) const;
  // Fills sym_slots_/sym_steps_ from this plan's bindings; false (and why) when a value's type
  // does not give its concrete shape.
  bool find_moving_parts(const Graph& g, std::string* why);

  std::vector<std::vector<int64_t>> input_shapes_, output_shapes_;
  SymBindings bindings_;
  std::vector<Slot> slots_;
  // Kernels in graph order, then output copies. Read-only once built: a range template's
  // instances share it (instantiate copies the pointer, not the steps).
  std::shared_ptr<std::vector<Step>> steps_ = std::make_shared<std::vector<Step>>();
  std::vector<int> input_slot_;      // by input: its slot
  std::vector<int> output_slot_;     // by output: the slot of kind Output
  std::vector<bool> packable_;       // by input: read by some node, so packed when it comes strided
  std::vector<int> finite_inputs_;   // inputs scanned per call for NaN / inf (Builder::finite_check)
  std::vector<int> input_last_steps_, output_first_steps_;  // index_call_positions
  std::vector<std::vector<int>> output_aliases_;            // by output: its alias slots, in slot order
  std::vector<bool> size_input_;     // by input: a size input (its signature entry is {value})
  MemoryPlan memory_;
  // Range templates (build_range): the buckets, and the slots and kernel steps whose shapes
  // move with a symbol, with the symbolic shape each slot takes its sizes from.
  std::vector<SizeRange> ranges_;
  std::vector<std::pair<int, const Shape*>> sym_slots_;
  std::vector<size_t> sym_steps_;
  std::vector<std::pair<size_t, int>> sym_views_;  // (CallState::views index, slot) of moving slots
  std::shared_ptr<const Plan> template_;           // an instance's template: whose pool it uses
  const uint64_t uid_ = new_uid();                 // unique over the process (CallState::shaped_for)
  std::string instance_of_;
  int num_inplace_ = 0;
  int num_threads_ = 0;  // CompileOptions::num_threads, for the plan's own copies as for its kernels
  size_t num_views_ = 0;

  mutable std::atomic<bool> profiling_{false};
  mutable std::unique_ptr<std::atomic<int64_t>[]> step_ns_, step_calls_;  // made on first set_profiling(true)
  mutable std::mutex pool_mu_;
  mutable std::vector<std::unique_ptr<CallState>> pool_;
};

}  // namespace updraft
