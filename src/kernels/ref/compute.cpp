#include "ir/op_table.h"
#include "kernels/kernel.h"

namespace updraft {
void register_ref_compute_kernels(KernelRegistry& r) {}
}  // namespace updraft
