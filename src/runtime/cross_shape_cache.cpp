#include "runtime/cross_shape_cache.h"

#include <algorithm>
#include <string>
#include <unordered_map>

namespace updraft {

namespace {

bool same_attrs(const std::optional<Attrs>& cached, const Attrs* now) {
  if (!cached || !now) return !cached && !now;
  return *cached == *now;
}

}  // namespace

std::shared_ptr<const Kernel> KernelCache::get(const KernelContext& ctx, Device device, size_t* scratch_bytes) {
  const int id = ctx.node.id;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (static_cast<size_t>(id) >= by_node_.size()) by_node_.resize(static_cast<size_t>(id) + 1);
    auto& list = by_node_[static_cast<size_t>(id)];
    for (size_t i = 0; i < list.size(); ++i) {
      const Entry& e = list[i];
      if (!same_attrs(e.attrs, ctx.attrs)) continue;
      bool exact = e.in_shapes == ctx.in_shapes && e.out_shapes == ctx.out_shapes;
      if (!exact && !e.kernel->runs_shapes_of(ctx)) continue;
      std::rotate(list.begin(), list.begin() + static_cast<std::ptrdiff_t>(i),
                  list.begin() + static_cast<std::ptrdiff_t>(i) + 1);
      ++stats_.reused;
      *scratch_bytes = exact ? list.front().kernel->scratch_bytes() : list.front().kernel->scratch_bytes_for(ctx);
      return list.front().kernel;
    }
  }
  // Built outside the lock: a factory may take milliseconds (oneDNN primitive creation).
  std::shared_ptr<const Kernel> k = KernelRegistry::get().create(ctx, device);
  *scratch_bytes = k->scratch_bytes();
  std::lock_guard<std::mutex> lock(mu_);
  auto& list = by_node_[static_cast<size_t>(id)];
  Entry e{k, ctx.in_shapes, ctx.out_shapes, ctx.attrs ? std::optional<Attrs>(*ctx.attrs) : std::nullopt};
  list.insert(list.begin(), std::move(e));
  if (list.size() > per_node_) list.resize(per_node_);
  ++stats_.created;
  return k;
}

CrossShapeCache::CrossShapeCache(const Graph& g, size_t kernels_per_node)
    : liveness(compute_liveness(g)), kernels(kernels_per_node), finite(prove_finite_inputs(g)) {
  for (const Value* c : g.constants()) constants.push_back(c);
  const size_t n = static_cast<size_t>(liveness.at_end);
  symbolic_attrs.resize(n);
  twin.resize(n);
  std::unordered_map<std::string, int> first;  // op, attributes and input types -> order index
  for (size_t i = 0; i < n; ++i) {
    const Node* node = liveness.order[i];
    symbolic_attrs[i] = attrs_symbolic(node->attrs);
    std::string key = node->op_name();
    for (const auto& [name, a] : node->attrs) key += " " + name + "=" + a.str();
    for (const Value* v : node->inputs) key += " " + v->type.str();
    twin[i] = first.emplace(std::move(key), static_cast<int>(i)).first->second;
  }
}

KernelCache::Stats KernelCache::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

}  // namespace updraft
