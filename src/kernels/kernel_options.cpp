#include "kernels/kernel_options.h"

#include "core/error.h"

namespace updraft {

namespace {
constexpr struct {
  const char* name;
  CpuIsa isa;
} kCpuIsas[] = {{"native", CpuIsa::native}, {"avx2", CpuIsa::avx2}};
}  // namespace

CpuIsa cpu_isa_from_name(const std::string& name) {
  std::string accepted;
  for (const auto& e : kCpuIsas) {
    if (name == e.name) return e.isa;
    accepted += std::string(accepted.empty() ? "" : ", ") + e.name;
  }
  throw Error("options", "cpu_isa='" + name + "' is not an instruction set the engine's kernels know; use one of " +
                             accepted);
}

const char* cpu_isa_name(CpuIsa isa) {
  for (const auto& e : kCpuIsas)
    if (e.isa == isa) return e.name;
  return "?";
}

bool use_avx512(const KernelOptions& o) { return o.cpu_isa == CpuIsa::native && __builtin_cpu_supports("avx512f"); }

}  // namespace updraft
