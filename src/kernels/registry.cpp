#include <algorithm>
#include <optional>

#include "core/error.h"
#include "ir/op_table.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/threads.h"
#include "kernels/kernel.h"

namespace updraft {

const char* device_name(Device d) { return d == Device::ref ? "ref" : "cpu"; }

namespace {
// What a function kernel depends on besides the views: make_kernel, make_generic_kernel and
// make_view_kernel in that order.
enum class FnUse : uint8_t { shapes, attrs, views };

class FnKernel final : public Kernel {
 public:
  FnKernel(std::string name, KernelFn fn, FnUse use) : name_(std::move(name)), fn_(std::move(fn)), use_(use) {}
  void run(const TensorView* in, TensorView* out, void*) const override { fn_(in, out); }
  std::string name() const override { return name_; }
  bool runs_shapes_of(const KernelContext&) const override { return use_ != FnUse::shapes; }
  bool reads_attrs() const override { return use_ != FnUse::views; }

 private:
  std::string name_;
  KernelFn fn_;
  FnUse use_;
};
}  // namespace

namespace {
// TEST-ONLY (KernelOptions::fault_op): the real kernel, then 1 added to element 0 of output 0,
// so updraft.debug.bisect has a deliberately wrong kernel to find.
class FaultKernel final : public Kernel {
 public:
  explicit FaultKernel(std::unique_ptr<Kernel> k) : k_(std::move(k)) {}
  void run(const TensorView* in, TensorView* out, void* scratch) const override {
    k_->run(in, out, scratch);
    if (out[0].numel() == 0 || out[0].data == nullptr) return;
    switch (out[0].dtype) {
      case DType::f32: static_cast<float*>(out[0].data)[0] += 1.0f; break;
      case DType::f64: static_cast<double*>(out[0].data)[0] += 1.0; break;
      case DType::i64: static_cast<int64_t*>(out[0].data)[0] += 1; break;
      case DType::i32: static_cast<int32_t*>(out[0].data)[0] += 1; break;
      default: break;  // f16/bf16/small ints: left alone (the fault targets f32 models)
    }
  }
  size_t scratch_bytes() const override { return k_->scratch_bytes(); }
  std::string name() const override { return k_->name() + "+fault"; }
  bool runs_shapes_of(const KernelContext& ctx) const override { return k_->runs_shapes_of(ctx); }
  size_t scratch_bytes_for(const KernelContext& ctx) const override { return k_->scratch_bytes_for(ctx); }
  bool reads_attrs() const override { return k_->reads_attrs(); }

