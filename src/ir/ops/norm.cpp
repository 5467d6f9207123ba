// Norms (docs/ops.md, "Norms"): softmax log_softmax layer_norm batch_norm rms_norm, and the
// training forms of batch norm: batch_norm_train (batch statistics) and batch_norm_backward.
// Optional inputs (weight, bias) are present exactly when their has_* attribute is true, in
// the order the table lists them; the shape functions enforce that so kernels can index by it.
#include "ir/op_table.h"
#include "ir/ops/params.h"

namespace updraft {
namespace {

const std::vector<DType> kFloats = {DType::f32, DType::f64};

void expect_inputs(InferCtx& c, int n, const std::string& why) {
  if (c.num_inputs() != n)
    c.fail("expects " + std::to_string(n) + " inputs (" + why + "), got " + std::to_string(c.num_inputs()));
}

// An affine parameter input: same dtype as x and exactly `shape`.
void expect_param(InferCtx& c, int k, const std::string& what, const Shape& shape) {
  const TensorType& p = c.in(k);
  if (p.dtype != c.in(0).dtype)
    c.fail(what + " is " + dtype_name(p.dtype) + " but x is " + dtype_name(c.in(0).dtype) + "; cast it to match");
  if (p.shape != shape) c.fail(what + " has shape " + shape_str(p.shape) + ", expected " + shape_str(shape));
}

OpDef softmax_like(const std::string& name, const std::string& doc) {
  OpDef d;
  d.name = name;
  d.attrs = {{"dim", Attr::Kind::Int, std::nullopt}};
  d.dtypes = kFloats;
  d.cls = OpClass::Norm;
  d.doc = doc;
  d.infer = [name](InferCtx& c) {
    wrap_dim(c.attr_int("dim"), static_cast<int>(c.in(0).shape.size()), name);
    c.set_output(0, c.in(0));
  };
  return d;
}

// layer_norm and rms_norm normalise the trailing `normalized_ndim` dims; params have that shape.
Shape trailing_shape(InferCtx& c) {
  const Shape& s = c.in(0).shape;
  int64_t k = c.attr_int("normalized_ndim");
  if (k < 1 || k > static_cast<int64_t>(s.size()))
    c.fail("normalized_ndim " + std::to_string(k) + " must be in [1, rank] for input " + shape_str(s));
  return Shape(s.end() - k, s.end());
}

}  // namespace

void register_norm_ops(OpTable& t) {
  OpDef softmax = softmax_like("softmax",
                               "exp(x - max) / sum(exp(x - max)) along dim; with zero_masked_rows, a line whose every "
                               "element is -inf gives 0s instead of NaN (torch's _safe_softmax: attention rows "
                               "with every key masked)");
  softmax.attrs.push_back({"zero_masked_rows", Attr::Kind::Bool, Attr(false)});
  t.add(softmax);
  t.add(softmax_like("log_softmax", "x - max - log(sum(exp(x - max))) along dim"));

  OpDef ln;
  ln.name = "layer_norm";
  ln.min_inputs = 1;
  ln.max_inputs = 3;
  ln.attrs = {{"normalized_ndim", Attr::Kind::Int, std::nullopt},
              {"eps", Attr::Kind::Float, Attr(1e-5)},
              {"has_weight", Attr::Kind::Bool, Attr(true)},
              {"has_bias", Attr::Kind::Bool, Attr(true)}};
  ln.dtypes = kFloats;
  ln.cls = OpClass::Norm;
  ln.doc = "(x - mean) / sqrt(var + eps) * weight + bias over the trailing normalized_ndim dims";
  ln.infer = [](InferCtx& c) {
    bool hw = c.attr_bool("has_weight"), hb = c.attr_bool("has_bias");
    expect_inputs(c, 1 + hw + hb, "x, then weight if has_weight, then bias if has_bias");
    Shape norm = trailing_shape(c);
    if (hw) expect_param(c, 1, "weight", norm);
    if (hb) expect_param(c, 1 + hw, "bias", norm);
    c.set_output(0, c.in(0));
  };
  t.add(std::move(ln));

  OpDef rms;
  rms.name = "rms_norm";
  rms.min_inputs = 1;
  rms.max_inputs = 2;
  rms.attrs = {{"normalized_ndim", Attr::Kind::Int, std::nullopt},
               {"eps", Attr::Kind::Float, Attr(1e-6)},
               {"has_weight", Attr::Kind::Bool, Attr(true)}};
  rms.dtypes = kFloats;
  rms.cls = OpClass::Norm;
  rms.doc = "x / sqrt(mean(x^2) + eps) * weight over the trailing normalized_ndim dims";
  rms.infer = [](InferCtx& c) {
    bool hw = c.attr_bool("has_weight");
    expect_inputs(c, 1 + hw, "x, then weight if has_weight");
    Shape norm = trailing_shape(c);
    if (hw) expect_param(c, 1, "weight", norm);
    c.set_output(0, c.in(0));
  };
  t.add(std::move(rms));

  OpDef bn;
  bn.name = "batch_norm";
  bn.min_inputs = 3;
  bn.max_inputs = 5;
  bn.attrs = {{"eps", Attr::Kind::Float, Attr(1e-5)},
              {"has_weight", Attr::Kind::Bool, Attr(true)},
              {"has_bias", Attr::Kind::Bool, Attr(true)}};
  bn.dtypes = kFloats;
  bn.cls = OpClass::Norm;
  bn.doc = "inference batch norm over channel dim 1: (x - mean) / sqrt(var + eps) * weight + bias";
  bn.infer = [](InferCtx& c) {
    bool hw = c.attr_bool("has_weight"), hb = c.attr_bool("has_bias");
    expect_inputs(c, 3 + hw + hb, "x, mean, var, then weight if has_weight, then bias if has_bias");
    const Shape& x = c.in(0).shape;
    if (x.size() < 2) c.fail("input must have rank >= 2 (channel dim 1), got " + shape_str(x));
    Shape ch = {x[1]};
    expect_param(c, 1, "running mean", ch);
    expect_param(c, 2, "running var", ch);
    if (hw) expect_param(c, 3, "weight", ch);
    if (hb) expect_param(c, 3 + hw, "bias", ch);
    c.set_output(0, c.in(0));
  };
  t.add(std::move(bn));

  // Train-mode batch norm (docs/training.md): the statistics of this batch over every dim but
  // channel dim 1. Outputs y, the batch mean [C] and the biased batch variance [C]; the lowering
  // derives invstd and the running statistics from them (elementwise ops on [C]).
  OpDef bnt;
  bnt.name = "batch_norm_train";
  bnt.min_inputs = 1;
  bnt.max_inputs = 3;
  bnt.num_outputs = 3;
  bnt.attrs = {{"eps", Attr::Kind::Float, Attr(1e-5)},
               {"has_weight", Attr::Kind::Bool, Attr(true)},
               {"has_bias", Attr::Kind::Bool, Attr(true)}};
  bnt.dtypes = kFloats;
  bnt.cls = OpClass::Norm;
  bnt.doc = "train-mode batch norm over channel dim 1 with this batch's mean and biased var; outputs y, mean, var";
  bnt.infer = [](InferCtx& c) {
    bool hw = c.attr_bool("has_weight"), hb = c.attr_bool("has_bias");
    expect_inputs(c, 1 + hw + hb, "x, then weight if has_weight, then bias if has_bias");
    const Shape& x = c.in(0).shape;
    if (x.size() < 2) c.fail("input must have rank >= 2 (channel dim 1), got " + shape_str(x));
    Shape ch = {x[1]};
    if (hw) expect_param(c, 1, "weight", ch);
    if (hb) expect_param(c, 1 + hw, "bias", ch);
    c.set_output(0, c.in(0));
    c.set_output(1, {c.in(0).dtype, ch});
    c.set_output(2, {c.in(0).dtype, ch});
  };
  t.add(std::move(bnt));

  // Its gradient from the saved batch mean and invstd (1 / sqrt(var + eps)): outputs dx, dw
  // (sum of dy * x_hat) and db (sum of dy), each per channel.
  OpDef bnb;
  bnb.name = "batch_norm_backward";
  bnb.min_inputs = 4;
  bnb.max_inputs = 5;
  bnb.num_outputs = 3;
  bnb.attrs = {{"has_weight", Attr::Kind::Bool, Attr(true)}};
  bnb.dtypes = kFloats;
  bnb.cls = OpClass::Norm;
  bnb.doc = "gradient of train-mode batch norm: dy, x, mean, invstd, [weight] -> dx, dweight, dbias";
  bnb.infer = [](InferCtx& c) {
    bool hw = c.attr_bool("has_weight");
    expect_inputs(c, 4 + hw, "dy, x, mean, invstd, then weight if has_weight");
    const Shape& x = c.in(1).shape;
    if (x.size() < 2) c.fail("input must have rank >= 2 (channel dim 1), got " + shape_str(x));
    if (c.in(0).shape != x || c.in(0).dtype != c.in(1).dtype)
      c.fail("dy " + c.in(0).str() + " and x " + c.in(1).str() + " must have one shape and dtype");
    Shape ch = {x[1]};
    expect_param(c, 2, "mean", ch);
    expect_param(c, 3, "invstd", ch);
    if (hw) expect_param(c, 4, "weight", ch);
    c.set_output(0, c.in(1));
    c.set_output(1, {c.in(0).dtype, ch});
    c.set_output(2, {c.in(0).dtype, ch});
  };
  t.add(std::move(bnb));
}

}  // namespace updraft
