// CrossShapeCache: what the plans of one compiled graph share across shape signatures (the
// cache of plans themselves, one per signature, is the compiled graph's LRU).
//
//   CrossShapeCache cache(graph, 16);                 // once per compile
//   auto p1 = Plan::build(graph, {{2, 16}}, opts, &cache);
//   auto p2 = Plan::build(graph, {{3, 40}}, opts, &cache);  // reuses p1's generic kernels
//
// - the liveness of the graph (shape-independent: node order, lifetimes, aliases);
// - a KernelCache: per node, the kernels built so far. A new plan reuses a cached kernel when
//   it was built for exactly the same concrete shapes and bound attributes, or when it is
//   shape-generic (Kernel::runs_shapes_of) and the bound attributes are equal; otherwise it
//   asks the registry for a new one. A kernel is shared (shared_ptr) by every plan using it;
//   eviction from the cache never frees a kernel a plan still holds.
//
// Thread-safe: a mutex guards the kernel lists (Executable also builds under its own lock).
#pragma once
#include <cstddef>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "ir/graph.h"
#include "kernels/kernel.h"
#include "memory/liveness.h"
#include "runtime/finite_inputs.h"

namespace updraft {

class KernelCache {
 public:
  // `per_node`: how many kernels each node keeps (most recently used first); at least 1.
  explicit KernelCache(size_t per_node) : per_node_(per_node ? per_node : 1) {}

  // The kernel for ctx (a cached one that runs ctx's shapes, else a new one from the
  // registry for `device`) and its scratch bytes for these shapes.
  std::shared_ptr<const Kernel> get(const KernelContext& ctx, Device device, size_t* scratch_bytes);

  struct Stats {
    size_t created = 0;  // factory calls
    size_t reused = 0;   // plans' nodes served by a cached kernel
  };
  Stats stats() const;

 private:
  struct Entry {
    std::shared_ptr<const Kernel> kernel;
    std::vector<std::vector<int64_t>> in_shapes, out_shapes;
    std::optional<Attrs> attrs;  // the bound attributes it was built with, when symbolic
  };
  size_t per_node_;
  mutable std::mutex mu_;
  std::vector<std::vector<Entry>> by_node_;  // indexed by node id; most recently used first
  Stats stats_;
};

struct CrossShapeCache {
  CrossShapeCache(const Graph& g, size_t kernels_per_node);
  Liveness liveness;
  KernelCache kernels;
  // Per node in liveness order: whether its attributes hold symbols (reshape to [s0, 12, 64]),
  // which every plan binds to its sizes. Known once, so a plan build does not walk every
  // node's attributes to find the few that do.
  std::vector<char> symbolic_attrs;
  // Per node in liveness order: the first node (its order index, <= its own) with the same op,
  // the same attributes and inputs of the same (symbolic) types: the twelve layers of a
  // transformer repeat a few dozen such nodes. Shape functions are pure functions of op,
  // attributes and input types, so when a plan finds a node's concrete input shapes equal to
  // its first twin's it takes the twin's output shapes (and bound attributes) instead of
  // running the shape function again.
  std::vector<int> twin;
  // The graph's constants (Graph::constants() walks every value the passes ever made).
  std::vector<const Value*> constants;
  // The nodes whose kernels may fuse a relu / clamp epilogue on calls with finite inputs, and
  // the inputs a plan scans for that (runtime/finite_inputs.h). Shape-independent: a kernel
  // one plan builds and another reuses sees the same answer.
  FiniteInputs finite;
};

}  // namespace updraft
