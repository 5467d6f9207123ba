// KernelOptions: the knobs that change which kernel a factory builds or how it runs it, never
// what it computes beyond summation order. One struct, carried from CompileOptions::kernels
// (passes/options.h) to every factory in KernelContext::options: no kernel reads the
// environment or a global setting, so two compiles in one process may use different values,
// and a test sets a field instead of an environment variable.
//
// Users set them through updraft.CompilerConfig (python/updraft/config.py), which reads the
// UPDRAFT_* environment variables for its defaults and validates every value, in one place; the
// engine's bindings only convert (cpu_isa_from_name is the conversion for the one enumerated
// knob, and refuses names it does not know).
#pragma once
#include <cstdint>
#include <string>

namespace updraft {

namespace cpu {
// Work (flops, or element operations for memory-bound kernels) below which a second thread
// does not pay for its fork/join: about 25 us of AVX2/AVX-512 f32 compute on one core
// (kernels/cpu/threads.h). KernelOptions::min_work_per_thread's default.
constexpr double kMinWorkPerThread = 2.0 * 1024 * 1024;

// What the per-kernel thread rule takes from the compile (KernelContext::thread_budget()): the
// cap on threads (0: OpenMP's count) and the work one thread must have before a second pays.
struct ThreadBudget {
  int requested = 0;
  double min_work = kMinWorkPerThread;
};
}  // namespace cpu

// The widest instruction set the engine's own kernels use (the sdpa tiles, the f64 gemm
// micro-kernels): native is AVX-512F where the CPU has it, else AVX2. oneDNN's primitives pick
// their own and are not affected.
enum class CpuIsa : uint8_t { native, avx2 };

struct KernelOptions {
  // A linear or matmul with a constant weight keeps a copy of it in oneDNN's blocked layout
  // (fastest; one more copy of every weight). false reads the weight in place: less memory,
  // some speed (docs/BENCHMARKS.md). CompilerConfig.prepack_weights, UPDRAFT_PREPACK_WEIGHTS.
  bool prepack_weights = true;
  // true turns off the runtime-M linear (one oneDNN matmul per compile for a symbolic batch):
  // every new shape then builds static primitives, for comparing the two on a given machine.
  // CompilerConfig.static_gemm, UPDRAFT_STATIC_GEMM.
  bool static_gemm = false;
  // CompilerConfig.cpu_isa, UPDRAFT_CPU_ISA ("native" or "avx2").
  CpuIsa cpu_isa = CpuIsa::native;
  // The per-kernel thread rule's threshold (cpu::threads_for_work): a tuning knob for
  // benchmarks on idle or shared machines. > 0. CompilerConfig.min_work_per_thread,
  // UPDRAFT_MIN_WORK_PER_THREAD.
  double min_work_per_thread = cpu::kMinWorkPerThread;
  // TEST-ONLY deliberate fault ("kernel:OP" of CompilerConfig.debug_fault, for testing
  // updraft.debug.bisect): every kernel built for op `fault_op` adds 1 to element 0 of its
  // output 0 (KernelRegistry::create wraps it). Empty: off.
  std::string fault_op;
};

// "native" -> CpuIsa::native, "avx2" -> CpuIsa::avx2; anything else throws Error("options", ...)
// naming the accepted values.
CpuIsa cpu_isa_from_name(const std::string& name);
const char* cpu_isa_name(CpuIsa isa);

// Whether a kernel built with `o` may use its AVX-512F code: the CPU has it and cpu_isa allows it.
bool use_avx512(const KernelOptions& o);

}  // namespace updraft
