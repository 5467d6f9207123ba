// Kernels: the code that runs one node for one concrete shape signature.
//
// A KernelFactory is called once per (node, concrete shapes) when a plan is built; it may do
// expensive work then (create oneDNN primitives, prepack constant weights) and returns a
// Kernel whose run() is const and thread-safe: many calls may run one Kernel at once, each
// with its own buffers and scratch.
//
// Shape-generic kernels: a kernel whose run() reads every size from the views it is given may
// say so (runs_shapes_of), and then one instance serves the node in the plans of every shape
// signature of a compile (the runtime's KernelCache reuses it instead of calling the factory
// again). Other kernels are reused only for exactly the shapes they were built for. A factory returns nullptr to decline a configuration it
// does not handle; the runtime then uses the reference kernel and says so in the plan dump.
//
// Every op has a reference kernel (Device::ref): plain loops, double accumulation where it
// matters, any strides. It is the test oracle for the fast kernels (Device::cpu).
#pragma once
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "ir/graph.h"
#include "kernels/kernel_options.h"

namespace updraft {

enum class Device : uint8_t { ref, cpu };
const char* device_name(Device d);

struct KernelContext {
  const Node& node;
  std::vector<std::vector<int64_t>> in_shapes;   // concrete
  std::vector<std::vector<int64_t>> out_shapes;  // concrete
  std::vector<const Tensor*> const_inputs;       // [k] non-null when input k is a constant
  int num_threads = 0;                           // 0: the runtime's default
  // The node's attributes with symbolic sizes (Attr Dims/Sym) evaluated for this plan's
  // binding; null when the node has none. Kernels read attributes through attr(), which
  // prefers these, so a slice with end=s1 sees the concrete end.
  const Attrs* attrs = nullptr;
  // The compile's kernel knobs (CompileOptions::kernels): the only settings a factory reads
  // besides the node and its shapes.
  KernelOptions options{};
  // Every value this node reads is finite on the calls where call_inputs_finite() is true (the
  // plan scans the graph inputs it depends on: runtime/finite_inputs.h). A kernel may then run
  // forms that differ from PyTorch only on NaN (oneDNN's relu and clip post-ops turn NaN into
  // a bound), and must run its exact form on the other calls.
  bool finite_inputs = false;

  const Attr& attr(const std::string& name) const {
    if (attrs) {
      auto it = attrs->find(name);
      if (it != attrs->end()) return it->second;
    }
    return node.attr(name);
  }
  // What the per-kernel thread rule (cpu::threads_for_work) takes from the compile.
  cpu::ThreadBudget thread_budget() const { return {num_threads, options.min_work_per_thread}; }
  DType in_dtype(int k) const { return node.inputs.at(k)->type.dtype; }
  DType out_dtype(int k) const { return node.outputs.at(k)->type.dtype; }
};

class Kernel {
 public:
  virtual ~Kernel() = default;
  // in/out hold node.inputs.size() / node.outputs.size() views with the concrete shapes the
  // kernel was built for. Outputs are contiguous unless the op says otherwise. Under a plan
  // inputs are contiguous too; who packs strided ones: src/runtime/plan.h.
  virtual void run(const TensorView* in, TensorView* out, void* scratch) const = 0;
  virtual size_t scratch_bytes() const { return 0; }  // per call, planned in the arena
  virtual std::string name() const = 0;  // e.g. "cpu_f32_add_avx2", "onednn_conv:jit:avx2"

  // Reuse across shape signatures. `ctx` is the same node (same dtypes, ranks, constant
  // inputs, and bound attributes equal to the ones this kernel was built with) at other
  // concrete shapes. True when this kernel runs those shapes correctly as it is, and is the
  // kernel the factory would pick for them (a kernel chosen as a fallback must say false).
  // Default: false, the kernel is specific to the shapes it was built for.
  virtual bool runs_shapes_of(const KernelContext& /*ctx*/) const { return false; }
  // Scratch for a call at ctx's shapes (only asked when runs_shapes_of(ctx) or ctx is the
  // context the kernel was built from). Default: scratch_bytes().
  virtual size_t scratch_bytes_for(const KernelContext& /*ctx*/) const { return scratch_bytes(); }
  // False when the kernel keeps none of the node's size-dependent attributes as built (the views
  // give it every size, or it evaluates symbolic attributes per call from call_bindings()): a
  // node whose attributes hold symbolic sizes (expand to [s0, 1, s1, s2], a slice from s0 - 1
  // to s0) then runs every size of a range plan's bucket with this one kernel. Default: true,
  // the attributes bound at build time are part of the kernel.
  virtual bool reads_attrs() const { return true; }
  // True when run() takes another form on calls where call_inputs_finite() (built from a
  // context with finite_inputs): the plan scans its inputs only for kernels that do.
  virtual bool fuses_when_finite() const { return false; }
};

using KernelFactory = std::function<std::unique_ptr<Kernel>(const KernelContext&)>;

// Whether the plan running on this thread scanned the graph inputs it proves its
// finite_inputs nodes' values from, and found them finite (runtime/finite_inputs.h). A
// kernel's run() reads it; Plan::execute sets it for one call (FiniteCall); false elsewhere.
bool call_inputs_finite();
// The symbol bindings of the plan running on this thread (Plan::execute sets them for one call:
// BoundCall); null elsewhere. A kernel whose attributes hold symbols (a slice from s0 - 1 to s0)
// may evaluate them with these at run time instead of keeping the values it was built with,
// and then says reads_attrs() false: one kernel serves every size of a range plan.
const SymBindings* call_bindings();
class BoundCall {
 public:
  explicit BoundCall(const SymBindings* b);
  ~BoundCall();
  BoundCall(const BoundCall&) = delete;
  BoundCall& operator=(const BoundCall&) = delete;

