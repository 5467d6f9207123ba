#include "passes/fold_transpose_matmul.h"

#include <string>
#include <vector>

#include "ir/ops/params.h"

namespace updraft {

namespace {

bool fold_operand(Node* mm, int k, const char* attr) {
  const Node* p = mm->input(k)->producer;
  if (p == nullptr || p->op_name() != "permute" || !swaps_two_dims(p->attr("dims").ints(), -2, -1)) return false;
  mm->inputs[k] = p->inputs[0];
  mm->attrs[attr] = Attr(!mm->attr(attr).b());
  return true;
}

}  // namespace

bool fold_transpose_matmul(Graph& g) {
  bool changed = false;
  for (Node* n : g.nodes()) {
    if (n->op_name() != "matmul" || n->output()->type.dtype != DType::f32) continue;
    if (n->input(0)->type.dtype != DType::f32 || n->input(1)->type.dtype != DType::f32) continue;
    changed |= fold_operand(n, 0, "transpose_a");
    changed |= fold_operand(n, 1, "transpose_b");
  }
  return changed;
}

}  // namespace updraft
