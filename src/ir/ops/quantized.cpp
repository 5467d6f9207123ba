// Low-precision weights (docs/quantization.md, docs/ops.md "Compute"): the ops that make them
// and the linear that reads them. Shapes only here; the kernels are kernels/ref/quantized.cpp
// (the definitions) and kernels/cpu/linear_wq*.cpp (the fast ones).
//
//   quantize_rows(x f32 [..., K]) -> (q i8 [..., K], scale f32 [...])
//       per row, symmetric: scale = max|x| / 127, q = round_half_even(x / scale) in [-127, 127]
//       (a row of zeros: scale 0, q 0). Made for weights (a row is an output channel), written
//       so that a later path quantising activation rows can use the same op.
//   quantize_int4(x f32 [..., K]) -> (q u8 [..., K / 2], scale bf16 [..., K / 32])
//       per group of 32 values along K, symmetric: scale = bf16(max|x| / 7), two values per byte
//       (the format: kernels/quantize.h, quantize_block_int4). K must be a multiple of 64.
//   to_bf16(x f32) -> bf16: round to nearest even (NaN stays NaN).
//   linear_wq(x f32 [..., K], w i8|bf16|u8 [N, K or K / 2], [scale f32 [N] or bf16 [N, K / 32]],
//             [bias f32 [N]], [residual])
//       y = act(x @ (w * scale)^T + bias + residual): linear's epilogue, with w widened to f32
//       (times its scale when has_weight_scale) and f32 accumulation. An i8 w needs its per-row
//       scale [N]; a bf16 w has none; a u8 w is int4 (quantize_int4's [N, K / 2]) and needs its
//       per-group scale [N, K / 32].
//       quantize_x (i8 or int4 w; CompilerConfig.activation_dtype="int8"): each row of x is
//       quantised at run time as quantize_rows does (sx = max|x| / 127, qx = round(x / sx)),
//       the products qx . w accumulate exactly in int32, and y = (f32(acc) * sx) * scale[n]
//       before the epilogue; over an int4 w, per group: y = (sum_g f32(acc_g) * scale[n, g]) * sx.
//       An i8 w's K is at most kQuantizeXMaxK, so the int32 sum cannot overflow.
#include <string>

#include "ir/op_table.h"
#include "ir/ops/params.h"

