// Shared by the f32 reduction (cpu/reduction.cpp) and norm (cpu/norm.cpp) kernels.
#pragma once
#include <omp.h>

#include <cstdint>
#include <vector>

#include "kernels/kernel.h"

namespace updraft::cpu {

// Below ~32K elements the fork/join of an OpenMP region costs more than the work saves.
constexpr int64_t kParallelElems = int64_t{1} << 15;

inline int threads_for(int64_t elems, int requested) {
  if (elems < kParallelElems) return 1;
  return requested > 0 ? requested : omp_get_max_threads();
}

// A contiguous tensor seen as [outer, n, inner] around one dim.
struct Lines {
  int64_t outer = 1, n = 1, inner = 1;
  Lines(const TensorView& v, int dim) {
    for (int d = 0; d < v.ndim; ++d) {
      if (d < dim) outer *= v.sizes[d];
      else if (d == dim) n = v.sizes[d];
      else inner *= v.sizes[d];
    }
  }
};

// A factory that declines (nullptr) unless input 0 is f32, so other dtypes use the reference.
inline bool is_f32(const KernelContext& ctx) { return ctx.in_dtype(0) == DType::f32; }

// Norm kernels live in cpu/norm.cpp; register_cpu_reduction_kernels calls this.
void register_cpu_norm_kernels(KernelRegistry& r);

}  // namespace updraft::cpu
