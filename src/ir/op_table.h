// The one op table. Each op is declared once: name, arity, attributes (with defaults),
// accepted dtypes, its class (used by fusion and the planner), aliasing facts, and a symbolic
// shape function. The verifier, the partitioner (through check_op_support, kernels/kernel.h),
// the text parser, the bindings and the kernel registry all read this table; nothing keeps a
// parallel list. The IR layer knows nothing of kernels: whether a CPU kernel exists is asked
// one layer up.
//
// Ops are declared per family in src/ir/ops/*.cpp and listed in register_all_ops()
// (src/ir/op_table.cpp). The op contract (names, inputs, attributes) is docs/ops.md.
#pragma once
#include <functional>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/error.h"
#include "ir/graph.h"

namespace updraft {

enum class OpClass : uint8_t {
  Elementwise,    // out[i] = f(in0[i], in1[i], ...) with numpy broadcasting
  Reduction,      // reduces some dims (sum, mean, amax, softmax-like normalisations are Norm)
  Norm,           // softmax, layer_norm, batch_norm: row-wise, bandwidth bound
  View,           // output aliases input 0's memory (reshape of contiguous data): no kernel runs
  DataMovement,   // copies: permute, slice, concat, expand, gather
  Compute,        // conv, matmul, linear, pooling, attention: oneDNN or blocked kernels
  Fused,          // produced by fusion passes
  Random,         // drawn from the counter-based generator under a seed input (kernels/philox.h)
};

struct AttrSpec {
  std::string name;
  Attr::Kind kind;
  std::optional<Attr> default_value;  // nullopt => required
};

struct OpDef;

// What a shape function sees. Attribute getters fall back to the schema's defaults.
class InferCtx {
 public:
  InferCtx(const OpDef& op, const std::vector<TensorType>& inputs, const Attrs& attrs)
      : op_(op), inputs_(inputs), attrs_(attrs) {}
  int num_inputs() const { return static_cast<int>(inputs_.size()); }
  const TensorType& in(int k) const;
  const Attr& attr(const std::string& name) const;
  int64_t attr_int(const std::string& n) const { return attr(n).i(); }
  double attr_float(const std::string& n) const { return attr(n).f(); }
  bool attr_bool(const std::string& n) const { return attr(n).b(); }
  const std::string& attr_str(const std::string& n) const { return attr(n).s(); }
  const std::vector<int64_t>& attr_ints(const std::string& n) const { return attr(n).ints(); }
  Shape attr_dims(const std::string& n) const { return attr(n).dims(); }  // Dims or Ints
  Dim attr_dim(const std::string& n) const { return attr(n).dim(); }      // Sym or Int
  [[noreturn]] void fail(const std::string& msg) const;  // throws Error(op name, msg)
  void set_output(int k, TensorType t);
  std::vector<TensorType>& outputs() { return outputs_; }

 private:
  const OpDef& op_;
  const std::vector<TensorType>& inputs_;
  const Attrs& attrs_;
  std::vector<TensorType> outputs_;
};

struct OpDef {
  std::string name;
  int min_inputs = 1;
  int max_inputs = 1;  // -1: variadic
  int num_outputs = 1;
  std::vector<AttrSpec> attrs;
  std::vector<DType> dtypes;  // dtypes of input 0 the engine runs; empty: any
  OpClass cls = OpClass::Elementwise;
  bool inplace = false;  // output 0 may share input 0's buffer when input 0 dies here
  bool alias = false;    // output 0 is input 0's memory reinterpreted (View ops)
  std::function<void(InferCtx&)> infer;
  std::string doc;  // one line: what it computes
};

class OpTable {
 public:
  static const OpTable& get();  // built once, on first use
  const OpDef* find(const std::string& name) const;
  const OpDef& at(const std::string& name) const;  // throws Error("ir", "unknown op ...")
  std::vector<std::string> names() const;
  void add(OpDef def);  // throws on a duplicate name

  // Validates arity, attributes (unknown names, kinds, required ones) and dtypes, then runs
  // the shape function. Returns output types; throws Error naming the op on any problem.
  std::vector<TensorType> infer(const std::string& op, const std::vector<TensorType>& inputs,
                                const Attrs& attrs) const;
  // The same for an op already looked up (the parser and Graph::add_node hold its OpDef).
  static std::vector<TensorType> infer(const OpDef& def, const std::vector<TensorType>& inputs, const Attrs& attrs);
  // Is this a well-formed use of an op the engine knows (name, arity, attributes, dtypes,
  // shapes)? nullopt means yes; otherwise the reason, in words a user can act on. Whether a
  // kernel runs it is the partitioner's further question (check_op_support, kernels/kernel.h).
  std::optional<std::string> check(const std::string& op, const std::vector<TensorType>& inputs,
                                   const Attrs& attrs) const;

 private:
  std::vector<OpDef> ops_;
  // name -> index into ops_: find() runs for every node a parser, pass or check touches, and a
  // scan of ~150 names was a tenth of parsing a cache entry's graph.
  std::unordered_map<std::string, size_t> index_;
};

// Families, each in src/ir/ops/<family>.cpp.
void register_elementwise_ops(OpTable& t);
void register_reduction_ops(OpTable& t);
void register_norm_ops(OpTable& t);
void register_data_movement_ops(OpTable& t);
void register_compute_ops(OpTable& t);
void register_grouped_ops(OpTable& t);
void register_quantized_ops(OpTable& t);  // low-precision weights: quantize_rows, to_bf16, linear_wq
void register_fused_ops(OpTable& t);
void register_random_ops(OpTable& t);  // bernoulli (the engine's dropout masks)

// Shape helpers shared by families.
Shape broadcast_shapes(const Shape& a, const Shape& b, const std::string& op);  // numpy rules
int normalize_dim(int64_t dim, int rank, const std::string& op);  // -1 -> rank-1; throws

}  // namespace updraft
