// Compute ops: conv2d (and its gradients), linear, matmul, pooling and attention (docs/ops.md,
// "Compute").
//
// Shape functions work on symbolic Dims, so a graph with a symbolic batch or image size
// infers once. Every op here runs f32 on the CPU (oneDNN or blocked kernels in
// src/kernels/onednn/) and, but for conv2d's gradients, f64 on the engine's own kernels
// (src/kernels/cpu/*_f64.cpp), and has a reference kernel in src/kernels/ref/compute.cpp.
//
// conv2d, linear and matmul carry the epilogue attributes filled by the epilogue-fusion pass:
// the result is activation(op(x, w) + bias + residual); bias and residual follow the main
// inputs in that order when their flags are set, and the shape function checks that the
// number of inputs matches the flags.
//
// conv2d may also carry a per-output-channel weight scale (has_weight_scale, set by
// fold_conv_bn): a third main input s [O], and the convolution uses w'[o] = w[o] * s[o] rounded
// to w's dtype, exactly what multiplying the weights by s once would give. Kernels apply it
// when they prepack the weights, so a folded batch norm costs no copy of the weights.
#include <string>

#include "ir/op_table.h"
#include "ir/ops/params.h"

namespace updraft {

namespace {

std::vector<AttrSpec> epilogue_attrs() {
  return {{"has_bias", Attr::Kind::Bool, Attr(false)},
          {"has_residual", Attr::Kind::Bool, Attr(false)},
          {"activation", Attr::Kind::Str, Attr("none")},
          {"act_alpha", Attr::Kind::Float, Attr(0.0)},
          {"act_beta", Attr::Kind::Float, Attr(0.0)}};
}

std::vector<AttrSpec> concat(std::vector<AttrSpec> a, const std::vector<AttrSpec>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

std::string str_of(const std::vector<int64_t>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}

// Checks the epilogue inputs that follow `num_main` main inputs against the flags, and that
// every input shares input 0's dtype. `bias_size` is the size the 1-d bias must have.
void check_epilogue(InferCtx& c, int num_main, const Dim& bias_size, const Shape& out_shape) {
  bool has_bias = c.attr_bool("has_bias"), has_res = c.attr_bool("has_residual");
  int want = num_main + (has_bias ? 1 : 0) + (has_res ? 1 : 0);
  if (c.num_inputs() != want)
    c.fail("has " + std::to_string(c.num_inputs()) + " inputs but has_bias=" + (has_bias ? "true" : "false") +
           " and has_residual=" + (has_res ? "true" : "false") + " need " + std::to_string(want) +
           " (bias, then residual, follow the main inputs)");
  for (int k = 1; k < c.num_inputs(); ++k)
    if (c.in(k).dtype != c.in(0).dtype)
      c.fail("input " + std::to_string(k) + " is " + dtype_name(c.in(k).dtype) + ", expected " +
             dtype_name(c.in(0).dtype) + " like input 0");
  int k = num_main;
  if (has_bias) {
    const Shape& b = c.in(k++).shape;
    if (b.size() != 1 || b[0] != bias_size)
      c.fail("bias is " + shape_str(b) + ", expected [" + bias_size.str() + "]");
  }
  if (has_res) {
    const Shape& r = c.in(k).shape;
    if (r != out_shape) c.fail("residual is " + shape_str(r) + ", expected the output shape " + shape_str(out_shape));
  }
  // Activations are the elementwise rows marked as epilogue ones (ir/elementwise_ops.def).
  const std::string& act = c.attr_str("activation");
  if (!Epilogue::known_activation(act)) c.fail(Epilogue::unknown_activation(act));
}

// Reads a 2-element spatial attribute; a single value applies to both dims (as in PyTorch).
std::vector<int64_t> pair_attr(InferCtx& c, const std::string& name, int64_t min_value) {
  std::vector<int64_t> v = c.attr_ints(name);
  if (v.size() == 1) v.push_back(v[0]);
  if (v.size() != 2) c.fail(name + " must have 1 or 2 values, got " + str_of(v));
  for (int64_t x : v)
    if (x < min_value) c.fail(name + " " + str_of(v) + " must be >= " + std::to_string(min_value));
  return v;
}

// Output size of a sliding window: floor((size + 2p - d*(k-1) - 1) / s) + 1, and with
// ceil_mode PyTorch's rule: round up, but the last window must start inside the input or
// left padding. That "start inside" bound is floor((size + p - 1) / s) + 1; given p <= k/2
// (checked) the rounded-up size exceeds it by at most one, so a min() is exact.
// `p_end` is the padding after the input (conv2d's padding_end; pools pad symmetrically).
Dim window_out(const Dim& size, int64_t k, int64_t s, int64_t p, int64_t d, bool ceil_mode, int64_t p_end = -1) {
  Dim span = size + (p + (p_end < 0 ? p : p_end)) - (d * (k - 1) + 1);
  if (!ceil_mode) return floordiv(span, Dim(s)) + 1;
  Dim up = floordiv(span + (s - 1), Dim(s)) + 1;
  return min(up, floordiv(size + (p - 1), Dim(s)) + 1);
}

void require_positive(InferCtx& c, const Dim& d, const std::string& what) {
  if (d.is_static() && d.value() <= 0)
    c.fail(what + " is " + std::to_string(d.value()) + "; the window does not fit the input (check kernel, "
           "padding and dilation)");
}

void infer_conv2d(InferCtx& c) {
  const Shape& x = c.in(0).shape;
  if (c.num_inputs() < 2) c.fail("needs inputs x and w");
  const Shape& w = c.in(1).shape;
  if (x.size() != 4) c.fail("x is " + shape_str(x) + "; expected NCHW (rank 4)");
  if (w.size() != 4) c.fail("w is " + shape_str(w) + "; expected [O, C/groups, kh, kw]");
  if (!w[2].is_static() || !w[3].is_static() || !w[1].is_static() || !w[0].is_static())
    c.fail("weight shape " + shape_str(w) + " must be static");
  int64_t g = c.attr_int("groups");
  if (g < 1) c.fail("groups must be >= 1, got " + std::to_string(g));
  auto st = pair_attr(c, "stride", 1), pad = pair_attr(c, "padding", 0), dil = pair_attr(c, "dilation", 1);
  // padding_end: the bottom/right padding when it differs from padding (TF-style "same" pads
  // folded in by fold_pad_conv); [] means symmetric.
  auto pad_end = c.attr_ints("padding_end").empty() ? pad : pair_attr(c, "padding_end", 0);
  int64_t O = w[0].value(), Cg = w[1].value();
  if (O % g != 0) c.fail("out channels " + std::to_string(O) + " are not divisible by groups " + std::to_string(g));
  if (x[1] != Dim(Cg * g))
    c.fail("x has " + x[1].str() + " channels but w expects C/groups=" + std::to_string(Cg) + " with groups=" +
           std::to_string(g));
  Shape out = {x[0], Dim(O), window_out(x[2], w[2].value(), st[0], pad[0], dil[0], false, pad_end[0]),
               window_out(x[3], w[3].value(), st[1], pad[1], dil[1], false, pad_end[1])};
  require_positive(c, out[2], "output height");
  require_positive(c, out[3], "output width");
  const bool scaled = c.attr_bool("has_weight_scale");
  if (scaled) {
    if (c.num_inputs() < 3) c.fail("has_weight_scale=true needs the scale as input 2");
    const Shape& s = c.in(2).shape;
    if (s.size() != 1 || s[0] != Dim(O))
      c.fail("weight scale is " + shape_str(s) + ", expected [" + std::to_string(O) + "] (one per output channel)");
  }
  check_epilogue(c, scaled ? 3 : 2, Dim(O), out);
  check_channel_block(c, x, c.attr_int("src_block"), "src_block");
  check_channel_block(c, out, c.attr_int("dst_block"), "dst_block");
  c.set_output(0, {c.in(0).dtype, out});
}

// The gradients of a plain conv2d (no epilogue: its bias gradient is a sum of dy, its
// activation's gradient an elementwise op before these). dy is [N, O, OH, OW]; the forward's
// stride, padding (symmetric, as aten's convolution), dilation and groups are attributes.
struct ConvGradGeometry {
  std::vector<int64_t> st, pad, dil;
  int64_t g;
};

ConvGradGeometry conv_grad_geometry(InferCtx& c, const Shape& dy) {
  if (dy.size() != 4) c.fail("dy is " + shape_str(dy) + "; expected [N, O, OH, OW]");
  for (int k = 1; k < c.num_inputs(); ++k)
    if (c.in(k).dtype != c.in(0).dtype)
      c.fail("input " + std::to_string(k) + " is " + dtype_name(c.in(k).dtype) + ", expected " +
             dtype_name(c.in(0).dtype) + " like dy");
  ConvGradGeometry geo{pair_attr(c, "stride", 1), pair_attr(c, "padding", 0), pair_attr(c, "dilation", 1),
                       c.attr_int("groups")};
  if (geo.g < 1) c.fail("groups must be >= 1, got " + std::to_string(geo.g));
  return geo;
}

// The forward's output size for input size `size` must be dy's: checked where both are static.
void check_forward_size(InferCtx& c, const Dim& size, int64_t k, const ConvGradGeometry& geo, int i, const Dim& dy_size) {
  Dim want = window_out(size, k, geo.st[i], geo.pad[i], geo.dil[i], false);
  if (want.is_static() && dy_size.is_static() && want.value() != dy_size.value())
    c.fail(std::string(i == 0 ? "height" : "width") + ": the forward conv maps " + size.str() + " to " + want.str() +
           ", but dy has " + dy_size.str());
}

// dx [N, C, H, W] from dy and w [O, C/g, kh, kw]; `input_size` is the forward input's [H, W]
// (a strided conv maps several sizes to one output size, so dy alone does not tell it).
void infer_conv2d_backward_data(InferCtx& c) {
  const Shape &dy = c.in(0).shape, &w = c.in(1).shape;
  ConvGradGeometry geo = conv_grad_geometry(c, dy);
  if (w.size() != 4) c.fail("w is " + shape_str(w) + "; expected [O, C/groups, kh, kw]");
  for (const Dim& d : w)
    if (!d.is_static()) c.fail("weight shape " + shape_str(w) + " must be static");
  if (dy[1] != w[0]) c.fail("dy has " + dy[1].str() + " channels but w has " + w[0].str() + " output channels");
  if (w[0].value() % geo.g != 0)
    c.fail("out channels " + w[0].str() + " are not divisible by groups " + std::to_string(geo.g));
  auto hw = pair_attr(c, "input_size", 1);
  for (int i = 0; i < 2; ++i) check_forward_size(c, Dim(hw[i]), w[2 + i].value(), geo, i, dy[2 + i]);
  c.set_output(0, {c.in(0).dtype, {dy[0], Dim(w[1].value() * geo.g), Dim(hw[0]), Dim(hw[1])}});
}

// dw [O, C/g, kh, kw] from dy and the forward input x [N, C, H, W]; `kernel` is [kh, kw].
void infer_conv2d_backward_weight(InferCtx& c) {
  const Shape &dy = c.in(0).shape, &x = c.in(1).shape;
  ConvGradGeometry geo = conv_grad_geometry(c, dy);
  if (x.size() != 4) c.fail("x is " + shape_str(x) + "; expected NCHW (rank 4)");
  if (x[0] != dy[0]) c.fail("x " + shape_str(x) + " and dy " + shape_str(dy) + " disagree on the batch");
  if (!x[1].is_static() || !dy[1].is_static()) c.fail("channel counts of x and dy must be static");
  const int64_t C = x[1].value(), O = dy[1].value();
  if (C % geo.g != 0 || O % geo.g != 0)
    c.fail("channels " + std::to_string(C) + " in, " + std::to_string(O) + " out are not divisible by groups " +
           std::to_string(geo.g));
  auto k = pair_attr(c, "kernel", 1);
  for (int i = 0; i < 2; ++i) check_forward_size(c, x[2 + i], k[i], geo, i, dy[2 + i]);
  c.set_output(0, {c.in(0).dtype, {Dim(O), Dim(C / geo.g), Dim(k[0]), Dim(k[1])}});
}

void infer_linear(InferCtx& c) {
  if (c.num_inputs() < 2) c.fail("needs inputs x and w");
  const Shape& x = c.in(0).shape;
  const Shape& w = c.in(1).shape;
  if (x.empty()) c.fail("x must have rank >= 1");
  if (w.size() != 2) c.fail("w is " + shape_str(w) + "; expected [N, K]");
  if (x.back() != w[1]) c.fail("x " + shape_str(x) + " and w " + shape_str(w) + " disagree on K");
  Shape out(x.begin(), x.end() - 1);
  out.push_back(w[0]);
  check_epilogue(c, 2, w[0], out);
  c.set_output(0, {c.in(0).dtype, out});
}

// torch.matmul: 1-d operands gain a dim (a: leading 1, b: trailing 1) that the result drops;
// batch dims broadcast. transpose_a / transpose_b: that operand is read with its last two dims
// swapped (the pass fold_transpose_matmul puts a transposing permute there).
void infer_matmul(InferCtx& c) {
  if (c.num_inputs() < 2) c.fail("needs inputs a and b");
  Shape a = c.in(0).shape, b = c.in(1).shape;
  for (auto [name, shape] : {std::pair<const char*, Shape*>{"transpose_a", &a}, {"transpose_b", &b}}) {
    if (!c.attr_bool(name)) continue;
    if (shape->size() < 2) c.fail(std::string(name) + " needs a rank >= 2 operand, got " + shape_str(*shape));
    std::swap((*shape)[shape->size() - 1], (*shape)[shape->size() - 2]);
  }
  if (a.empty() || b.empty()) c.fail("operands must have rank >= 1 (got " + shape_str(a) + " and " + shape_str(b) + ")");
  bool a1 = a.size() == 1, b1 = b.size() == 1;
  if (a1) a.insert(a.begin(), Dim(1));
  if (b1) b.push_back(Dim(1));
  if (a.back() != b[b.size() - 2])
    c.fail("a " + shape_str(c.in(0).shape) + " and b " + shape_str(c.in(1).shape) + " disagree on K");
  Shape ab(a.begin(), a.end() - 2), bb(b.begin(), b.end() - 2);
  Shape out = broadcast_shapes(ab, bb, "matmul");
  if (!a1) out.push_back(a[a.size() - 2]);
  if (!b1) out.push_back(b.back());
  if (c.attr_bool("has_bias") && b1) c.fail("has_bias needs a 2-d or larger b (the bias is [N])");
  check_epilogue(c, 2, b.back(), out);
  c.set_output(0, {c.in(0).dtype, out});
}

// Pooling input: [N, C, H, W] or unbatched [C, H, W].
void check_pool_input(InferCtx& c) {
  const Shape& x = c.in(0).shape;
  if (x.size() != 4 && x.size() != 3) c.fail("x is " + shape_str(x) + "; expected [N, C, H, W] or [C, H, W]");
}

// `blocked`: the op has the `block` layout attribute (max_pool2d, avg_pool2d).
void infer_pool(InferCtx& c, bool has_dilation, bool blocked = true) {
  check_pool_input(c);
  const Shape& x = c.in(0).shape;
  auto k = pair_attr(c, "kernel", 1);
  // An empty stride means "same as kernel" (aten's default).
  auto st = c.attr_ints("stride").empty() ? k : pair_attr(c, "stride", 1);
  auto pad = pair_attr(c, "padding", 0);
  auto dil = has_dilation ? pair_attr(c, "dilation", 1) : std::vector<int64_t>{1, 1};
  for (int i = 0; i < 2; ++i)
    if (pad[i] * 2 > dil[i] * (k[i] - 1) + 1)
      c.fail("padding " + str_of(pad) + " must be at most half the (dilated) kernel " + str_of(k) +
             " (PyTorch's rule)");
  bool ceil_mode = c.attr_bool("ceil_mode");
  if (blocked) check_channel_block(c, x, c.attr_int("block"), "block");
  size_t r = x.size();
  Shape out(x.begin(), x.end() - 2);
  out.push_back(window_out(x[r - 2], k[0], st[0], pad[0], dil[0], ceil_mode));
  out.push_back(window_out(x[r - 1], k[1], st[1], pad[1], dil[1], ceil_mode));
  require_positive(c, out[r - 2], "output height");
  require_positive(c, out[r - 1], "output width");
  c.set_output(0, {c.in(0).dtype, out});
}

// max_pool2d_indices: max_pool2d's values and, as a second output, each maximum's position
// h * W + w in its plane (i64), as aten's max_pool2d_with_indices (kernels/max_pool_indices.h).
void infer_max_pool2d_indices(InferCtx& c) {
  if (c.in(0).shape.size() != 4) c.fail("x is " + shape_str(c.in(0).shape) + "; expected [N, C, H, W]");
  infer_pool(c, true, false);
  c.set_output(1, {DType::i64, c.outputs()[0].shape});
}

// max_pool2d_backward: dy [N, C, OH, OW] added at `indices` into a zeroed [N, C, H, W];
// `input_size` is [H, W].
void infer_max_pool2d_backward(InferCtx& c) {
  const Shape &dy = c.in(0).shape, &idx = c.in(1).shape;
  if (dy.size() != 4) c.fail("dy is " + shape_str(dy) + "; expected [N, C, OH, OW]");
  if (idx != dy || c.in(1).dtype != DType::i64)
    c.fail("indices " + c.in(1).str() + " must be i64 with dy's shape " + shape_str(dy));
  auto hw = pair_attr(c, "input_size", 1);
  c.set_output(0, {c.in(0).dtype, {dy[0], dy[1], Dim(hw[0]), Dim(hw[1])}});
}

void infer_adaptive_avg_pool2d(InferCtx& c) {
  check_pool_input(c);
  const Shape& x = c.in(0).shape;
  const auto& os = c.attr_ints("output_size");
  std::vector<int64_t> o = os;
  if (o.size() == 1) o.push_back(o[0]);
  if (o.size() != 2 || o[0] < 1 || o[1] < 1) c.fail("output_size " + str_of(os) + " must be 1 or 2 positive values");
  Shape out(x.begin(), x.end() - 2);
  out.push_back(Dim(o[0]));
  out.push_back(Dim(o[1]));
  c.set_output(0, {c.in(0).dtype, out});
}

void infer_sdpa(InferCtx& c) {
  if (c.num_inputs() < 3) c.fail("needs inputs q, k and v");
  const SdpaLayout layout = SdpaLayout::of(c.attr_ints("seq_first"));
  for (int i = 0; i < 3; ++i)
    if (layout.seq_first[static_cast<size_t>(i)] && c.in(i).shape.size() < 3)
      c.fail("seq_first lists input " + std::to_string(i) + ", which has no heads dim: " + shape_str(c.in(i).shape));
  const Shape q = layout.logical(0, c.in(0).shape), k = layout.logical(1, c.in(1).shape),
              v = layout.logical(2, c.in(2).shape);
  if (q.size() < 2 || k.size() < 2 || v.size() < 2)
    c.fail("q, k, v must be [..., L, E], [..., S, E], [..., S, Ev]; got " + shape_str(q) + ", " + shape_str(k) +
           ", " + shape_str(v));
  for (int i = 1; i < 3; ++i)
    if (c.in(i).dtype != c.in(0).dtype)
      c.fail("input " + std::to_string(i) + " is " + dtype_name(c.in(i).dtype) + ", expected " +
             dtype_name(c.in(0).dtype) + " like q");
  if (q.back() != k.back()) c.fail("q " + shape_str(q) + " and k " + shape_str(k) + " disagree on E");
  if (k[k.size() - 2] != v[v.size() - 2]) c.fail("k " + shape_str(k) + " and v " + shape_str(v) + " disagree on S");
  Shape batch = broadcast_shapes(Shape(q.begin(), q.end() - 2), Shape(k.begin(), k.end() - 2), "sdpa");
  batch = broadcast_shapes(batch, Shape(v.begin(), v.end() - 2), "sdpa");
  bool has_mask = c.attr_bool("has_mask");
  if (c.num_inputs() != (has_mask ? 4 : 3))
    c.fail("has " + std::to_string(c.num_inputs()) + " inputs but has_mask=" + (has_mask ? "true" : "false") +
           " needs " + std::to_string(has_mask ? 4 : 3));
  Shape scores = batch;
  scores.push_back(q[q.size() - 2]);
  scores.push_back(k[k.size() - 2]);
  if (has_mask) {
    if (c.attr_bool("is_causal")) c.fail("set either is_causal or a mask, not both (as in PyTorch)");
    const TensorType& m = c.in(3);
    if (m.dtype != DType::boolean && m.dtype != c.in(0).dtype)
      c.fail(std::string("mask is ") + dtype_name(m.dtype) + "; expected bool (true = keep) or additive " +
             dtype_name(c.in(0).dtype));
    if (m.shape.size() > scores.size() || broadcast_shapes(m.shape, scores, "sdpa") != scores)
      c.fail("mask " + shape_str(m.shape) + " does not broadcast to the scores " + shape_str(scores));
  }
  Shape out = batch;
  out.push_back(q[q.size() - 2]);
  out.push_back(v.back());
  if (layout.seq_first[3] && out.size() < 3) c.fail("seq_first lists the result, which has no heads dim: " + shape_str(out));
  c.set_output(0, {c.in(0).dtype, layout.logical(3, out)});
  // with_lse: each query row's log-sum-exp of its scaled, masked scores, [batch..., L] (the
  // flash forward's second result, which its backward reads instead of the probabilities).
  if (c.attr_bool("with_lse")) {
    Shape lse = batch;
    lse.push_back(q[q.size() - 2]);
    c.set_output(1, {c.in(0).dtype, lse});
  }
}

OpDef compute_op(std::string name, int min_in, int max_in, std::vector<AttrSpec> attrs,
                 std::function<void(InferCtx&)> infer, std::string doc) {
  OpDef d;
  d.name = std::move(name);
  d.min_inputs = min_in;
  d.max_inputs = max_in;
  d.attrs = std::move(attrs);
  // f32 runs on oneDNN, f64 on the engine's own GEMM (src/kernels/cpu/gemm_f64.h; oneDNN 3.2
  // has no f64 on the CPU) or, for pooling, the reference kernels; the partitioner leaves
  // other dtypes to PyTorch.
  d.dtypes = {DType::f32, DType::f64};
  d.cls = OpClass::Compute;
  d.infer = std::move(infer);
  d.doc = std::move(doc);
  return d;
}

}  // namespace

void register_compute_ops(OpTable& t) {
  using K = Attr::Kind;
  const std::vector<int64_t> ones = {1, 1}, zeros = {0, 0};
  t.add(compute_op("conv2d", 2, 5,
                   concat({{"stride", K::Ints, Attr(ones)},
                           {"padding", K::Ints, Attr(zeros)},
                           {"padding_end", K::Ints, Attr(std::vector<int64_t>{})},
                           {"dilation", K::Ints, Attr(ones)},
                           {"groups", K::Int, Attr(int64_t{1})},
                           // Activation layouts (kernels/channel_block.h): 0 plain NCHW, else
                           // nChw{B}c; the residual has dst's layout. Set by block_conv_layout.
                           {"src_block", K::Int, Attr(int64_t{0})},
                           {"dst_block", K::Int, Attr(int64_t{0})},
                           // Input 2 is a per-output-channel weight scale (fold_conv_bn).
                           {"has_weight_scale", K::Bool, Attr(false)}},
                          epilogue_attrs()),
                   infer_conv2d, "2-d convolution, NCHW (or channel-blocked), with a fused bias/residual/activation epilogue"));
  // The gradients of conv2d for training graphs (docs/training.md); f32 only (oneDNN's backward
  // primitives), so f64 training convs stay PyTorch's.
  const std::vector<AttrSpec> conv_grad_attrs = {{"stride", K::Ints, Attr(ones)},
                                                 {"padding", K::Ints, Attr(zeros)},
                                                 {"dilation", K::Ints, Attr(ones)},
                                                 {"groups", K::Int, Attr(int64_t{1})}};
  OpDef grad_data = compute_op("conv2d_backward_data", 2, 2,
                               concat(conv_grad_attrs, {{"input_size", K::Ints, std::nullopt}}),
                               infer_conv2d_backward_data, "dx of conv2d: dy [N,O,OH,OW], w [O,C/g,kh,kw] -> [N,C,H,W]");
  OpDef grad_weight = compute_op("conv2d_backward_weight", 2, 2,
                                 concat(conv_grad_attrs, {{"kernel", K::Ints, std::nullopt}}),
                                 infer_conv2d_backward_weight,
                                 "dw of conv2d: dy [N,O,OH,OW], x [N,C,H,W] -> [O,C/g,kh,kw]");
  grad_data.dtypes = grad_weight.dtypes = {DType::f32};
  t.add(std::move(grad_data));
  t.add(std::move(grad_weight));
  t.add(compute_op("linear", 2, 4, epilogue_attrs(), infer_linear, "y = x @ w^T with a fused epilogue"));
  t.add(compute_op("matmul", 2, 4,
                   concat(epilogue_attrs(), {{"transpose_a", K::Bool, Attr(false)}, {"transpose_b", K::Bool, Attr(false)}}),
                   infer_matmul,
                   "torch.matmul (batch broadcast, 1-d operands) with a fused epilogue"));
  t.add(compute_op("max_pool2d", 1, 1,
                   {{"kernel", K::Ints, std::nullopt},
                    {"stride", K::Ints, std::nullopt},  // [] means "same as kernel"
                    {"padding", K::Ints, Attr(zeros)},
                    {"dilation", K::Ints, Attr(ones)},
                    {"ceil_mode", K::Bool, Attr(false)},
                    {"block", K::Int, Attr(int64_t{0})}},  // x's and the result's layout, as conv2d's
                   [](InferCtx& c) { infer_pool(c, true); }, "2-d max pooling (values only)"));
  t.add(compute_op("avg_pool2d", 1, 1,
                   {{"kernel", K::Ints, std::nullopt},
                    {"stride", K::Ints, std::nullopt},  // [] means "same as kernel"
                    {"padding", K::Ints, Attr(zeros)},
                    {"ceil_mode", K::Bool, Attr(false)},
                    {"count_include_pad", K::Bool, Attr(true)},
                    {"block", K::Int, Attr(int64_t{0})}},  // x's and the result's layout, as conv2d's
                   [](InferCtx& c) { infer_pool(c, false); }, "2-d average pooling"));
  // Training graphs' max pooling (docs/training.md): the indices its gradient reads.
  OpDef pool_idx = compute_op("max_pool2d_indices", 1, 1,
                              {{"kernel", K::Ints, std::nullopt},
                               {"stride", K::Ints, std::nullopt},  // [] means "same as kernel"
                               {"padding", K::Ints, Attr(zeros)},
                               {"dilation", K::Ints, Attr(ones)},
                               {"ceil_mode", K::Bool, Attr(false)}},
                              infer_max_pool2d_indices,
                              "2-d max pooling, NCHW, with each maximum's index h*W+w in its plane (i64)");
  pool_idx.num_outputs = 2;
  t.add(std::move(pool_idx));
  t.add(compute_op("max_pool2d_backward", 2, 2, {{"input_size", K::Ints, std::nullopt}}, infer_max_pool2d_backward,
                   "gradient of max_pool2d_indices: dy [N,C,OH,OW] added at indices into zeros [N,C,H,W]"));
  t.add(compute_op("adaptive_avg_pool2d", 1, 1, {{"output_size", K::Ints, std::nullopt}}, infer_adaptive_avg_pool2d,
                   "2-d adaptive average pooling (PyTorch's window rule)"));
  OpDef sdpa = compute_op("sdpa", 3, 4,
                          {{"is_causal", K::Bool, Attr(false)},
                           {"scale", K::Float, Attr(0.0)},
                           {"has_mask", K::Bool, Attr(false)},
                           // 0-3: q, k, v, the result laid out [..., S, H, E] (SdpaLayout, params.h)
                           {"seq_first", K::Ints, Attr(std::vector<int64_t>{})},
                           // A second result: each query row's log-sum-exp (training graphs)
                           {"with_lse", K::Bool, Attr(false)}},
                          infer_sdpa,
                          "softmax(q k^T * scale + mask) v (scaled dot-product attention); seq_first: operands "
                          "laid out [..., S, H, E], read and written in place; with_lse: also each row's "
                          "log-sum-exp [..., L] (0 for a row with every key masked)");
  sdpa.num_outputs = -1;  // 1, or 2 with with_lse
  t.add(std::move(sdpa));
}

}  // namespace updraft
