// Helpers for the elementwise kernel tests: build one node, run it on ref and cpu.
#pragma once
#include <string>
#include <vector>

#include "ir/graph.h"
#include "ir/op_table.h"
#include "kernels/kernel.h"
#include "test_util.h"

namespace updraft::testing {

// PyTorch-parity target for f32 kernels: vector polynomials are within a few ulp of the
// correctly rounded result, and the C-library paths within 1 ulp.
constexpr double kF32Rtol = 1e-5;
constexpr double kF32Atol = 1e-6;
// Integer, bool and pure data-selection results (where, compares, casts) must be bit-equal.
constexpr double kExact = 0.0;

struct OneNode {
  Graph g;
  Node* node = nullptr;
};

// A graph holding one node `op` over inputs of the given dtypes/shapes.
inline std::unique_ptr<OneNode> one_node(const std::string& op, const std::vector<TensorView>& ins, Attrs attrs = {}) {
  auto r = std::make_unique<OneNode>();
  std::vector<Value*> vals;
  for (size_t k = 0; k < ins.size(); ++k)
    vals.push_back(r->g.add_input("x" + std::to_string(k), {ins[k].dtype, shape_from(ins[k].shape())}));
  r->node = r->g.add_node(op, vals, std::move(attrs));
  return r;
}

// The name of the kernel `d` would run for this node and these shapes.
inline std::string kernel_name(const Node& n, const std::vector<TensorView>& ins, Device d) {
  KernelContext ctx{n, {}, {}, {}, 0};
  for (size_t k = 0; k < ins.size(); ++k) {
    ctx.in_shapes.push_back(ins[k].shape());
    ctx.const_inputs.push_back(nullptr);
  }
  std::vector<TensorType> types;
  for (const TensorView& v : ins) types.push_back({v.dtype, shape_from(v.shape())});
  for (const TensorType& t : OpTable::get().infer(n.op_name(), types, n.attrs)) ctx.out_shapes.push_back(shape_values(t.shape));
  return KernelRegistry::get().create(ctx, d)->name();
}

// Runs op on cpu and ref and compares; also checks the cpu kernel is a fast one when
// `expect_fast` (so a silent fallback to the reference cannot pass the test).
inline ::testing::AssertionResult cpu_matches_ref(const std::string& op, const std::vector<TensorView>& ins,
                                                  Attrs attrs, double rtol, double atol, bool expect_fast = true) {
  auto one = one_node(op, ins, std::move(attrs));
  if (expect_fast) {
    std::string name = kernel_name(*one->node, ins, Device::cpu);
    if (name.rfind("cpu_", 0) != 0) return ::testing::AssertionFailure() << op << " ran " << name << " on cpu";
  }
  auto want = run_node(*one->node, ins, Device::ref);
  auto got = run_node(*one->node, ins, Device::cpu);
  auto r = all_close(got[0], want[0], rtol, atol);
  if (!r) return ::testing::AssertionFailure() << op << ": " << r.message();
  return r;
}

}  // namespace updraft::testing