namespace updraft {

namespace {

void infer_quantize_rows(InferCtx& c) {
  const TensorType& x = c.in(0);
  if (x.shape.empty()) c.fail("x must have rank >= 1 (rows of K values)");
  if (!x.shape.back().is_static()) c.fail("x is " + shape_str(x.shape) + "; its last dim (K) must be static");
  c.set_output(0, {DType::i8, x.shape});
  c.set_output(1, {DType::f32, Shape(x.shape.begin(), x.shape.end() - 1)});
}

void infer_quantize_int4(InferCtx& c) {
  const TensorType& x = c.in(0);
  if (x.shape.empty()) c.fail("x must have rank >= 1 (rows of K values)");
  const Dim& K = x.shape.back();
  if (!K.is_static() || K.value() % kInt4Block != 0)
    c.fail("x is " + shape_str(x.shape) + "; its last dim (K) must be a static multiple of " +
           std::to_string(kInt4Block) + " (the int4 block: two groups of " + std::to_string(kInt4Group) + ")");
  Shape q(x.shape.begin(), x.shape.end() - 1), s = q;
  q.push_back(Dim(K.value() / 2));
  s.push_back(Dim(K.value() / kInt4Group));
  c.set_output(0, {DType::u8, q});
  c.set_output(1, {DType::bf16, s});
}

void infer_to_bf16(InferCtx& c) { c.set_output(0, {DType::bf16, c.in(0).shape}); }

void infer_linear_wq(InferCtx& c) {
  if (c.num_inputs() < 2) c.fail("needs inputs x and w");
  const TensorType &x = c.in(0), &w = c.in(1);
  if (x.shape.empty()) c.fail("x must have rank >= 1");
  if (w.shape.size() != 2 || !w.shape[0].is_static() || !w.shape[1].is_static())
    c.fail("w is " + shape_str(w.shape) + "; expected a static [N, K]");
  if (w.dtype != DType::i8 && w.dtype != DType::bf16 && w.dtype != DType::u8)
    c.fail(std::string("w is ") + dtype_name(w.dtype) + "; expected i8 (with a scale), bf16, or u8 (int4, with scales)");
  const bool int4 = w.dtype == DType::u8;
  if (int4 ? x.shape.back() != Dim(2 * w.shape[1].value()) : x.shape.back() != w.shape[1])
    c.fail("x " + shape_str(x.shape) + " and w " + shape_str(w.shape) + " disagree on K" +
           (int4 ? " (an int4 w holds two values per byte: [N, K / 2])" : ""));
  if (int4 && (2 * w.shape[1].value()) % kInt4Block != 0)
    c.fail("an int4 w's K (" + std::to_string(2 * w.shape[1].value()) + ") must be a multiple of " +
           std::to_string(kInt4Block));
  const bool scaled = c.attr_bool("has_weight_scale");
  if ((w.dtype == DType::i8 || int4) && !scaled)
    c.fail(std::string("an ") + (int4 ? "int4" : "i8") + " w needs its scale (has_weight_scale=true, input 2)");
  const bool has_bias = c.attr_bool("has_bias"), has_res = c.attr_bool("has_residual");
  const int num_main = scaled ? 3 : 2;
  const int want = num_main + (has_bias ? 1 : 0) + (has_res ? 1 : 0);
  if (c.num_inputs() != want)
    c.fail("has " + std::to_string(c.num_inputs()) + " inputs but has_weight_scale, has_bias and has_residual need " +
           std::to_string(want) + " (x, w, then scale, bias, residual as flagged)");
  Shape out(x.shape.begin(), x.shape.end() - 1);
  out.push_back(w.shape[0]);
  int k = 2;
  if (scaled) {
    const TensorType& s = c.in(k++);
    if (int4) {
      const int64_t groups = 2 * w.shape[1].value() / kInt4Group;
      if (s.dtype != DType::bf16 || s.shape != Shape{w.shape[0], Dim(groups)})
        c.fail("scale is " + s.str() + ", expected bf16[" + w.shape[0].str() + ", " + std::to_string(groups) +
               "] (one per group of " + std::to_string(kInt4Group) + " of each row of w)");
    } else if (s.dtype != DType::f32 || s.shape.size() != 1 || s.shape[0] != w.shape[0]) {
      c.fail("scale is " + s.str() + ", expected f32[" + w.shape[0].str() + "] (one per row of w)");
    }
  }
  if (has_bias) {
    const TensorType& b = c.in(k++);
    if (b.dtype != DType::f32 || b.shape.size() != 1 || b.shape[0] != w.shape[0])
      c.fail("bias is " + b.str() + ", expected f32[" + w.shape[0].str() + "]");
  }
  if (has_res) {
    const TensorType& r = c.in(k);
    if (r.dtype != DType::f32 || r.shape != out)
      c.fail("residual is " + r.str() + ", expected f32" + shape_str(out) + " (the output's type)");
  }
  const std::string& act = c.attr_str("activation");
  if (!Epilogue::known_activation(act)) c.fail(Epilogue::unknown_activation(act));
  if (c.attr_bool("quantize_x")) {
    if (w.dtype != DType::i8 && !int4)
      c.fail("quantize_x needs an i8 or int4 w (integer products); this w is " + std::string(dtype_name(w.dtype)));
    if (!int4 && w.shape[1].value() > kQuantizeXMaxK)
      c.fail("quantize_x needs K <= " + std::to_string(kQuantizeXMaxK) + " (the int32 sum's bound); K is " +
             w.shape[1].str());
  }
  c.set_output(0, {DType::f32, out});
}

OpDef op(std::string name, int min_in, int max_in, int num_out, std::vector<AttrSpec> attrs,
         std::function<void(InferCtx&)> infer, std::string doc) {
  OpDef d;
  d.name = std::move(name);
  d.min_inputs = min_in;
  d.max_inputs = max_in;
  d.num_outputs = num_out;
  d.attrs = std::move(attrs);
  d.dtypes = {DType::f32};
  d.cls = OpClass::Compute;
  d.infer = std::move(infer);
  d.doc = std::move(doc);
  return d;
}

}  // namespace

void register_quantized_ops(OpTable& t) {
  using K = Attr::Kind;
  t.add(op("quantize_rows", 1, 1, 2, {}, infer_quantize_rows,
           "per row of x: scale = max|x| / 127, q = round(x / scale) as i8 (symmetric; outputs q, scale)"));
  t.add(op("quantize_int4", 1, 1, 2, {}, infer_quantize_int4,
           "per group of 32 values of x's rows: scale = bf16(max|x| / 7), q = round(x / scale) as int4, two per "
           "byte (symmetric; outputs q u8, scale bf16)"));
  t.add(op("to_bf16", 1, 1, 1, {}, infer_to_bf16, "x rounded to bf16 (nearest even)"));
  t.add(op("linear_wq", 2, 5, 1,
           {{"has_weight_scale", K::Bool, Attr(false)},
            {"has_bias", K::Bool, Attr(false)},
            {"has_residual", K::Bool, Attr(false)},
            {"activation", K::Str, Attr("none")},
            {"act_alpha", K::Float, Attr(0.0)},
            {"act_beta", K::Float, Attr(0.0)},
            {"quantize_x", K::Bool, Attr(false)}},
           infer_linear_wq,
           "y = x @ (w * scale)^T with an i8, bf16 or int4 w widened to f32, f32 accumulation, linear's epilogue"));
}

}  // namespace updraft
