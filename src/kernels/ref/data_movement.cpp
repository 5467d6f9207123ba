#include "ir/op_table.h"
#include "kernels/kernel.h"

namespace updraft {
void register_ref_data_movement_kernels(KernelRegistry& r) {}
}  // namespace updraft