 private:
  const SymBindings* prev_;
};
class FiniteCall {
 public:
  explicit FiniteCall(bool finite);
  ~FiniteCall();
  FiniteCall(const FiniteCall&) = delete;
  FiniteCall& operator=(const FiniteCall&) = delete;

 private:
  bool prev_;
};

// A kernel from a plain function (most elementwise and data-movement kernels), specific to
// the shapes it was built for (the reference kernels use this).
using KernelFn = std::function<void(const TensorView* in, TensorView* out)>;
std::unique_ptr<Kernel> make_kernel(std::string name, KernelFn fn);
// The same for a shape-generic function: `fn` reads every size from the views and captures
// nothing derived from the context's concrete shapes (ranks, attributes, dtypes and thread
// counts are fine: they are the same in every plan of a compile). Only for kernels a
// factory picks whatever the sizes are (not a size-dependent fallback).
std::unique_ptr<Kernel> make_generic_kernel(std::string name, KernelFn fn);
// The same for a function that keeps no attribute bound to one size (copy, broadcast, row
// gather; a slice that evaluates its symbolic bounds per call): the kernel says reads_attrs() false.
std::unique_ptr<Kernel> make_view_kernel(std::string name, KernelFn fn);

class KernelRegistry {
 public:
  static const KernelRegistry& get();  // built once, on first use
  void add(const std::string& op, Device d, KernelFactory f);  // throws on duplicates
  const KernelFactory* find(const std::string& op, Device d) const;
  bool has(const std::string& op, Device d) const { return find(op, d) != nullptr; }
  // Builds the best kernel for `d` (falls back to ref when the device's factory declines).
  std::unique_ptr<Kernel> create(const KernelContext& ctx, Device d) const;

 private:
  std::vector<std::pair<std::pair<std::string, Device>, KernelFactory>> entries_;
};

// Families, each in src/kernels/{ref,cpu,onednn}/<family>.cpp, listed in registry.cpp.
void register_ref_elementwise_kernels(KernelRegistry& r);
void register_cpu_elementwise_kernels(KernelRegistry& r);
void register_ref_reduction_kernels(KernelRegistry& r);   // reductions and norms
void register_cpu_reduction_kernels(KernelRegistry& r);
void register_ref_sort_kernels(KernelRegistry& r);        // sort (values and indices)
void register_cpu_sort_kernels(KernelRegistry& r);
void register_ref_data_movement_kernels(KernelRegistry& r);
void register_cpu_data_movement_kernels(KernelRegistry& r);
void register_ref_compute_kernels(KernelRegistry& r);     // conv, matmul, pooling, attention
void register_onednn_compute_kernels(KernelRegistry& r);
void register_cpu_f64_compute_kernels(KernelRegistry& r);  // kernels/cpu/compute_f64.cpp; f64 nodes
void register_ref_quantized_kernels(KernelRegistry& r);   // quantize_rows, to_bf16, linear_wq
void register_cpu_quantized_kernels(KernelRegistry& r);   // linear_wq (kernels/cpu/linear_wq.cpp)
// max_pool2d_indices, max_pool2d_backward: ref and cpu (kernels/cpu/max_pool_indices.cpp)
void register_max_pool_indices_kernels(KernelRegistry& r);
// bernoulli: ref and cpu (kernels/cpu/random.cpp, on kernels/philox.h)
void register_random_kernels(KernelRegistry& r);

// The activation layout the conv kernels run fastest with on this CPU (kChannelsLast with
// AVX-512, block 8 with AVX2, 0 otherwise; kernels/channel_block.h); CompileOptions::
// channel_block = -1 resolves to it.
int preferred_channel_block();

// The partitioner's question: can the engine run `op` with these inputs on the CPU? The op
// table's check (a known op, well-formed inputs and attributes), then: is there a CPU kernel
// (view ops need none). nullopt means yes; otherwise the reason, in words a user can act on.
// It lives here, above both the IR and the kernels, so that the IR layer does not include the
// kernel registry.
std::optional<std::string> check_op_support(const std::string& op, const std::vector<TensorType>& inputs,
                                            const Attrs& attrs);

// The fast (Device::cpu) kernel the runtime would build for node `n` with every symbol in its
// shapes and attributes bound to `probe_size`, by name; nullopt when the CPU factory declines
// (or there is none) and only the reference kernel would run it. conv2d (and its gradients),
// linear and matmul are not probed: their factories create oneDNN primitives (milliseconds
// each) and refuse reference implementations themselves; their name is returned as
// "<op>:not probed".
// The partitioner asks this so that a hot op is never left to a reference kernel
// (python/updraft/lowerer.py, Lowerer.emit).
std::optional<std::string> probe_fast_kernel(const Node& n, int64_t probe_size);

// Runs one node on concrete tensors (allocating contiguous outputs): used by constant folding,
// the interpreter and tests that compare a fast kernel with the reference. `bindings` gives
// the symbols' values when the node has symbolic attributes (reshape to [s0, -1]).
// `num_threads` > 0 caps the kernel's threads (OpenMP's count included) for this call; 0 keeps
// the runtime's default. `options`: the kernel knobs (default: KernelOptions{}).
std::vector<Tensor> run_node(const Node& n, const std::vector<TensorView>& inputs, Device d,
                             const SymBindings* bindings = nullptr, int num_threads = 0,
                             const KernelOptions& options = {});

}  // namespace updraft
