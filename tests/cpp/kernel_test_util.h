// One-node harness for kernel tests: build a graph with one op, run it on the reference and
// the fast CPU kernel, compare. Used by test_reduction.cpp, test_norm.cpp,
// test_data_movement.cpp.
#pragma once
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "ir/graph.h"
#include "ir/op_table.h"
#include "kernels/kernel.h"
#include "test_util.h"

namespace updraft::testing {

struct OneNode {
  std::unique_ptr<Graph> g = std::make_unique<Graph>();
  Node* node = nullptr;

  OneNode(const std::string& op, const std::vector<TensorView>& inputs, Attrs attrs = {}) {
    std::vector<Value*> vals;
    for (size_t k = 0; k < inputs.size(); ++k)
      vals.push_back(g->add_input("x" + std::to_string(k), {inputs[k].dtype, shape_from(inputs[k].shape())}));
    node = g->add_node(op, vals, std::move(attrs));
  }

  // Name of the kernel the registry picks for `d` (to prove the fast path really ran).
  std::string kernel_name(const std::vector<TensorView>& inputs, Device d) const {
    KernelContext ctx{*node, {}, {}, {}, 0};
    for (const TensorView& v : inputs) {
      ctx.in_shapes.push_back(v.shape());
      ctx.const_inputs.push_back(nullptr);
    }
    for (Value* o : node->outputs) ctx.out_shapes.push_back(shape_values(o->type.shape));
    return KernelRegistry::get().create(ctx, d)->name();
  }
};

inline std::vector<TensorView> views(const std::vector<Tensor>& ts) {
  std::vector<TensorView> r;
  for (const Tensor& t : ts) r.push_back(t.view());
  return r;
}

// Runs op on ref and cpu and checks every output matches. `expect_fast`: the CPU kernel must
// be a real fast kernel (its name starts with "cpu_"), not the reference fallback.
inline void expect_cpu_matches_ref(const std::string& op, const std::vector<TensorView>& inputs, const Attrs& attrs,
                                   double rtol, double atol, bool expect_fast = true) {
  OneNode n(op, inputs, attrs);
  if (expect_fast) {
    std::string name = n.kernel_name(inputs, Device::cpu);
    EXPECT_EQ(name.rfind("cpu_", 0), 0u) << op << " fell back to " << name;
  }
  auto want = run_node(*n.node, inputs, Device::ref);
  auto got = run_node(*n.node, inputs, Device::cpu);
  ASSERT_EQ(want.size(), got.size());
  for (size_t k = 0; k < want.size(); ++k)
    EXPECT_TRUE(all_close(got[k], want[k], rtol, atol)) << op << " output " << k << " shape "
                                                        << shape_str(shape_from(want[k].shape()));
}

// Output types the op table infers for symbolic inputs.
inline std::vector<TensorType> infer(const std::string& op, const std::vector<TensorType>& in, const Attrs& attrs) {
  return OpTable::get().infer(op, in, attrs);
}

inline Tensor from_values(DType dt, const std::vector<int64_t>& shape, const std::vector<double>& v) {
  Tensor t(dt, shape);
  EXPECT_EQ(static_cast<int64_t>(v.size()), t.numel());
  for (size_t i = 0; i < v.size(); ++i) {
    switch (dt) {
      case DType::f32: t.ptr<float>()[i] = static_cast<float>(v[i]); break;
      case DType::f64: t.ptr<double>()[i] = v[i]; break;
      case DType::i64: t.ptr<int64_t>()[i] = static_cast<int64_t>(v[i]); break;
      case DType::i32: t.ptr<int32_t>()[i] = static_cast<int32_t>(v[i]); break;
      case DType::boolean: t.ptr<bool>()[i] = v[i] != 0; break;
      default: ADD_FAILURE() << "from_values: dtype not handled";
    }
  }
  return t;
}

inline std::vector<double> values_of(const Tensor& t) {
  std::vector<double> r;
  for (int64_t i = 0; i < t.numel(); ++i) r.push_back(element_as_double(t.view(), i));
  return r;
}

}  // namespace updraft::testing
