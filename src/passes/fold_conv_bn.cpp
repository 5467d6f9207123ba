// fold_conv_bn: batch_norm(conv2d(x, w[, b])) with constant weights and running statistics
// becomes conv2d(x, w', b'), where per output channel o
//   scale[o] = gamma[o] / sqrt(var[o] + eps)
//   w'[o]    = w[o] * scale[o]
//   b'[o]    = (b[o] - mean[o]) * scale[o] + beta[o]
// computed in double and stored in the conv's dtype. Only when the conv output feeds the
// batch_norm alone (another user would need the unnormalised value) and the conv has no
// epilogue yet (a residual or activation would sit between conv and norm).
#include "passes/fold_conv_bn.h"

#include <cmath>

#include "core/error.h"
#include "ir/op_table.h"

namespace updraft {

namespace {

double get(const Tensor& t, int64_t i) {
  return t.dtype() == DType::f64 ? t.ptr<double>()[i] : static_cast<double>(t.ptr<float>()[i]);
}
void set(Tensor& t, int64_t i, double x) {
  if (t.dtype() == DType::f64) t.ptr<double>()[i] = x;
  else t.ptr<float>()[i] = static_cast<float>(x);
}

bool is_float_const(const Value* v, DType dt) { return v->is_constant() && v->type.dtype == dt; }

// The batch_norm's per-channel constants, or false when one is not a constant of `channels`.
struct BnParams {
  const Tensor* mean = nullptr;
  const Tensor* var = nullptr;
  const Tensor* gamma = nullptr;  // null: 1
  const Tensor* beta = nullptr;   // null: 0
  double eps = 1e-5;
};
bool bn_params(const Node& bn, DType dt, int64_t channels, BnParams& p) {
  bool has_w = bn.attr("has_weight").b(), has_b = bn.attr("has_bias").b();
  size_t want = 3 + has_w + has_b;
  if (bn.inputs.size() != want) return false;
  for (size_t k = 1; k < bn.inputs.size(); ++k) {
    const Value* v = bn.inputs[k];
    if (!is_float_const(v, dt) || v->constant->numel() != channels) return false;
  }
  p.mean = &*bn.inputs[1]->constant;
  p.var = &*bn.inputs[2]->constant;
  size_t k = 3;
  if (has_w) p.gamma = &*bn.inputs[k++]->constant;
  if (has_b) p.beta = &*bn.inputs[k++]->constant;
  p.eps = bn.attr("eps").f();
  return true;
}

// Rewrite batch_norm(conv2d(x, w[, b])) into conv2d(x, w', b') with folded constants.
bool fold_one(Graph& g, Node* bn) {
  Value* y = bn->inputs.at(0);
  Node* conv = y->producer;
  if (!conv || conv->op_name() != "conv2d" || g.use_count(y) != 1) return false;
  if (conv->attr("has_residual").b() || conv->attr("activation").s() != "none") return false;
  DType dt = y->type.dtype;
  if (dt != DType::f32 && dt != DType::f64) return false;
  const Value* w = conv->inputs.at(1);
  if (!is_float_const(w, dt)) return false;
  bool has_bias = conv->attr("has_bias").b();
  if (has_bias && !is_float_const(conv->inputs.at(2), dt)) return false;
  const Tensor& wt = *w->constant;
  int64_t out_ch = wt.shape().at(0);
  BnParams p;
  if (!bn_params(*bn, dt, out_ch, p)) return false;

  Tensor new_w(dt, wt.shape());
  Tensor new_b(dt, {out_ch});
  int64_t per_ch = out_ch ? wt.numel() / out_ch : 0;
  for (int64_t o = 0; o < out_ch; ++o) {
    double scale = (p.gamma ? get(*p.gamma, o) : 1.0) / std::sqrt(get(*p.var, o) + p.eps);
    for (int64_t i = 0; i < per_ch; ++i) set(new_w, o * per_ch + i, get(wt, o * per_ch + i) * scale);
    double b = has_bias ? get(*conv->inputs[2]->constant, o) : 0.0;
    set(new_b, o, (b - get(*p.mean, o)) * scale + (p.beta ? get(*p.beta, o) : 0.0));
  }

  Value* wv = g.add_constant(w->name.empty() ? "" : w->name + "_bn", std::move(new_w));
  Value* bv = g.add_constant(w->name.empty() ? "" : w->name + "_bn_bias", std::move(new_b));
  Attrs attrs = conv->attrs;
  attrs["has_bias"] = Attr(true);
  g.set_insert_point(conv);  // x was available there; the new constants need no position
  Node* fused = g.add_node("conv2d", {conv->inputs[0], wv, bv}, std::move(attrs));
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
