// fold_conv_bn: batch_norm(conv2d(x, w[, b])) with constant weights and running statistics
// becomes conv2d(x, w, scale, b') {has_weight_scale}, where per output channel o
//   scale[o] = gamma[o] * rsqrt(var[o] + eps)
//   b'[o]    = (b[o] - mean[o]) * scale[o] + beta[o]
// and the conv uses w[o] * scale[o] as its weights (docs/ops.md). The scale is applied by the
// conv kernel when it prepacks the weights, which reads every weight anyway: so the fold makes
// no scaled copy of the weights (which the compile would write, the compile cache store and
// check, and the process keep resident beside the prepacked copy; ResNet-50's size in
// docs/BENCHMARKS.md, "Code-comment figures"), the weights
// stay the caller's parameters, and a new checkpoint refits without a pass over them.
// The per-channel arithmetic is written as engine ops over the constants and folded at once with
// the constant folder's kernels, in the conv's dtype (as eager batch_norm computes it). Folding
// through ops records each step (Graph::record_fold), so the compile cache can replay the fold
// for a new checkpoint. A conv that already has a scale (a second batch norm) gets the product.
// Only when the conv output feeds the batch_norm alone (another user would need the
// unnormalised value) and the conv has no epilogue yet (a residual or activation would sit
// between conv and norm).
#include "passes/fold_conv_bn.h"

#include "core/error.h"
#include "ir/op_table.h"
#include "passes/constant_fold.h"

namespace updraft {

namespace {

bool is_float_const(const Value* v, DType dt) { return v->is_constant() && v->type.dtype == dt; }

// The batch_norm's per-channel constants, or false when one is not a constant of `channels`.
struct BnParams {
  Value* mean = nullptr;
  Value* var = nullptr;
  Value* gamma = nullptr;  // null: 1
  Value* beta = nullptr;   // null: 0
  double eps = 1e-5;
};
bool bn_params(const Node& bn, DType dt, int64_t channels, BnParams& p) {
  bool has_w = bn.attr("has_weight").b(), has_b = bn.attr("has_bias").b();
  size_t want = 3 + has_w + has_b;
  if (bn.inputs.size() != want) return false;
  for (size_t k = 1; k < bn.inputs.size(); ++k) {
    const Value* v = bn.inputs[k];
    if (!is_float_const(v, dt) || v->constant->numel() != channels || v->rank() != 1) return false;
  }
  p.mean = bn.inputs[1];
  p.var = bn.inputs[2];
  size_t k = 3;
  if (has_w) p.gamma = bn.inputs[k++];
  if (has_b) p.beta = bn.inputs[k++];
  p.eps = bn.attr("eps").f();
  return true;
}

// Adds `op` over constants and folds it; the result is a constant (or, should a kernel be
// missing, the node's output: still correct, computed at run time).
Value* folded(Graph& g, const std::string& op, std::vector<Value*> ins, Attrs attrs = {}) {
  Node* n = g.add_node(op, std::move(ins), std::move(attrs));
  Value* out = n->output();
  if (!fold_constant_node(g, n, /*always=*/true)) return out;
  return g.value(g.folds().back().outputs.at(0));
}

// Rewrite batch_norm(conv2d(x, w[, b])) into conv2d(x, w', b') with folded constants.
bool fold_one(Graph& g, Node* bn) {
  Value* y = bn->inputs.at(0);
  Node* conv = y->producer;
  if (!conv || conv->op_name() != "conv2d" || g.use_count(y) != 1) return false;
  if (conv->attr("has_residual").b() || conv->attr("activation").s() != "none") return false;
  DType dt = y->type.dtype;
  if (dt != DType::f32 && dt != DType::f64) return false;
  Value* w = conv->inputs.at(1);
  if (!is_float_const(w, dt)) return false;
  const bool had_scale = conv->attr("has_weight_scale").b();
  if (had_scale && !is_float_const(conv->inputs.at(2), dt)) return false;
  const bool has_bias = conv->attr("has_bias").b();
  Value* old_bias = has_bias ? conv->inputs.at(had_scale ? 3 : 2) : nullptr;
  if (has_bias && !is_float_const(old_bias, dt)) return false;
  const std::vector<int64_t> wshape = w->constant->shape();
  int64_t out_ch = wshape.at(0);
  BnParams p;
  if (!bn_params(*bn, dt, out_ch, p)) return false;

  g.set_insert_point(conv);  // the new nodes fold away; the conv goes where the old one was
  Tensor eps_t(dt, {});
  if (dt == DType::f64) eps_t.ptr<double>()[0] = p.eps;
  else eps_t.ptr<float>()[0] = static_cast<float>(p.eps);
  Value* eps = g.add_constant("", std::move(eps_t));
  Value* scale = folded(g, "rsqrt", {folded(g, "add", {p.var, eps})});
  if (p.gamma) scale = folded(g, "mul", {p.gamma, scale});
  Value* centred = has_bias ? folded(g, "sub", {old_bias, p.mean}) : folded(g, "neg", {p.mean});
  Value* bv = folded(g, "mul", {centred, scale});
  if (p.beta) bv = folded(g, "add", {bv, p.beta});
  Value* wscale = had_scale ? folded(g, "mul", {conv->inputs[2], scale}) : scale;
  if (wscale->is_constant()) wscale->name = w->name.empty() ? "" : w->name + "_bn_scale";
  if (bv->is_constant()) bv->name = w->name.empty() ? "" : w->name + "_bn_bias";
  Attrs attrs = conv->attrs;
  attrs["has_bias"] = Attr(true);
  attrs["has_weight_scale"] = Attr(true);
  Node* fused = g.add_node("conv2d", {conv->inputs[0], w, wscale, bv}, std::move(attrs));
  Graph::merge_origin(fused, conv);
  g.set_insert_point(nullptr);
  UPDRAFT_CHECK(fused->output()->type == bn->output()->type, "fold_conv_bn",
                "folded conv2d is typed " + fused->output()->type.str() + ", the batch_norm was " +
                    bn->output()->type.str() + "; this is a bug in fold_conv_bn");
  fused->output()->name = bn->output()->name;
  g.replace_all_uses(bn->output(), fused->output());
  g.remove_node(bn);
  g.remove_node(conv);
  return true;
}

}  // namespace

bool fold_conv_bn(Graph& g) {
  bool changed = false;
  for (Node* n : g.nodes())
    if (n->op_name() == "batch_norm") changed |= fold_one(g, n);
  return changed;
}

}  // namespace updraft
