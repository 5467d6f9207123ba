// Grouped matmul (docs/ops.md, "Compute"): the per-expert matmul of mixture-of-experts layers,
// rows of x sorted by expert and split by cumulative offsets. Shapes only here; the kernels
// are kernels/ref/grouped_mm.cpp and kernels/onednn/grouped_mm.cpp.
#include "ir/op_table.h"
#include "ir/ops/params.h"

namespace updraft {

void register_grouped_ops(OpTable& t) {
  OpDef d;
  d.name = "grouped_mm";
  d.min_inputs = 3;
  d.max_inputs = 3;
  d.attrs = {{"transposed_w", Attr::Kind::Bool, Attr(false)}};
  d.dtypes = {DType::f32};
  d.cls = OpClass::Compute;
  d.doc = "rows [offs[e-1], offs[e]) of x [S, K] times w[e] ([E, K, N]; [E, N, K] read transposed with "
          "transposed_w); rows no group covers are 0";
  d.infer = [](InferCtx& c) {
    const TensorType &x = c.in(0), &w = c.in(1), &offs = c.in(2);
    if (w.dtype != x.dtype) c.fail(std::string("w is ") + dtype_name(w.dtype) + "; expected x's dtype");
    if (offs.dtype != DType::i32 && offs.dtype != DType::i64)
      c.fail(std::string("offs is ") + dtype_name(offs.dtype) + "; expected i32 or i64");
    if (x.shape.size() != 2) c.fail("x is " + shape_str(x.shape) + "; expected [S, K]");
    if (w.shape.size() != 3) c.fail("w is " + shape_str(w.shape) + "; expected [E, K, N]");
    if (offs.shape.size() != 1) c.fail("offs is " + shape_str(offs.shape) + "; expected [E]");
    bool tw = c.attr_bool("transposed_w");
    const Dim& k = tw ? w.shape[2] : w.shape[1];
    const Dim& n = tw ? w.shape[1] : w.shape[2];
    if (!w.shape[0].is_static() || !offs.shape[0].is_static() || !k.is_static() || !n.is_static() ||
        !x.shape[1].is_static())
      c.fail("w, offs and K must have static sizes");
    if (offs.shape[0].value() != w.shape[0].value())
      c.fail("offs has " + std::to_string(offs.shape[0].value()) + " entries for " +
             std::to_string(w.shape[0].value()) + " groups");
    if (x.shape[1].value() != k.value())
      c.fail("x has K = " + std::to_string(x.shape[1].value()) + ", w has " + std::to_string(k.value()));
    c.set_output(0, {x.dtype, Shape{x.shape[0], n}});
  };
  t.add(std::move(d));
}

}  // namespace updraft
