// quantize_weights: linear(x, w f32 const [N, K], ...) -> linear_wq(x, w', [scale], ...), the
// header says which nodes and why. The conversion is written as an op over the constant and
// folded at once with the constant folder (as fold_conv_bn does), so it is recorded for refits.
#include "passes/quantize_weights.h"

#include <map>
#include <utility>

#include "core/error.h"
#include "ir/op_table.h"
#include "ir/ops/params.h"
#include "passes/constant_fold.h"

namespace updraft {

namespace {

struct Converted {
  Value* w = nullptr;
  Value* scale = nullptr;  // int8 and int4
};

// The folding op and the weight's name suffix for `dtype`; int4 needs K a multiple of its block
// (quantize_int4: a multiple of 64), and a weight that is not is stored int8, the next smaller
// form.
struct Form {
  const char* op;
  const char* suffix;
};
Form form_for(const Value* w, WeightDType dtype) {
  if (dtype == WeightDType::int4 && w->type.shape[1].value() % kInt4Block == 0) return {"quantize_int4", "_i4"};
  if (dtype == WeightDType::bf16) return {"to_bf16", "_bf16"};
  return {"quantize_rows", "_i8"};
}

bool wanted(const Node& n) {
  if (n.op_name() != "linear") return false;
  const Value* x = n.inputs.at(0);
  const Value* w = n.inputs.at(1);
  return x->type.dtype == DType::f32 && w->is_constant() && w->type.dtype == DType::f32 && w->rank() == 2 &&
         w->constant->numel() >= kMinQuantizedWeight;
}

// The weight in `dtype`, as folded constants; nullopt-like (w null) when the fold could not run.
Converted convert(Graph& g, Value* w, WeightDType dtype) {
  const Form f = form_for(w, dtype);
  const bool scaled = dtype != WeightDType::bf16;
  Node* n = g.add_node(f.op, {w});
  if (!fold_constant_node(g, n, /*always=*/true)) {
    g.remove_node(n);
    return {};
  }
  const FoldRecord& rec = g.folds().back();
  Converted c;
  c.w = g.value(rec.outputs.at(0));
  c.w->name = w->name.empty() ? "" : w->name + f.suffix;
  if (scaled) {
    c.scale = g.value(rec.outputs.at(1));
    c.scale->name = w->name.empty() ? "" : w->name + "_scale";
  }
  return c;
}

}  // namespace

bool quantize_weights(Graph& g, WeightDType dtype) {
  if (dtype == WeightDType::f32) return false;
  bool changed = false;
  std::map<Value*, Converted> done;  // a weight several linears share is converted once
  for (Node* n : g.nodes()) {
    if (!wanted(*n)) continue;
    Value* w = n->inputs[1];
    g.set_insert_point(n);
    auto it = done.find(w);
    if (it == done.end()) it = done.emplace(w, convert(g, w, dtype)).first;
    const Converted& c = it->second;
    if (!c.w) {
      g.set_insert_point(nullptr);
      continue;
    }
    g.set_insert_point(nullptr);
    replace_with_linear_wq(g, n, c.w, c.scale, "quantize_weights");
    changed = true;
  }
  return changed;
}

Node* replace_with_linear_wq(Graph& g, Node* n, Value* w_low, Value* scale, const char* pass) {
  std::vector<Value*> ins = {n->inputs[0], w_low};
  if (scale) ins.push_back(scale);
  ins.insert(ins.end(), n->inputs.begin() + 2, n->inputs.end());  // bias, residual
  Attrs attrs = n->attrs;
  attrs["has_weight_scale"] = Attr(scale != nullptr);
  g.set_insert_point(n);
  Node* q = g.add_node("linear_wq", std::move(ins), std::move(attrs));
  g.set_insert_point(nullptr);
  Graph::merge_origin(q, n);
  UPDRAFT_CHECK(q->output()->type == n->output()->type, pass,
                "linear_wq is typed " + q->output()->type.str() + ", the linear was " + n->output()->type.str() +
                    "; this is a bug in " + pass);
  q->output()->name = n->output()->name;
  g.replace_all_uses(n->output(), q->output());
  g.remove_node(n);
  return q;
}

}  // namespace updraft
