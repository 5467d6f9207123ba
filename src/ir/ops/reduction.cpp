// Reductions (docs/ops.md, "Reductions"): sum mean amax amin prod var argmax argmin cumsum sort topk.
#include "ir/op_table.h"
#include "ir/ops/params.h"

namespace updraft {
namespace {

// Output shape of a reduction over `mask`: reduced dims vanish, or become 1 with keepdim.
Shape reduced_shape(const Shape& in, const std::vector<bool>& mask, bool keepdim) {
  Shape out;
  for (size_t i = 0; i < in.size(); ++i) {
    if (!mask[i]) out.push_back(in[i]);
    else if (keepdim) out.push_back(Dim(1));
  }
  return out;
}

// Ops with no identity element (max/min/arg*) cannot reduce an empty dim; torch raises too.
void reject_empty(InferCtx& c, const Shape& in, const std::vector<bool>& mask) {
  for (size_t i = 0; i < in.size(); ++i)
    if (mask[i] && in[i].is_static() && in[i].value() == 0)
      c.fail("cannot reduce dim " + std::to_string(i) + " of size 0 (no identity); shape " + shape_str(in));
}

OpDef multi_dim_reduction(const std::string& name, std::vector<DType> dtypes, bool needs_nonempty,
                          const std::string& doc) {
  OpDef d;
  d.name = name;
  d.attrs = {{"dims", Attr::Kind::Ints, Attr(std::vector<int64_t>{})}, {"keepdim", Attr::Kind::Bool, Attr(false)}};
  d.dtypes = std::move(dtypes);
  d.cls = OpClass::Reduction;
  d.doc = doc;
  d.infer = [name, needs_nonempty](InferCtx& c) {
    const TensorType& x = c.in(0);
    auto mask = reduce_mask(c.attr_ints("dims"), static_cast<int>(x.shape.size()), name);
    if (needs_nonempty) reject_empty(c, x.shape, mask);
    c.set_output(0, {x.dtype, reduced_shape(x.shape, mask, c.attr_bool("keepdim"))});
  };
  return d;
}

OpDef arg_reduction(const std::string& name, const std::string& doc) {
  OpDef d;
  d.name = name;
  d.attrs = {{"dim", Attr::Kind::Int, std::nullopt}, {"keepdim", Attr::Kind::Bool, Attr(false)}};
  d.dtypes = {DType::f32, DType::f64, DType::i64, DType::i32};
  d.cls = OpClass::Reduction;
  d.doc = doc;
  d.infer = [name](InferCtx& c) {
    const TensorType& x = c.in(0);
    auto mask = reduce_mask({c.attr_int("dim")}, static_cast<int>(x.shape.size()), name);
    reject_empty(c, x.shape, mask);
    c.set_output(0, {DType::i64, reduced_shape(x.shape, mask, c.attr_bool("keepdim"))});
  };
  return d;
}

}  // namespace

void register_reduction_ops(OpTable& t) {
  const std::vector<DType> floats = {DType::f32, DType::f64};
  const std::vector<DType> numeric = {DType::f32, DType::f64, DType::i64, DType::i32};
  t.add(multi_dim_reduction("sum", {DType::f32, DType::f64, DType::i64}, false, "sum over dims"));
  t.add(multi_dim_reduction("mean", floats, false, "mean over dims (NaN over an empty set)"));
  t.add(multi_dim_reduction("prod", {DType::f32, DType::f64, DType::i64}, false, "product over dims"));
  t.add(multi_dim_reduction("amax", numeric, true, "maximum over dims (NaN propagates)"));
  t.add(multi_dim_reduction("amin", numeric, true, "minimum over dims (NaN propagates)"));
  t.add(arg_reduction("argmax", "index of the first maximum along dim (NaN counts as maximal)"));
  t.add(arg_reduction("argmin", "index of the first minimum along dim (NaN counts as minimal)"));

  OpDef var = multi_dim_reduction("var", floats, false, "variance over dims: sum((x-mean)^2) / max(N-correction, 0)");
  var.attrs.push_back({"correction", Attr::Kind::Float, Attr(1.0)});
  t.add(std::move(var));

  OpDef cumsum;
  cumsum.name = "cumsum";
  cumsum.attrs = {{"dim", Attr::Kind::Int, std::nullopt}};
  cumsum.dtypes = {DType::f32, DType::f64, DType::i64};
  cumsum.cls = OpClass::Reduction;
  cumsum.doc = "inclusive prefix sum along dim";
  cumsum.infer = [](InferCtx& c) {
    const TensorType& x = c.in(0);
    wrap_dim(c.attr_int("dim"), static_cast<int>(x.shape.size()), "cumsum");
    c.set_output(0, x);
  };
  t.add(std::move(cumsum));

  OpDef sort;
  sort.name = "sort";
  sort.attrs = {{"dim", Attr::Kind::Int, std::nullopt}, {"descending", Attr::Kind::Bool, Attr(false)}};
  sort.dtypes = numeric;
  sort.cls = OpClass::Reduction;
  sort.num_outputs = 2;
  sort.doc = "stable sort along dim: values and their i64 indices (NaN sorts above every number)";
  sort.infer = [](InferCtx& c) {
    const TensorType& x = c.in(0);
    wrap_dim(c.attr_int("dim"), static_cast<int>(x.shape.size()), "sort");
    c.set_output(0, x);
    c.set_output(1, {DType::i64, x.shape});
  };
  t.add(std::move(sort));

  OpDef topk;
  topk.name = "topk";
  topk.attrs = {{"dim", Attr::Kind::Int, std::nullopt},
                {"k", Attr::Kind::Int, std::nullopt},
                {"largest", Attr::Kind::Bool, Attr(true)},
                {"sorted", Attr::Kind::Bool, Attr(true)}};
  topk.dtypes = numeric;
  topk.cls = OpClass::Reduction;
  topk.num_outputs = 2;
  topk.doc = "the k largest (smallest) along dim with their i64 indices, chosen and ordered as ATen's CPU "
             "topk does (kernels/topk_select.h)";
  topk.infer = [](InferCtx& c) {
    const TensorType& x = c.in(0);
    int rank = static_cast<int>(x.shape.size());
    int64_t k = c.attr_int("k");
    if (k < 0) c.fail("k is " + std::to_string(k) + "; expected k >= 0");
    Shape out = x.shape;
    if (rank == 0) {
      if (k > 1) c.fail("k is " + std::to_string(k) + " for a 0-d input; expected k <= 1");
    } else {
      int d = wrap_dim(c.attr_int("dim"), rank, "topk");
      if (x.shape[d].is_static() && k > x.shape[d].value())
        c.fail("k is " + std::to_string(k) + " but dim " + std::to_string(d) + " has size " +
               std::to_string(x.shape[d].value()));
      if (!x.shape[d].is_static()) c.fail("topk along a symbolic dim (k must be checked against its size)");
      out[d] = Dim(k);
    }
    c.set_output(0, {x.dtype, out});
    c.set_output(1, {DType::i64, out});
  };
  t.add(std::move(topk));
}

}  // namespace updraft
