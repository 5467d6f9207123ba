#include "passes/fold_transpose_matmul.h"

#include <string>
#include <vector>

namespace updraft {

namespace {

// permute dims that swap the last two and keep the others (negative dims count from the end).
bool swaps_last_two(const std::vector<int64_t>& dims) {
  const int64_t r = static_cast<int64_t>(dims.size());
  if (r < 2) return false;
  for (int64_t i = 0; i < r; ++i) {
    const int64_t d = dims[i] < 0 ? dims[i] + r : dims[i];
    const int64_t want = i == r - 2 ? r - 1 : i == r - 1 ? r - 2 : i;
    if (d != want) return false;
  }
  return true;
}

bool fold_operand(Node* mm, int k, const char* attr) {
  const Node* p = mm->input(k)->producer;
  if (p == nullptr || p->op_name() != "permute" || !swaps_last_two(p->attr("dims").ints())) return false;
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
