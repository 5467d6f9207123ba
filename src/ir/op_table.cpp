#include "ir/op_table.h"

#include <algorithm>
#include <mutex>


namespace updraft {

const TensorType& InferCtx::in(int k) const {
  if (k < 0 || k >= num_inputs()) fail("input " + std::to_string(k) + " is missing");
  return inputs_[k];
}

const Attr& InferCtx::attr(const std::string& name) const {
  auto it = attrs_.find(name);
  if (it != attrs_.end()) return it->second;
  for (const AttrSpec& s : op_.attrs)
    if (s.name == name && s.default_value) return *s.default_value;
  fail("attribute '" + name + "' is required");
}

void InferCtx::fail(const std::string& msg) const { throw Error(op_.name, msg); }

void InferCtx::set_output(int k, TensorType t) {
  if (static_cast<int>(outputs_.size()) <= k) outputs_.resize(k + 1);
  outputs_[k] = std::move(t);
}

const OpTable& OpTable::get() {
  static OpTable* table = [] {
    auto* t = new OpTable();
    register_elementwise_ops(*t);
    register_reduction_ops(*t);
    register_norm_ops(*t);
    register_data_movement_ops(*t);
    register_compute_ops(*t);
    register_grouped_ops(*t);
    register_quantized_ops(*t);
    register_fused_ops(*t);
    register_random_ops(*t);
    return t;
  }();
  return *table;
}

const OpDef* OpTable::find(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &ops_[it->second];
}

const OpDef& OpTable::at(const std::string& name) const {
  const OpDef* d = find(name);
  if (!d) throw Error("ir", "unknown op '" + name + "' (see docs/ops.md for the op table)");
  return *d;
}

std::vector<std::string> OpTable::names() const {
  std::vector<std::string> r;
  for (const OpDef& d : ops_) r.push_back(d.name);
  return r;
}

void OpTable::add(OpDef def) {
  UPDRAFT_CHECK(find(def.name) == nullptr, "ir", "op '" + def.name + "' is declared twice");
  UPDRAFT_CHECK(static_cast<bool>(def.infer), "ir", "op '" + def.name + "' has no shape function");
  // ops_ must not reallocate after Graph nodes point into it: reserve generously up front.
  if (ops_.capacity() == 0) ops_.reserve(512);
  UPDRAFT_CHECK(ops_.size() < ops_.capacity(), "ir", "op table full; raise the reserve in op_table.cpp");
  index_.emplace(def.name, ops_.size());
  ops_.push_back(std::move(def));
}

std::vector<TensorType> OpTable::infer(const std::string& op, const std::vector<TensorType>& inputs,
                                       const Attrs& attrs) const {
  return infer(at(op), inputs, attrs);
}

std::vector<TensorType> OpTable::infer(const OpDef& d, const std::vector<TensorType>& inputs, const Attrs& attrs) {
  const std::string& op = d.name;
  int n = static_cast<int>(inputs.size());
  if (n < d.min_inputs || (d.max_inputs >= 0 && n > d.max_inputs)) {
    std::string want = d.max_inputs < 0 ? "at least " + std::to_string(d.min_inputs)
                       : d.min_inputs == d.max_inputs
                           ? std::to_string(d.min_inputs)
                           : std::to_string(d.min_inputs) + " to " + std::to_string(d.max_inputs);
    throw Error(op, "takes " + want + " inputs, got " + std::to_string(n));
  }
  for (const auto& [name, value] : attrs) {
    auto spec = std::find_if(d.attrs.begin(), d.attrs.end(), [&n = name](const AttrSpec& s) { return s.name == n; });
    if (spec == d.attrs.end()) throw Error(op, "unknown attribute '" + name + "'");
    bool ok = value.kind() == spec->kind ||
              (spec->kind == Attr::Kind::Float && value.kind() == Attr::Kind::Int) ||
              (spec->kind == Attr::Kind::Bool && value.kind() == Attr::Kind::Int) ||
              // Symbolic specs take their static forms too (a symbolic attr whose sizes are
              // all known is normalised to Ints / Int).
              (spec->kind == Attr::Kind::Dims && value.kind() == Attr::Kind::Ints) ||
              (spec->kind == Attr::Kind::Sym && value.kind() == Attr::Kind::Int);
    if (!ok) throw Error(op, "attribute '" + name + "' has the wrong kind (" + value.str() + ")");
  }
  for (const AttrSpec& s : d.attrs)
    if (!s.default_value && !attrs.count(s.name)) throw Error(op, "attribute '" + s.name + "' is required");
  for (const TensorType& t : inputs)
    if (t.shape.size() > static_cast<size_t>(kMaxDims))
      throw Error(op, "rank " + std::to_string(t.shape.size()) + " exceeds the engine limit of 8");
  if (!d.dtypes.empty() && n > 0 &&
      std::find(d.dtypes.begin(), d.dtypes.end(), inputs[0].dtype) == d.dtypes.end()) {
    std::string list;
    for (DType t : d.dtypes) list += std::string(list.empty() ? "" : ", ") + dtype_name(t);
    throw Error(op, std::string("input 0 is ") + dtype_name(inputs[0].dtype) + "; supported: " + list);
  }
  InferCtx ctx(d, inputs, attrs);
  d.infer(ctx);
  if (static_cast<int>(ctx.outputs().size()) != d.num_outputs && d.num_outputs >= 0)
    throw Error(op, "shape function produced " + std::to_string(ctx.outputs().size()) + " outputs, expected " +
                        std::to_string(d.num_outputs));
  return ctx.outputs();
}

std::optional<std::string> OpTable::check(const std::string& op, const std::vector<TensorType>& inputs,
                                          const Attrs& attrs) const {
  if (!find(op)) return "the engine has no op '" + op + "'";
  try {
    infer(op, inputs, attrs);
  } catch (const Error& e) {
    return std::string(e.what());
  }
  return std::nullopt;
}

Shape broadcast_shapes(const Shape& a, const Shape& b, const std::string& op) {
  size_t n = std::max(a.size(), b.size());
  Shape out(n);
  for (size_t i = 0; i < n; ++i) {
    const Dim* da = i < n - a.size() ? nullptr : &a[i - (n - a.size())];
    const Dim* db = i < n - b.size() ? nullptr : &b[i - (n - b.size())];
    if (!da) { out[i] = *db; continue; }
    if (!db) { out[i] = *da; continue; }
    if (*da == *db) out[i] = *da;
    else if (da->is_static() && da->value() == 1) out[i] = *db;
    else if (db->is_static() && db->value() == 1) out[i] = *da;
    else throw Error(op, "shapes " + shape_str(a) + " and " + shape_str(b) + " do not broadcast");
  }
  return out;
}

int normalize_dim(int64_t dim, int rank, const std::string& op) {
  int64_t d = dim < 0 ? dim + rank : dim;
  if (d < 0 || d >= std::max(rank, 1))
    throw Error(op, "dim " + std::to_string(dim) + " is out of range for rank " + std::to_string(rank));
  return static_cast<int>(d);
}

}  // namespace updraft
