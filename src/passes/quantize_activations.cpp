// quantize_activations: quantize_x on every linear_wq over an i8 or int4 weight; the header says which.
#include "passes/quantize_activations.h"

#include "ir/ops/params.h"

namespace updraft {

bool quantize_activations(Graph& g) {
  bool changed = false;
  for (Node* n : g.nodes()) {
    if (n->op_name() != "linear_wq" || n->attr("quantize_x").b()) continue;
    const Value* x = n->inputs.at(0);
    const Value* w = n->inputs.at(1);
    const bool i8 = w->type.dtype == DType::i8 && w->type.shape.at(1).value() <= kQuantizeXMaxK;
    if (x->type.dtype != DType::f32 || !(i8 || w->type.dtype == DType::u8)) continue;
    n->attrs["quantize_x"] = Attr(true);
    changed = true;
  }
  return changed;
}

}  // namespace updraft
