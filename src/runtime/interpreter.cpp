#include "runtime/interpreter.h"

#include <cstring>
#include <unordered_map>

#include "core/error.h"
#include "ir/op_table.h"
#include "runtime/bind_inputs.h"

namespace updraft {

// A View op's output is its input's bytes under a new shape; the interpreter copies them
// rather than alias, since it has no planner to keep the input alive.
static Tensor run_view(const Node& n, const Tensor& in, const SymBindings& b) {
  std::vector<TensorType> in_types{{in.dtype(), shape_from(in.shape())}};
  for (size_t k = 1; k < n.inputs.size(); ++k) in_types.push_back(n.inputs[k]->type);
  auto out = OpTable::get().infer(n.op_name(), in_types, attrs_symbolic(n.attrs) ? bind_attrs(n.attrs, b) : n.attrs);
  Tensor t(out.at(0).dtype, shape_values(out.at(0).shape));
  UPDRAFT_CHECK(t.nbytes() == in.nbytes(), "interpret", n.op_name() + " changes the byte size of a view");
  if (t.nbytes()) std::memcpy(t.data(), in.data(), t.nbytes());
  return t;
}

std::vector<Tensor> interpret(const Graph& g, const std::vector<Tensor>& inputs, Device d) {
  std::vector<std::vector<int64_t>> shapes;
  for (size_t i = 0; i < inputs.size(); ++i) {
    shapes.push_back(inputs[i].shape());
    // A size input's signature is its value (checked to be an i64 scalar first).
    if (i < g.inputs().size() && !g.inputs()[i]->binds.empty() && inputs[i].dtype() == DType::i64 &&
        inputs[i].shape().empty())
      shapes.back() = {*static_cast<const int64_t*>(inputs[i].data())};
    if (i < g.inputs().size())
      UPDRAFT_CHECK(inputs[i].dtype() == g.inputs()[i]->type.dtype, "interpret",
                    "input " + std::to_string(i) + " is " + dtype_name(inputs[i].dtype()) + ", the graph expects " +
                        dtype_name(g.inputs()[i]->type.dtype));
  }
  const SymBindings bindings = bind_input_shapes(g, shapes, "interpret");

  std::unordered_map<const Value*, Tensor> env;
  for (size_t i = 0; i < inputs.size(); ++i) env[g.inputs()[i]] = inputs[i];
  auto lookup = [&](const Value* v) -> const Tensor& {
    if (v->is_constant()) return *v->constant;
    auto it = env.find(v);
    UPDRAFT_CHECK(it != env.end(), "interpret", "value %" + std::to_string(v->id) + " is used before it is computed");
    return it->second;
  };

  // Drop intermediates after their last use so big graphs fit in memory.
  std::vector<Node*> nodes = g.nodes();
  std::unordered_map<const Value*, size_t> last_use;
  for (size_t i = 0; i < nodes.size(); ++i)
    for (const Value* v : nodes[i]->inputs) last_use[v] = i;

  const KernelRegistry& reg = KernelRegistry::get();
  for (size_t i = 0; i < nodes.size(); ++i) {
    const Node& n = *nodes[i];
    std::vector<Tensor> outs;
    bool has_kernel = reg.has(n.op_name(), d) || reg.has(n.op_name(), Device::ref);
    if (n.op->alias && !has_kernel) {
      outs.push_back(run_view(n, lookup(n.inputs.at(0)), bindings));
    } else {
      std::vector<TensorView> views;
      for (const Value* v : n.inputs) views.push_back(lookup(v).view());
      outs = run_node(n, views, d, &bindings);
    }
    for (size_t k = 0; k < n.outputs.size(); ++k) env[n.outputs[k]] = std::move(outs.at(k));
    for (const Value* v : n.inputs) {
      auto lu = last_use.find(v);
      if (lu != last_use.end() && lu->second == i && !g.is_output(v) && !v->is_input) env.erase(v);
    }
  }
  std::vector<Tensor> result;
  for (const Value* v : g.outputs()) result.push_back(lookup(v));
  return result;
}

}  // namespace updraft
