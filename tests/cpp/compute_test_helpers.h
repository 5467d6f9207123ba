// Helpers for the compute-op kernel tests (test_conv, test_matmul, test_pool, test_attention):
// build one node, run its fast (Device::cpu) kernel and its reference kernel on the same
// inputs, compare. Unlike run_node, the fast path here calls the CPU factory directly and
// fails when it declines, so a test cannot silently compare the reference with itself.
#pragma once
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "core/tensor.h"
#include "ir/graph.h"
#include "ir/op_table.h"
#include "kernels/kernel.h"
#include "test_util.h"

namespace updraft::testing {

// f32 conv / gemm vs the double-accumulating reference: oneDNN reorders (blocks, splits) the
// K-sums and its eltwise post-ops use polynomial approximations, so results differ from the
// exactly-rounded double result by a few ulps times sqrt(K); with inputs in [-2, 2] and K up
// to a few hundred that stays well under 1e-4 absolute + relative.
constexpr double kGemmRtol = 1e-4, kGemmAtol = 1e-4;

// One input of a node under test: a tensor, and whether it enters the graph as a constant
// (weights: prepacked) or a graph input (which may be given to the kernel as a strided view).
struct Arg {
  Tensor t;
  bool constant = false;
  std::optional<TensorView> view;  // a strided view of the same logical values, if any
  Tensor view_storage;             // keeps the strided view's memory alive
};

inline Arg input(Tensor t) { return Arg{std::move(t), false, std::nullopt, {}}; }
inline Arg constant(Tensor t) { return Arg{std::move(t), true, std::nullopt, {}}; }
// A graph input handed to the kernel as a transposed-in-memory (non-contiguous) view.
inline Arg transposed_input(Tensor t) {
  auto [v, store] = transposed_copy(t);
  return Arg{std::move(t), false, v, store};
}

struct Built {
  Graph g;
  Node* node = nullptr;
  std::vector<TensorView> views;  // what the kernels read
  std::vector<Arg> args;
};

inline std::unique_ptr<Built> build(const std::string& op, std::vector<Arg> args, Attrs attrs) {
  auto b = std::make_unique<Built>();
  std::vector<Value*> ins;
  for (size_t k = 0; k < args.size(); ++k) {
    std::string name = "in" + std::to_string(k);
    ins.push_back(args[k].constant ? b->g.add_constant(name, args[k].t)
                                   : b->g.add_input(name, {args[k].t.dtype(), shape_from(args[k].t.shape())}));
  }
  b->node = b->g.add_node(op, ins, std::move(attrs));
  b->args = std::move(args);
  for (Arg& a : b->args) b->views.push_back(a.view ? *a.view : a.t.view());
  return b;
}

inline KernelContext context_of(const Built& b, const KernelOptions& options = {}) {
  KernelContext ctx{*b.node, {}, {}, {}, 0, nullptr, options};
  for (size_t k = 0; k < b.views.size(); ++k) {
    ctx.in_shapes.push_back(b.views[k].shape());
    ctx.const_inputs.push_back(b.node->inputs[k]->is_constant() ? &*b.node->inputs[k]->constant : nullptr);
  }
  for (Value* o : b.node->outputs) ctx.out_shapes.push_back(shape_values(o->type.shape));
  return ctx;
}

// Aligned per-call scratch owned by the caller (one per thread in the threading tests).
struct Scratch {
  explicit Scratch(size_t bytes) : buf(bytes + 64) {}
  void* get() { return reinterpret_cast<void*>((reinterpret_cast<uintptr_t>(buf.data()) + 63) & ~uintptr_t{63}); }
  std::vector<char> buf;
};

inline std::unique_ptr<Kernel> make_kernel_for(const Built& b, Device d, const KernelOptions& options = {}) {
  const KernelFactory* f = KernelRegistry::get().find(b.node->op_name(), d);
  EXPECT_NE(f, nullptr) << "no " << device_name(d) << " kernel for " << b.node->op_name();
  if (!f) return nullptr;
  auto k = (*f)(context_of(b, options));
  EXPECT_NE(k, nullptr) << device_name(d) << " factory declined " << b.node->op_name();
  return k;
}

inline Tensor run_kernel(const Kernel& k, const Built& b) {
  Tensor out(b.node->output()->type.dtype, shape_values(b.node->output()->type.shape));
  TensorView ov = out.view();
  Scratch s(k.scratch_bytes());
  k.run(b.views.data(), &ov, s.get());
  return out;
}

// Runs the op on the CPU kernel and the reference kernel and compares; returns the CPU
// kernel's name (so tests can assert which implementation ran).
inline std::string expect_matches_ref(const std::string& op, std::vector<Arg> args, Attrs attrs,
                                      double rtol = kGemmRtol, double atol = kGemmAtol,
                                      const KernelOptions& options = {}) {
  auto b = build(op, std::move(args), std::move(attrs));
  auto fast = make_kernel_for(*b, Device::cpu, options);
  auto ref = make_kernel_for(*b, Device::ref);
  if (!fast || !ref) return "";
  Tensor got = run_kernel(*fast, *b), want = run_kernel(*ref, *b);
  EXPECT_TRUE(all_close(got, want, rtol, atol)) << op << " " << b->node->output()->type.str() << " via "
                                               << fast->name();
  return fast->name();
}

// One kernel, `threads` threads, each calling it `reps` times with its own scratch and output:
// every thread's result must match the single-threaded reference (Kernel::run is const and
// reentrant; oneDNN primitives with a user scratchpad are too).
inline void expect_same_from_threads(const Built& b, int reps, double rtol, double atol, int threads = 4) {
  auto fast = make_kernel_for(b, Device::cpu);
  auto ref = make_kernel_for(b, Device::ref);
  ASSERT_TRUE(fast && ref);
  Tensor want = run_kernel(*ref, b);
  std::vector<Tensor> outs(threads);
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t)
    pool.emplace_back([&, t] {
      for (int rep = 0; rep < reps; ++rep) outs[t] = run_kernel(*fast, b);
    });
  for (auto& t : pool) t.join();
  for (int t = 0; t < threads; ++t)
    EXPECT_TRUE(all_close(outs[t], want, rtol, atol)) << b.node->op_name() << " via " << fast->name() << ", thread " << t;
}

}  // namespace updraft::testing
