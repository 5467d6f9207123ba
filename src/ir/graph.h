// The engine IR: a Graph owns Values (typed SSA edges) and Nodes (op applications) in
// topological order. Builders validate before they mutate: add_node runs the op's shape
// function and throws Error on a bad input without touching the graph.
//
//   Graph g;
//   Value* x = g.add_input("x", {DType::f32, {Dim::sym("s0"), 64}});
//   Value* w = g.add_constant("w", Tensor(DType::f32, {64, 64}));
//   Value* y = g.add_node("matmul", {x, w})->output(0);
//   g.set_outputs({g.add_node("relu", {y})->output(0)});
#pragma once
#include <list>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/tensor.h"
#include "ir/attr.h"
#include "ir/dim.h"

namespace updraft {

struct OpDef;
struct Node;

struct TensorType {
  DType dtype = DType::f32;
  Shape shape;
  std::string str() const;  // "f32[2, s0, 64]"
  bool operator==(const TensorType& o) const { return dtype == o.dtype && shape == o.shape; }
};

struct Value {
  int id = -1;
  std::string name;
  TensorType type;
  Node* producer = nullptr;  // null for graph inputs and constants
  int producer_index = 0;
  std::optional<Tensor> constant;  // set for constants (weights, folded values)
  bool is_input = false;
  // A size input (Graph::add_size_input): a 0-d i64 input whose value binds this symbol, for a
  // size no tensor input carries as a dim (a cache position, arange(n + 1)). Empty otherwise.
  std::string binds;
  // For a constant bound from the caller's parameter number `source` (a frozen weight): the
  // compile cache stores the reference, not the values, and binds the new tensor on load.
  int source = -1;
  // Set by Graph::record_fold on a constant computed from a parameter (or from another such).
  bool from_parameter = false;
  // Provenance (debug tools, docs/debugging.md): the front-end node (an aten FX node's name)
  // whose result this value holds, or empty. Set by the lowering; replace_all_uses moves it to
  // the value that takes over, so after fusion the fused node's output names the last node of
  // the chain it computes. It names a result in the front end's (plain) layout: a value in a
  // channel-blocked layout has none, its plain copy (a channel_block node's output) has it.
  std::string origin;

  bool is_constant() const { return constant.has_value(); }
  // A constant whose bytes are fixed when the graph is compiled: neither a caller's parameter nor
  // folded from one. Only these may be compared or baked in by content (merged with an equal
  // constant, turned into an immediate, matched as a formula's coefficient): a parameter's
  // values can differ on a cache hit (another checkpoint of the same model) or after an in-place
  // update, and two parameters that are equal today (fresh norm weights, zero biases) are still
  // two parameters.
  bool is_literal() const { return is_constant() && source < 0 && !from_parameter; }
  // The value of a one-element f32/f64/bool literal (bool as 1/0), or nullopt: a parameter's
  // value is the caller's, so it is never a formula coefficient or a program immediate.
  std::optional<double> literal_scalar() const;
  int rank() const { return static_cast<int>(type.shape.size()); }
};

// A constant computed by a pass from other constants (constant folding): the op, its attributes
// and the value ids it read and wrote. Replaying the records over new parameter values gives
// the folded constants of that checkpoint (the compile cache's refit, docs/format.md).
struct FoldRecord {
  std::string op;
  Attrs attrs;
  std::vector<int> inputs, outputs;
};

struct Node {
  int id = -1;
  const OpDef* op = nullptr;
  std::vector<Value*> inputs;
  std::vector<Value*> outputs;
  Attrs attrs;
  // Provenance: the front-end nodes this node computes, in their graph order (one after
  // lowering; several after a pass fused nodes). Printed as a comment (PrintOptions::origins);
  // not part of what the graph computes, so not hashed, compared or stored in cache entries.
  std::vector<std::string> origin;

  const std::string& op_name() const;
  Value* input(int k) const { return inputs.at(k); }
  Value* output(int k = 0) const { return outputs.at(k); }
  bool has_attr(const std::string& n) const { return attrs.count(n) > 0; }
  const Attr& attr(const std::string& n) const;  // throws Error naming node and attribute
};

class Graph {
 public:
  Graph() = default;
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;

  Value* add_input(const std::string& name, TensorType type);
  // A size input: type i64[], its value at run time binds `symbol` (see Value::binds).
  Value* add_size_input(const std::string& name, const std::string& symbol);
  Value* add_constant(const std::string& name, Tensor value);
  // Records that `results` (new constants) are what node `n` computes from its constant inputs.
  // Every pass that folds values into new constants records them this way.
  void record_fold(const Node& n, const std::vector<Value*>& results);
  const std::vector<FoldRecord>& folds() const { return folds_; }
  // Appends (or inserts before the insert point) a node; output types come from the op
  // table's shape function. Throws Error("ir", ...) on unknown ops, bad arity, bad types.
  Node* add_node(const std::string& op, std::vector<Value*> inputs, Attrs attrs = {});
  // The same for an op already looked up in the OpTable.
  Node* add_node(const OpDef& def, std::vector<Value*> inputs, Attrs attrs = {});
  void set_outputs(std::vector<Value*> outputs);

  // Nodes inserted by add_node go before `before` until the insert point is reset (nullptr).
  void set_insert_point(Node* before) { insert_before_ = before; }

  // Provenance stamp: nodes added from now on get `origin` (the lowering sets it per front-end
  // node; passes leave it empty and carry origins with replace_all_uses / merge_origin).
  void set_origin(std::vector<std::string> origin) { origin_ = std::move(origin); }
  // Appends `from`'s origins that `into` lacks (a pass that folds `from` into `into`).
  static void merge_origin(Node* into, const Node* from);

  // Rewiring helpers for passes. replace_all_uses also carries provenance: `to` takes over
  // `from`'s value origin, and `to`'s producer (if any) gains `from`'s producer's origins.
  void replace_all_uses(Value* from, Value* to);  // inputs of nodes and graph outputs
  void remove_node(Node* n);  // n's outputs must be unused
  std::vector<Node*> users(const Value* v) const;
  int use_count(const Value* v) const;  // node uses plus graph-output uses
  bool is_output(const Value* v) const;
  // Re-run shape inference for every node in order (after a pass changed input types).
  void reinfer();

  const std::vector<Value*>& inputs() const { return inputs_; }
  const std::vector<Value*>& outputs() const { return outputs_; }
  std::vector<Node*> nodes() const;  // snapshot in order; safe to mutate the graph while walking
  std::vector<Value*> constants() const;
  size_t num_nodes() const { return nodes_.size(); }
  Value* value(int id) const { return values_.at(id).get(); }
  size_t num_values() const { return values_.size(); }

 private:
  Value* new_value(const std::string& name, TensorType t);
  std::vector<std::unique_ptr<Value>> values_;  // index == id; removed values stay (unreferenced)
  std::list<std::unique_ptr<Node>> nodes_;
  std::unordered_map<const Node*, std::list<std::unique_ptr<Node>>::iterator> pos_;
  std::vector<Value*> inputs_, outputs_;
  std::vector<FoldRecord> folds_;
  Node* insert_before_ = nullptr;
  int next_node_id_ = 0;
  std::vector<std::string> origin_;  // set_origin
};

}  // namespace updraft
