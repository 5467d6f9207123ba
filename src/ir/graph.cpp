#include "ir/graph.h"

#include <algorithm>

#include "core/error.h"
#include "ir/op_table.h"

namespace updraft {

std::string TensorType::str() const { return std::string(dtype_name(dtype)) + shape_str(shape); }

const std::string& Node::op_name() const { return op->name; }

const Attr& Node::attr(const std::string& n) const {
  auto it = attrs.find(n);
  if (it != attrs.end()) return it->second;
  for (const AttrSpec& s : op->attrs)
    if (s.name == n && s.default_value) return *s.default_value;
  throw Error("ir", "node %" + std::to_string(id) + " (" + op->name + ") has no attribute '" + n + "'");
}

Value* Graph::new_value(const std::string& name, TensorType t) {
  auto v = std::make_unique<Value>();
  v->id = static_cast<int>(values_.size());
  v->name = name;
  v->type = std::move(t);
  values_.push_back(std::move(v));
  return values_.back().get();
}

Value* Graph::add_input(const std::string& name, TensorType type) {
  UPDRAFT_CHECK(type.shape.size() <= static_cast<size_t>(kMaxDims), "ir",
                "input '" + name + "' has rank " + std::to_string(type.shape.size()) + "; the engine supports up to 8");
  Value* v = new_value(name, std::move(type));
  v->is_input = true;
  inputs_.push_back(v);
  return v;
}

Value* Graph::add_size_input(const std::string& name, const std::string& symbol) {
  Dim d = Dim::sym(symbol);  // validates the name as a symbol
  for (const Value* in : inputs_)
    UPDRAFT_CHECK(in->binds != symbol, "ir",
                  "size input '" + name + "' binds " + symbol + ", which input '" + in->name +
                      "' binds already; pass each symbol once");
  Value* v = add_input(name, {DType::i64, {}});
  v->binds = d.str();
  return v;
}

Value* Graph::add_constant(const std::string& name, Tensor value) {
  TensorType t{value.dtype(), shape_from(value.shape())};
  Value* v = new_value(name, std::move(t));
  v->constant = std::move(value);
  return v;
}

void Graph::record_fold(const Node& n, const std::vector<Value*>& results) {
  FoldRecord r{n.op_name(), n.attrs, {}, {}};
  bool from_parameter = false;
  for (const Value* v : n.inputs) {
    UPDRAFT_CHECK(v->is_constant(), "ir", "record_fold: input of " + n.op_name() + " is not a constant");
    r.inputs.push_back(v->id);
    from_parameter |= !v->is_literal();
  }
  for (Value* v : results) {
    UPDRAFT_CHECK(v->is_constant(), "ir", "record_fold: result of " + n.op_name() + " is not a constant");
    r.outputs.push_back(v->id);
    v->from_parameter = from_parameter;
  }
  folds_.push_back(std::move(r));
}

Node* Graph::add_node(const std::string& op, std::vector<Value*> inputs, Attrs attrs) {
  return add_node(OpTable::get().at(op), std::move(inputs), std::move(attrs));
}

Node* Graph::add_node(const OpDef& def, std::vector<Value*> inputs, Attrs attrs) {
  std::vector<TensorType> in_types;
  in_types.reserve(inputs.size());
  for (size_t k = 0; k < inputs.size(); ++k) {
    UPDRAFT_CHECK(inputs[k] != nullptr, "ir", def.name + ": input " + std::to_string(k) + " is null");
    in_types.push_back(inputs[k]->type);
  }
  std::vector<TensorType> out_types = OpTable::infer(def, in_types, attrs);  // validates first

  auto node = std::make_unique<Node>();
  node->id = next_node_id_++;
  node->op = &def;
  node->inputs = std::move(inputs);
  node->attrs = std::move(attrs);
  node->origin = origin_;
  Node* n = node.get();
  for (size_t k = 0; k < out_types.size(); ++k) {
    Value* v = new_value("", std::move(out_types[k]));
    v->producer = n;
    v->producer_index = static_cast<int>(k);
    n->outputs.push_back(v);
  }
  auto where = insert_before_ ? pos_.at(insert_before_) : nodes_.end();
  pos_[n] = nodes_.insert(where, std::move(node));
  return n;
}

void Graph::set_outputs(std::vector<Value*> outputs) {
  for (Value* v : outputs) UPDRAFT_CHECK(v != nullptr, "ir", "graph output is null");
  outputs_ = std::move(outputs);
}

void Graph::merge_origin(Node* into, const Node* from) {
  if (into == nullptr || from == nullptr || into == from) return;
  for (const std::string& o : from->origin)
    if (std::find(into->origin.begin(), into->origin.end(), o) == into->origin.end()) into->origin.push_back(o);
}

std::optional<double> Value::literal_scalar() const {
  if (!is_literal() || constant->numel() != 1) return std::nullopt;
  switch (type.dtype) {
    case DType::f32: return static_cast<double>(constant->ptr<float>()[0]);
    case DType::f64: return constant->ptr<double>()[0];
    case DType::boolean: return constant->ptr<bool>()[0] ? 1.0 : 0.0;
    default: return std::nullopt;
  }
}

void Graph::replace_all_uses(Value* from, Value* to) {
  if (from != to && to->producer != nullptr) {
    if (!from->origin.empty()) to->origin = from->origin;
    merge_origin(to->producer, from->producer);
  }
  for (auto& n : nodes_)
    for (Value*& in : n->inputs)
      if (in == from) in = to;
  for (Value*& o : outputs_)
    if (o == from) o = to;
}

void Graph::remove_node(Node* n) {
  for (Value* o : n->outputs)
    UPDRAFT_CHECK(use_count(o) == 0, "ir", "cannot remove node %" + std::to_string(n->id) + " (" +
                                               n->op_name() + "): its outputs are still used");
  if (insert_before_ == n) insert_before_ = nullptr;
  for (Value* o : n->outputs) o->producer = nullptr;
  auto it = pos_.at(n);
  pos_.erase(n);
  nodes_.erase(it);
}

std::vector<Node*> Graph::users(const Value* v) const {
  std::vector<Node*> r;
  for (const auto& n : nodes_)
    if (std::find(n->inputs.begin(), n->inputs.end(), v) != n->inputs.end()) r.push_back(n.get());
  return r;
}

int Graph::use_count(const Value* v) const {
  int c = 0;
  for (const auto& n : nodes_)
    for (const Value* in : n->inputs) c += (in == v);
  for (const Value* o : outputs_) c += (o == v);
  return c;
}

bool Graph::is_output(const Value* v) const {
  return std::find(outputs_.begin(), outputs_.end(), v) != outputs_.end();
}

void Graph::reinfer() {
  const OpTable& table = OpTable::get();
  for (auto& n : nodes_) {
    std::vector<TensorType> in_types;
    for (Value* v : n->inputs) in_types.push_back(v->type);
    auto out = table.infer(n->op_name(), in_types, n->attrs);
    for (size_t k = 0; k < out.size(); ++k) n->outputs[k]->type = out[k];
  }
}

std::vector<Node*> Graph::nodes() const {
  std::vector<Node*> r;
  r.reserve(nodes_.size());
  for (const auto& n : nodes_) r.push_back(n.get());
  return r;
}

std::vector<Value*> Graph::constants() const {
  std::vector<Value*> r;
  for (const auto& v : values_)
    if (v->is_constant()) r.push_back(v.get());
  return r;
}

}  // namespace updraft
