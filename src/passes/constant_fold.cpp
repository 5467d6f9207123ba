// constant_fold: a node whose inputs are all constants is evaluated once, here, with the
// engine's own kernels (run_node on Device::cpu, the same code the plan would run), and its
// outputs become constants. Walking in topological order folds whole constant chains in
// one pass. Size bound: a fold must not inflate the model, so an output larger than
// kMaxGrowth times its inputs (an expand or broadcast of a small constant) stays a node
// unless it is tiny, and nothing above kMaxBytes is folded.
#include "passes/constant_fold.h"

#include <cstring>

#include "core/error.h"
#include "ir/op_table.h"
#include "kernels/kernel.h"

namespace updraft {

namespace {

constexpr size_t kMaxBytes = size_t{64} << 20;  // 64 MiB
constexpr size_t kMaxGrowth = 2;                // output bytes <= 2x input bytes ...
constexpr size_t kAlwaysFoldBytes = 4096;       // ... unless the output is this small

bool worth_folding(const Node& n, const std::vector<TensorType>& outs) {
  size_t in_bytes = 0, out_bytes = 0;
  for (const Value* v : n.inputs) in_bytes += v->constant->nbytes();
  for (const TensorType& t : outs) {
    if (!shape_is_static(t.shape)) return false;
    out_bytes += static_cast<size_t>(numel_of(shape_values(t.shape))) * dtype_size(t.dtype);
  }
  if (out_bytes > kMaxBytes) return false;
  return out_bytes <= kAlwaysFoldBytes || out_bytes <= kMaxGrowth * in_bytes;
}

}  // namespace

std::vector<Tensor> evaluate_constant_node(const Node& n, const std::vector<TensorView>& inputs) {
  if (n.op->alias) {  // View ops reinterpret the bytes
    const TensorView& in = inputs.at(0);
    Tensor t(n.output()->type.dtype, shape_values(n.output()->type.shape));
    UPDRAFT_CHECK(static_cast<size_t>(in.numel()) * dtype_size(in.dtype) == t.nbytes(), "constant_fold",
                  n.op_name() + ": input and result sizes differ");
    if (t.nbytes()) std::memcpy(t.data(), in.data, t.nbytes());
    return {t};
  }
  // One thread: folding runs once per compile or refit, mostly small per-channel vectors, and
  // an OpenMP team's join on a machine whose other cores are busy can wait a scheduler time
  // slice per region (hundreds of ms over ResNet-50's batch-norm folds). One thread also makes
  // the folded bytes independent of the thread count, so a refit on another machine or with
  // another CompilerConfig(num_threads) matches a cold compile bit for bit. The default kernel
  // options for the same reason: no kernel knob (cpu_isa, say) changes a folded constant, so none
  // needs to be in the compile-cache key.
  return run_node(n, inputs, Device::cpu, nullptr, /*num_threads=*/1, KernelOptions{});
}

bool fold_constant_node(Graph& g, Node* n, bool always) {
  if (n->inputs.empty()) return false;
  // A graph output stays computed by a node: the runtime writes node results into caller
  // buffers, and a constant output would be a special case there for no real gain.
  for (const Value* o : n->outputs)
    if (g.is_output(o)) return false;
  for (const Value* v : n->inputs)
    if (!v->is_constant()) return false;
  std::vector<TensorType> outs;
  for (const Value* o : n->outputs) outs.push_back(o->type);
  for (const TensorType& t : outs)
    if (!shape_is_static(t.shape)) return false;
  if (!always && !worth_folding(*n, outs)) return false;
  const KernelRegistry& reg = KernelRegistry::get();
  if (!n->op->alias && !reg.has(n->op_name(), Device::cpu) && !reg.has(n->op_name(), Device::ref)) return false;

  std::vector<TensorView> views;
  for (const Value* v : n->inputs) views.push_back(v->constant->view());
  std::vector<Tensor> results = evaluate_constant_node(*n, views);
  UPDRAFT_CHECK(results.size() == n->outputs.size(), "constant_fold",
                n->op_name() + " returned " + std::to_string(results.size()) + " results for " +
                    std::to_string(n->outputs.size()) + " outputs; its kernel is broken");
  std::vector<Value*> made;
  for (size_t k = 0; k < results.size(); ++k) {
    Value* o = n->outputs[k];
    UPDRAFT_CHECK(results[k].dtype() == o->type.dtype && results[k].shape() == shape_values(o->type.shape),
                  "constant_fold",
                  n->op_name() + " kernel returned a result that does not match the node's type " + o->type.str());
    made.push_back(g.add_constant(o->name, std::move(results[k])));
  }
  g.record_fold(*n, made);
  for (size_t k = 0; k < made.size(); ++k) g.replace_all_uses(n->outputs[k], made[k]);
  g.remove_node(n);
  return true;
}

bool constant_fold(Graph& g) {
  bool changed = false;
  for (Node* n : g.nodes()) changed |= fold_constant_node(g, n);
  return changed;
}

}  // namespace updraft
