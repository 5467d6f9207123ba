#include "ir/op_table.h"
#include "kernels/kernel.h"

namespace updraft {
void register_norm_ops(OpTable& t) {}
}  // namespace updraft