 private:
  std::unique_ptr<Kernel> k_;
};

std::unique_ptr<Kernel> with_fault(const KernelContext& ctx, std::unique_ptr<Kernel> k) {
  if (k && !ctx.options.fault_op.empty() && ctx.options.fault_op == ctx.node.op_name())
    return std::make_unique<FaultKernel>(std::move(k));
  return k;
}
}  // namespace

namespace {
thread_local bool t_call_inputs_finite = false;
}  // namespace

bool call_inputs_finite() { return t_call_inputs_finite; }
FiniteCall::FiniteCall(bool finite) : prev_(t_call_inputs_finite) { t_call_inputs_finite = finite; }
FiniteCall::~FiniteCall() { t_call_inputs_finite = prev_; }

namespace {
thread_local const SymBindings* t_call_bindings = nullptr;
}  // namespace
const SymBindings* call_bindings() { return t_call_bindings; }
BoundCall::BoundCall(const SymBindings* b) : prev_(t_call_bindings) { t_call_bindings = b; }
BoundCall::~BoundCall() { t_call_bindings = prev_; }

std::unique_ptr<Kernel> make_kernel(std::string name, KernelFn fn) {
  return std::make_unique<FnKernel>(std::move(name), std::move(fn), FnUse::shapes);
}

std::unique_ptr<Kernel> make_generic_kernel(std::string name, KernelFn fn) {
  return std::make_unique<FnKernel>(std::move(name), std::move(fn), FnUse::attrs);
}

std::unique_ptr<Kernel> make_view_kernel(std::string name, KernelFn fn) {
  return std::make_unique<FnKernel>(std::move(name), std::move(fn), FnUse::views);
}

const KernelRegistry& KernelRegistry::get() {
  static KernelRegistry* reg = [] {
    auto* r = new KernelRegistry();
    register_ref_elementwise_kernels(*r);
    register_cpu_elementwise_kernels(*r);
    register_ref_reduction_kernels(*r);
    register_cpu_reduction_kernels(*r);
    register_ref_sort_kernels(*r);
    register_cpu_sort_kernels(*r);
    register_ref_data_movement_kernels(*r);
    register_cpu_data_movement_kernels(*r);
    register_ref_compute_kernels(*r);
    register_onednn_compute_kernels(*r);
    register_cpu_attention_kernels(*r);
    register_ref_quantized_kernels(*r);
    register_cpu_quantized_kernels(*r);
    register_max_pool_indices_kernels(*r);
    register_random_kernels(*r);
    // f64 compute nodes go to the engine's own kernels (oneDNN 3.2 has no f64 on the CPU), the
    // others to oneDNN: each op that has an f64 factory gets one that picks by input 0's dtype.
    KernelRegistry f64;
    register_cpu_f64_compute_kernels(f64);
    for (auto& e : r->entries_) {
      if (e.first.second != Device::cpu) continue;
      const KernelFactory* f = f64.find(e.first.first, Device::cpu);
      if (!f) continue;
      e.second = [f64_factory = *f, other = std::move(e.second)](const KernelContext& ctx) {
        return ctx.in_dtype(0) == DType::f64 ? f64_factory(ctx) : other(ctx);
      };
    }
    return r;
  }();
  return *reg;
}

void KernelRegistry::add(const std::string& op, Device d, KernelFactory f) {
  UPDRAFT_CHECK(find(op, d) == nullptr, "kernels",
                "kernel for '" + op + "' on " + device_name(d) + " is registered twice");
  entries_.push_back({{op, d}, std::move(f)});
}

const KernelFactory* KernelRegistry::find(const std::string& op, Device d) const {
  for (const auto& e : entries_)
    if (e.first.first == op && e.first.second == d) return &e.second;
  return nullptr;
}

std::unique_ptr<Kernel> KernelRegistry::create(const KernelContext& ctx, Device d) const {
  const std::string& op = ctx.node.op_name();
  if (d == Device::cpu) {
    if (const KernelFactory* f = find(op, Device::cpu))
      if (auto k = (*f)(ctx)) return with_fault(ctx, std::move(k));
  }
  const KernelFactory* ref = find(op, Device::ref);
  UPDRAFT_CHECK(ref != nullptr, "kernels", "op '" + op + "' has no kernel (not even a reference one)");
  auto k = (*ref)(ctx);
  UPDRAFT_CHECK(k != nullptr, "kernels", "the reference kernel for '" + op + "' declined this configuration");
  return with_fault(ctx, std::move(k));
}

namespace {
// A context for node `n` at concrete input shapes: const inputs, and output shapes re-inferred
// from those shapes (so symbolic graphs work too). `bound`: the node's attributes with symbols
// evaluated, or null when it has none.
KernelContext concrete_context(const Node& n, std::vector<std::vector<int64_t>> in_shapes, const Attrs* bound,
                               int num_threads, const KernelOptions& options, std::vector<TensorType>* out_types) {
  KernelContext ctx{n, std::move(in_shapes), {}, {}, num_threads, bound, options};
  std::vector<TensorType> in_types;
  for (size_t k = 0; k < n.inputs.size(); ++k) {
    ctx.const_inputs.push_back(n.inputs[k]->is_constant() ? &*n.inputs[k]->constant : nullptr);
    in_types.push_back({n.inputs[k]->type.dtype, shape_from(ctx.in_shapes[k])});
  }
  *out_types = OpTable::get().infer(n.op_name(), in_types, bound ? *bound : n.attrs);
  for (const TensorType& t : *out_types) ctx.out_shapes.push_back(shape_values(t.shape));
  return ctx;
}
}  // namespace

std::vector<Tensor> run_node(const Node& n, const std::vector<TensorView>& inputs, Device d,
                             const SymBindings* bindings, int num_threads, const KernelOptions& options) {
  UPDRAFT_CHECK(inputs.size() == n.inputs.size(), "kernels", "run_node: wrong number of inputs for " + n.op_name());
  const bool symbolic = attrs_symbolic(n.attrs);
  UPDRAFT_CHECK(!symbolic || bindings, "kernels",
                "run_node: " + n.op_name() + " has symbolic attributes; pass the symbol bindings");
  Attrs bound = symbolic ? bind_attrs(n.attrs, *bindings) : Attrs{};
  // Kernels that split work by OpenMP's own count (elementwise) read the ICV, not ctx.
  std::optional<cpu::ScopedThreads> cap;
  if (num_threads > 0) cap.emplace(num_threads);
  std::vector<std::vector<int64_t>> in_shapes;
  for (const TensorView& v : inputs) in_shapes.push_back(v.shape());
  std::vector<TensorType> out_types;
  KernelContext ctx = concrete_context(n, std::move(in_shapes), symbolic ? &bound : nullptr, num_threads, options,
                                       &out_types);
  std::vector<Tensor> outs;
  std::vector<TensorView> out_views;
  for (const TensorType& t : out_types) {
    outs.emplace_back(t.dtype, shape_values(t.shape));
    out_views.push_back(outs.back().view());
  }
  auto kernel = KernelRegistry::get().create(ctx, d);
  std::vector<char> scratch(kernel->scratch_bytes() + 64);
  void* aligned = reinterpret_cast<void*>((reinterpret_cast<uintptr_t>(scratch.data()) + 63) & ~uintptr_t{63});
  BoundCall call_scope(bindings);  // this node's binding, never an enclosing plan's (call_bindings)
  kernel->run(inputs.data(), out_views.data(), aligned);
  return outs;
}

std::optional<std::string> check_op_support(const std::string& op, const std::vector<TensorType>& inputs,
                                            const Attrs& attrs) {
  const OpTable& table = OpTable::get();
  if (auto reason = table.check(op, inputs, attrs)) return reason;
  if (!table.at(op).alias && !KernelRegistry::get().has(op, Device::cpu)) return "op '" + op + "' has no CPU kernel yet";
  return std::nullopt;
}

std::optional<std::string> probe_fast_kernel(const Node& n, int64_t probe_size) {
  // Pooling and attention are probed: their factories are cheap, and decline some dtypes and
  // shapes (f64 pooling: the reference loop, 2x slower than PyTorch on a ResNet stem).
  static const char* const kSelfRefusing[] = {"conv2d", "conv2d_backward_data", "conv2d_backward_weight", "linear",
                                              "matmul"};
  for (const char* op : kSelfRefusing)
    if (n.op_name() == op) return n.op_name() + ":not probed";
  const KernelFactory* f = KernelRegistry::get().find(n.op_name(), Device::cpu);
  if (f == nullptr) return std::nullopt;
  std::vector<std::string> names;
  for (const Value* v : n.inputs)
    for (const Dim& d : v->type.shape) d.collect_symbols(names);
  const bool symbolic = attrs_symbolic(n.attrs);
  for (const auto& entry : n.attrs) {  // attributes may name symbols no input carries
    const Attr& a = entry.second;
    if (a.kind() == Attr::Kind::Sym) a.dim().collect_symbols(names);
    if (a.kind() == Attr::Kind::Dims)
      for (const Dim& d : a.dims()) d.collect_symbols(names);
  }
  SymBindings b;
  for (const std::string& s : names) b[s] = probe_size;
  try {
    Attrs bound = symbolic ? bind_attrs(n.attrs, b) : Attrs{};
    std::vector<std::vector<int64_t>> in_shapes;
    for (const Value* v : n.inputs) in_shapes.push_back(shape_eval(v->type.shape, b));
    std::vector<TensorType> out_types;
    KernelContext ctx = concrete_context(n, std::move(in_shapes), symbolic ? &bound : nullptr, 0, KernelOptions{},
                                         &out_types);
    std::unique_ptr<Kernel> k = (*f)(ctx);
    if (!k) return std::nullopt;
    return k->name();
  } catch (const Error&) {
    return std::nullopt;  // a size the probe made up may be invalid for this op: no verdict
  }
}

}  // namespace updraft
