// Data movement (docs/ops.md, "Data movement"): reshape permute slice concat expand copy
// embedding index_select gather scatter pad split flip as_strided channel_block. Shape functions work on symbolic
// Dims; the
// clamping/pad rules they share with the kernels live in ir/ops/params.h.
#include <algorithm>
#include <limits>
#include <optional>

#include "core/checked.h"
#include "ir/op_table.h"
#include "ir/ops/params.h"

namespace updraft {
namespace {

// Data movement copies elements by size, so no dtype list: every dtype is accepted.
OpDef movement(const std::string& name, std::vector<AttrSpec> attrs, const std::string& doc) {
  OpDef d;
  d.name = name;
  d.attrs = std::move(attrs);
  d.cls = OpClass::DataMovement;
  d.doc = doc;
  return d;
}

// A product of dims as constant * (symbolic factors), flattening Mul nodes so that
// s0*12*64 / 64 can cancel to s0*12 instead of staying a floordiv.
struct Monomial {
  int64_t coeff = 1;
  std::vector<Dim> factors;
  void absorb(const Dim& d) {
    // Checked: a shape attribute is input (a parsed graph or model file), and sizes whose product
    // leaves int64 are an error, not a wrapped count (found by the text-IR fuzzer).
    if (d.is_static()) coeff = checked_mul<int64_t>(coeff, d.value(), "ir", "reshape element count");
    else if (d.kind() == Dim::Kind::Mul) {
      auto [a, b] = d.operands();
      absorb(a);
      absorb(b);
    } else {
      factors.push_back(d);
    }
  }
  Dim product() const {
    Dim r(1);
    for (const Dim& f : factors) r = r * f;
    return r * coeff;
  }
  // this / o when o's factors are a sub-multiset of ours (structurally) and the constant
  // divides: exact for every binding. nullopt when that cannot be shown.
  std::optional<Monomial> divide(const Monomial& o) const {
    if (o.coeff == 0 || coeff % o.coeff != 0) return std::nullopt;
    Monomial q = *this;
    q.coeff /= o.coeff;
    for (const Dim& f : o.factors) {
      auto it = std::find(q.factors.begin(), q.factors.end(), f);
      if (it == q.factors.end()) return std::nullopt;
      q.factors.erase(it);
    }
    return q;
  }
  bool same_as(const Monomial& o) const {
    auto q = divide(o);
    return q && q->coeff == 1 && q->factors.empty();
  }
};

// reshape: the target may hold symbolic dims (e.g. [s0, s1, 12, 64], or [(s0*s1), 768]) and at
// most one -1, inferred symbolically. When the element counts cannot be shown equal
// symbolically the node is still accepted: the plan re-runs this function with concrete sizes
// for every binding, where the static check below rejects a mismatch before anything runs.
void infer_reshape(InferCtx& c) {
  const TensorType& x = c.in(0);
  const Shape target = c.attr_dims("shape");
  // Error texts are built only on failure: this runs for every reshape a parse, pass or plan
  // build meets (formatting them on success was ~half of it).
  auto target_str = [&] { return c.attr("shape").str(); };
  Monomial in;
  for (const Dim& d : x.shape) in.absorb(d);
  if (in.coeff == 0) in.factors.clear();  // a static 0 anywhere makes the numel 0 for every binding
  int infer_at = -1;
  Monomial known;
  for (size_t i = 0; i < target.size(); ++i) {
    const Dim& t = target[i];
    if (t.is_static() && t.value() == -1) {
      if (infer_at >= 0) c.fail("shape " + target_str() + " has more than one -1");
      infer_at = static_cast<int>(i);
    } else if (t.is_static() && t.value() < 0) {
      c.fail("shape " + target_str() + " has a negative size other than -1");
    } else {
      known.absorb(t);
    }
  }
  if (known.coeff == 0) known.factors.clear();
  Shape out = target;
  auto what = [&] { return "cannot reshape " + shape_str(x.shape) + " to " + target_str(); };
  if (infer_at >= 0) {
    if (known.coeff == 0) c.fail(what() + ": the -1 is ambiguous when other sizes multiply to 0");
    if (auto q = in.divide(known)) {
      out[infer_at] = q->product();
    } else if (in.factors.empty() && known.factors.empty()) {
      c.fail(what() + ": " + std::to_string(in.coeff) + " elements do not divide by " + std::to_string(known.coeff));
    } else {
      out[infer_at] = floordiv(shape_numel(x.shape), known.product());  // exact for valid bindings
    }
  } else if (in.factors.empty() && known.factors.empty()) {
    if (in.coeff != known.coeff)
      c.fail(what() + ": " + std::to_string(in.coeff) + " elements vs " + std::to_string(known.coeff));
  } else if (known.factors.empty()) {
    // A static target for a symbolic input only fits one binding when the input's factors are
    // sizes that vary (s0, s0+1). One that may be constant over every valid binding (a slice's
    // max(s0-max(s0-1,0),0), which is 1 for s0 >= 1) is left to the plan's check, like any
    // reshape that cannot be shown valid here.
    bool varies = true;
    for (const Dim& f : in.factors) varies = varies && (f.kind() == Dim::Kind::Sym || f.kind() == Dim::Kind::Add);
    if (varies) c.fail(what() + ": the input size is symbolic; use -1 or symbolic sizes for the dims that vary");
  } else if (in.factors.size() == known.factors.size() && !in.same_as(known)) {
    // The same symbolic factors with a different constant is wrong for every binding.
    auto q = in.divide(known), r = known.divide(in);
    if ((q && q->factors.empty()) || (r && r->factors.empty()))
      c.fail(what() + ": the element counts differ by a constant factor");
  }
  c.set_output(0, {x.dtype, out});
}

void infer_permute(InferCtx& c) {
  const TensorType& x = c.in(0);
  int rank = static_cast<int>(x.shape.size());
  const auto& dims = c.attr_ints("dims");
  if (static_cast<int>(dims.size()) != rank)
    c.fail("dims " + Attr(dims).str() + " must list each of the " + std::to_string(rank) + " dims once");
  std::vector<bool> seen(rank, false);
  Shape out;
  for (int64_t d : dims) {
    int k = normalize_dim(d, rank, "permute");
    if (seen[k]) c.fail("dims " + Attr(dims).str() + " repeats dim " + std::to_string(k));
    seen[k] = true;
    out.push_back(x.shape[k]);
  }
  c.set_output(0, {x.dtype, out});
}

// Symbolic length of x[start:end:step] along a dim of size n, with PyTorch clamping.
Dim slice_length(InferCtx& c, const Dim& n, int64_t start, int64_t end, int64_t step) {
  if (step <= 0) c.fail("step must be positive, got " + std::to_string(step));
  if (n.is_static()) return Dim(slice_range(n.value(), start, end, step).len);
  constexpr int64_t kToEnd = std::numeric_limits<int64_t>::max() / 2;  // x[a:] lowers to INT64_MAX
  // Clamp each bound into [0, n]; a negative bound counts from the end.
  auto bound = [&](int64_t v) -> Dim {
    if (v >= kToEnd) return n;
    if (v >= 0) return v == 0 ? Dim(0) : min(Dim(v), n);
    return max(n + Dim(v), Dim(0));
  };
  Dim s = bound(start), e = bound(end);
  Dim len = (start == 0 && e == n) ? n : max(e - s, Dim(0));
  return floordiv(len + Dim(step - 1), Dim(step));
}

// start/end may be symbolic (x[:, :s1]). A symbolic bound is taken as already clamped into
// [0, n], which is what the front end passes (PyTorch's guards established it); the plan
// re-runs this with concrete bounds and PyTorch's clamping, so every binding gets PyTorch's
// result or a shape error, never a mis-sized buffer.
Dim symbolic_slice_length(InferCtx& c, const Dim& n, const Dim& start, const Dim& end, int64_t step) {
  if (step <= 0) c.fail("step must be positive, got " + std::to_string(step));
  constexpr int64_t kToEnd = std::numeric_limits<int64_t>::max() / 2;
  auto bound = [&](const Dim& v) -> Dim {
    if (!v.is_static()) return v;
    int64_t k = v.value();
    if (k >= kToEnd) return n;
    if (k >= 0) return k == 0 ? Dim(0) : (n.is_static() ? Dim(std::min(k, n.value())) : min(Dim(k), n));
    return n.is_static() ? Dim(std::max(n.value() + k, int64_t{0})) : max(n + Dim(k), Dim(0));
  };
  Dim s = bound(start), e = bound(end);
  Dim len = s.is_static() && s.value() == 0 ? e : max(e - s, Dim(0));
  return floordiv(len + Dim(step - 1), Dim(step));
}

void infer_slice(InferCtx& c) {
  const TensorType& x = c.in(0);
  int dim = normalize_dim(c.attr_int("dim"), static_cast<int>(x.shape.size()), "slice");
  if (x.shape.empty()) c.fail("cannot slice a 0-d tensor");
  Shape out = x.shape;
  Dim start = c.attr_dim("start"), end = c.attr_dim("end");
  if (start.is_static() && end.is_static())
    out[dim] = slice_length(c, x.shape[dim], start.value(), end.value(), c.attr_int("step"));
  else
    out[dim] = symbolic_slice_length(c, x.shape[dim], start, end, c.attr_int("step"));
  c.set_output(0, {x.dtype, out});
}

void infer_concat(InferCtx& c) {
  const TensorType& x0 = c.in(0);
  int rank = static_cast<int>(x0.shape.size());
  if (rank == 0) c.fail("cannot concatenate 0-d tensors; reshape them to [1] first");
  int dim = normalize_dim(c.attr_int("dim"), rank, "concat");
  Shape out = x0.shape;
  for (int k = 1; k < c.num_inputs(); ++k) {
    const TensorType& xk = c.in(k);
    if (xk.dtype != x0.dtype)
      c.fail("input " + std::to_string(k) + " is " + dtype_name(xk.dtype) + ", input 0 is " + dtype_name(x0.dtype));
    if (static_cast<int>(xk.shape.size()) != rank)
      c.fail("input " + std::to_string(k) + " has shape " + shape_str(xk.shape) + ", rank differs from " +
             shape_str(x0.shape));
    for (int d = 0; d < rank; ++d)
      if (d != dim && xk.shape[d] != x0.shape[d])
        c.fail("input " + std::to_string(k) + " has shape " + shape_str(xk.shape) + ", incompatible with " +
               shape_str(x0.shape) + " outside dim " + std::to_string(dim));
    out[dim] = out[dim] + xk.shape[dim];
  }
  c.set_output(0, {x0.dtype, out});
}

// expand: new leading dims, size-1 dims broadcast, -1 keeps the input's size. Target dims may be
// symbolic: a symbolic leading dim, a size-1 dim broadcast to a symbolic size, or a symbolic
// dim that equals the input's. A symbolic target against a different symbolic input dim cannot
// be shown valid here; it is accepted and the plan checks it with concrete sizes per binding.
void infer_expand(InferCtx& c) {
  const TensorType& x = c.in(0);
  const Shape target = c.attr_dims("shape");
  auto target_str = [&] { return c.attr("shape").str(); };  // only on failure, as in infer_reshape
  size_t rank = x.shape.size();
  if (target.size() < rank)
    c.fail("shape " + target_str() + " has fewer dims than the input " + shape_str(x.shape));
  size_t lead = target.size() - rank;
  Shape out;
  for (size_t i = 0; i < target.size(); ++i) {
    const Dim& t = target[i];
    bool t_static = t.is_static();
    if (i < lead) {
      if (t_static && t.value() < 0) c.fail("shape " + target_str() + ": new leading dims cannot be -1");
      out.push_back(t);
      continue;
    }
    const Dim& d = x.shape[i - lead];
    if ((t_static && t.value() == -1) || t == d) out.push_back(d);
    else if (d.is_static() && d.value() == 1 && (!t_static || t.value() >= 0)) out.push_back(t);
    else if (!t_static && !d.is_static()) out.push_back(t);
    else
      c.fail("cannot expand " + shape_str(x.shape) + " to " + target_str() + " (dim " + std::to_string(i) +
             "); only size-1 dims broadcast, and symbolic dims need -1 or the same size");
  }
  c.set_output(0, {x.dtype, out});
}

void check_index_dtype(InferCtx& c, int k, bool allow_i32) {
  DType t = c.in(k).dtype;
  if (t != DType::i64 && !(allow_i32 && t == DType::i32))
    c.fail(std::string("index input is ") + dtype_name(t) + "; it must be i64" + (allow_i32 ? " or i32" : ""));
}

void infer_embedding(InferCtx& c) {
  const TensorType& w = c.in(0);
  if (w.shape.size() != 2) c.fail("weight must be [V, D], got " + shape_str(w.shape));
  check_index_dtype(c, 1, true);
  Shape out = c.in(1).shape;
  out.push_back(w.shape[1]);
  c.set_output(0, {w.dtype, out});
}

void infer_index_select(InferCtx& c) {
  const TensorType& x = c.in(0);
  check_index_dtype(c, 1, false);
  if (c.in(1).shape.size() > 1) c.fail("index must be 1-d, got " + shape_str(c.in(1).shape));
  int dim = normalize_dim(c.attr_int("dim"), static_cast<int>(x.shape.size()), "index_select");
  Shape out = x.shape;
  if (!out.empty()) out[dim] = shape_numel(c.in(1).shape);
  c.set_output(0, {x.dtype, out});
}

void infer_gather(InferCtx& c) {
  const TensorType& x = c.in(0);
  const TensorType& idx = c.in(1);
  check_index_dtype(c, 1, false);
  if (idx.shape.size() != x.shape.size())
    c.fail("index " + shape_str(idx.shape) + " must have the rank of x " + shape_str(x.shape));
  int dim = normalize_dim(c.attr_int("dim"), static_cast<int>(x.shape.size()), "gather");
  for (size_t d = 0; d < x.shape.size(); ++d)
    if (static_cast<int>(d) != dim && idx.shape[d].is_static() && x.shape[d].is_static() &&
        idx.shape[d].value() > x.shape[d].value())
      c.fail("index " + shape_str(idx.shape) + " is larger than x " + shape_str(x.shape) + " in dim " +
             std::to_string(d));
  c.set_output(0, {x.dtype, idx.shape});
}

// scatter: out = x with out[..., index[p], ...] (dim replaced) = src[p] for every position p
// of index ("add": += instead). index and src have x's rank; index fits in src everywhere and
// in x except along dim. With `shape`, out has that shape and x (of the same rank) is broadcast
// to it: a zero-filled gradient (embedding's) is one value, not a tensor of the table's size.
void infer_scatter(InferCtx& c) {
  const TensorType& in0 = c.in(0);
  const TensorType& idx = c.in(1);
  const TensorType& src = c.in(2);
  check_index_dtype(c, 1, false);
  TensorType x = in0;  // the output's type: x, or x broadcast to `shape`
  const Shape target = c.attr_dims("shape");
  if (!target.empty()) {
    if (target.size() != in0.shape.size())
      c.fail("x " + shape_str(in0.shape) + " must have the rank of shape " + shape_str(target));
    for (size_t d = 0; d < target.size(); ++d)
      if (!(in0.shape[d] == Dim(1)) && !(in0.shape[d] == target[d]))
        c.fail("x " + shape_str(in0.shape) + " does not broadcast to shape " + shape_str(target));
    x.shape = target;
  }
  if (x.shape.empty()) c.fail("x must have rank >= 1");
  if (idx.shape.size() != x.shape.size() || src.shape.size() != x.shape.size())
    c.fail("index " + shape_str(idx.shape) + " and src " + shape_str(src.shape) + " must have the rank of x " +
           shape_str(x.shape));
  if (src.dtype != x.dtype) c.fail(std::string("src is ") + dtype_name(src.dtype) + ", x is " + dtype_name(x.dtype));
  const std::string& reduce = c.attr_str("reduce");
  if (reduce != "none" && reduce != "add") c.fail("reduce must be none or add, got " + reduce);
  if (reduce == "add" && x.dtype != DType::f32 && x.dtype != DType::f64 && x.dtype != DType::i64 &&
      x.dtype != DType::i32)
    c.fail(std::string("reduce=add takes f32/f64/i64/i32, got ") + dtype_name(x.dtype));
  int dim = normalize_dim(c.attr_int("dim"), static_cast<int>(x.shape.size()), "scatter");
  for (size_t d = 0; d < x.shape.size(); ++d) {
    const Dim& i = idx.shape[d];
    if (!i.is_static()) continue;
    if (src.shape[d].is_static() && i.value() > src.shape[d].value())
      c.fail("index " + shape_str(idx.shape) + " is larger than src " + shape_str(src.shape) + " in dim " +
             std::to_string(d));
    if (static_cast<int>(d) != dim && x.shape[d].is_static() && i.value() > x.shape[d].value())
      c.fail("index " + shape_str(idx.shape) + " is larger than x " + shape_str(x.shape) + " in dim " +
             std::to_string(d));
  }
  c.set_output(0, x);
}

void infer_pad(InferCtx& c) {
  const TensorType& x = c.in(0);
  auto amounts = pad_amounts(c.attr_ints("pads"), static_cast<int>(x.shape.size()));
  Shape out = x.shape;
  for (size_t d = 0; d < out.size(); ++d) {
    out[d] = out[d] + Dim(amounts[d].before + amounts[d].after);
    if (out[d].is_static() && out[d].value() < 0)
      c.fail("pads " + c.attr("pads").str() + " crop dim " + std::to_string(d) + " of " + shape_str(x.shape) +
             " below size 0");
  }
  c.set_output(0, {x.dtype, out});
}

void infer_split(InferCtx& c) {
  const TensorType& x = c.in(0);
  if (x.shape.empty()) c.fail("cannot split a 0-d tensor");
  int dim = normalize_dim(c.attr_int("dim"), static_cast<int>(x.shape.size()), "split");
  const auto& sizes = c.attr_ints("sizes");
  if (sizes.empty()) c.fail("sizes must list at least one piece");
  int64_t total = 0;
  for (int64_t s : sizes) {
    if (s < 0) c.fail("sizes " + Attr(sizes).str() + " has a negative size");
    total += s;
  }
  // A symbolic dim is checked by the kernel once its size is known.
  if (x.shape[dim].is_static() && x.shape[dim].value() != total)
    c.fail("sizes " + Attr(sizes).str() + " sum to " + std::to_string(total) + " but dim " + std::to_string(dim) +
           " of " + shape_str(x.shape) + " has size " + x.shape[dim].str());
  for (size_t k = 0; k < sizes.size(); ++k) {
    Shape out = x.shape;
    out[dim] = Dim(sizes[k]);
    c.set_output(static_cast<int>(k), {x.dtype, out});
  }
}

void infer_flip(InferCtx& c) {
  const TensorType& x = c.in(0);
  int rank = static_cast<int>(x.shape.size());
  const auto& dims = c.attr_ints("dims");
  std::vector<bool> seen(std::max(rank, 1), false);
  for (int64_t d : dims) {
    int k = wrap_dim(d, rank, "flip");
    if (seen[k]) c.fail("dims " + Attr(dims).str() + " repeats dim " + std::to_string(k));
    seen[k] = true;
  }
  c.set_output(0, x);
}

// as_strided reads x's elements in row-major order as a flat array, so every position the
// view reaches must lie inside it; that needs x's size, hence a static input shape.
void infer_as_strided(InferCtx& c) {
  const TensorType& x = c.in(0);
  const auto& size = c.attr_ints("size");
  const auto& stride = c.attr_ints("stride");
  int64_t offset = c.attr_int("offset");
  if (size.size() != stride.size())
    c.fail("size " + Attr(size).str() + " and stride " + Attr(stride).str() + " differ in length");
  if (static_cast<int>(size.size()) > kMaxDims) c.fail("more than " + std::to_string(kMaxDims) + " dims");
  if (offset < 0) c.fail("offset " + std::to_string(offset) + " is negative");
  int64_t numel = 1;
  for (const Dim& d : x.shape) {
    if (!d.is_static()) c.fail("needs a static input shape, got " + shape_str(x.shape));
    numel *= d.value();
  }
  int64_t last = offset, out_numel = 1;
  Shape out;
  for (size_t k = 0; k < size.size(); ++k) {
    if (size[k] < 0 || stride[k] < 0)
      c.fail("size " + Attr(size).str() + " and stride " + Attr(stride).str() + " must be non-negative");
    out_numel *= size[k];
    if (size[k] > 0) last += (size[k] - 1) * stride[k];
    out.push_back(Dim(size[k]));
  }
  if (out_numel > 0 && last >= numel)
    c.fail("the view reaches element " + std::to_string(last) + " but the input " + shape_str(x.shape) + " has " +
           std::to_string(numel));
  c.set_output(0, {x.dtype, out});
}

void infer_channel_block(InferCtx& c) {
  check_channel_block(c, c.in(0).shape, c.attr_int("from_block"), "from_block");
  check_channel_block(c, c.in(0).shape, c.attr_int("to_block"), "to_block");
  c.set_output(0, c.in(0));
}

}  // namespace

void register_data_movement_ops(OpTable& t) {
  const auto ints = Attr::Kind::Ints;
  const auto integer = Attr::Kind::Int;

  const auto dims = Attr::Kind::Dims;  // sizes that may be symbolic ([s0, (s1*12), 64])
  const auto sym = Attr::Kind::Sym;    // one size that may be symbolic (s1)

  OpDef reshape = movement("reshape", {{"shape", dims, std::nullopt}},
                           "the same elements in a new shape (sizes may be symbolic; one -1 inferred); aliases x");
  reshape.cls = OpClass::View;
  reshape.alias = true;
  reshape.infer = infer_reshape;
  t.add(std::move(reshape));

  OpDef permute = movement("permute", {{"dims", ints, std::nullopt}}, "x with dims reordered, copied contiguous");
  permute.infer = infer_permute;
  t.add(std::move(permute));

  OpDef slice = movement("slice",
                         {{"dim", integer, std::nullopt},
                          {"start", sym, std::nullopt},
                          {"end", sym, std::nullopt},
                          {"step", integer, Attr(int64_t{1})}},
                         "x[start:end:step] along dim (PyTorch clamping)");
  slice.infer = infer_slice;
  t.add(std::move(slice));

  OpDef concat = movement("concat", {{"dim", integer, std::nullopt}}, "inputs joined along dim");
  concat.max_inputs = -1;
  concat.infer = infer_concat;
  t.add(std::move(concat));

  OpDef expand = movement("expand", {{"shape", dims, std::nullopt}},
                          "broadcast x to shape (sizes may be symbolic), materialised");
  expand.infer = infer_expand;
  t.add(std::move(expand));

  OpDef copy = movement("copy", {}, "identity copy into a contiguous output");
  copy.infer = [](InferCtx& c) { c.set_output(0, c.in(0)); };
  t.add(std::move(copy));

  OpDef embedding = movement("embedding", {}, "rows of weight [V, D] picked by indices: out = indices.shape + [D]");
  embedding.min_inputs = embedding.max_inputs = 2;
  embedding.infer = infer_embedding;
  t.add(std::move(embedding));

  OpDef index_select = movement("index_select", {{"dim", integer, std::nullopt}}, "x indexed along dim by a 1-d index");
  index_select.min_inputs = index_select.max_inputs = 2;
  index_select.infer = infer_index_select;
  t.add(std::move(index_select));

  OpDef gather = movement("gather", {{"dim", integer, std::nullopt}}, "torch.gather: out[i][j] = x[i][index[i][j]] (dim 1)");
  gather.min_inputs = gather.max_inputs = 2;
  gather.infer = infer_gather;
  t.add(std::move(gather));

  OpDef scatter = movement("scatter",
                           {{"dim", integer, std::nullopt},
                            {"reduce", Attr::Kind::Str, Attr("none")},
                            {"shape", dims, Attr(std::vector<int64_t>{})}},  // [] = x's shape
                           "torch.scatter / scatter_add: x (broadcast to `shape` when given) with src written (or "
                           "added) at index along dim");
  scatter.min_inputs = scatter.max_inputs = 3;
  scatter.infer = infer_scatter;
  t.add(std::move(scatter));

  OpDef pad = movement("pad", {{"pads", ints, std::nullopt}, {"value", Attr::Kind::Float, Attr(0.0)}},
                       "constant padding (torch order: last dim first); negative pads crop");
  pad.infer = infer_pad;
  t.add(std::move(pad));

  OpDef split = movement("split", {{"dim", integer, std::nullopt}, {"sizes", ints, std::nullopt}},
                         "consecutive pieces of x along dim, one output per size");
  split.num_outputs = -1;  // variadic: OpTable::infer only checks the count when >= 0
  split.infer = infer_split;
  t.add(std::move(split));

  OpDef flip = movement("flip", {{"dims", ints, std::nullopt}}, "x reversed along each of dims");
  flip.infer = infer_flip;
  t.add(std::move(flip));

  OpDef as_strided = movement("as_strided",
                              {{"size", ints, std::nullopt}, {"stride", ints, std::nullopt},
                               {"offset", integer, Attr(int64_t{0})}},
                              "out[i] = flat(x)[offset + sum(i_k * stride_k)], flat(x) = x in row-major order");
  as_strided.infer = infer_as_strided;
  t.add(std::move(as_strided));

  OpDef channel_block = movement("channel_block",
                                 {{"from_block", integer, std::nullopt}, {"to_block", integer, std::nullopt}},
                                 "the same NCHW tensor re-laid from channel block from_block to to_block "
                                 "(0: plain; kernels/channel_block.h); inserted by the block_conv_layout pass");
  channel_block.infer = infer_channel_block;
  t.add(std::move(channel_block));
}

}  // namespace updraft
