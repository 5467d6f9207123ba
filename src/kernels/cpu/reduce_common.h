// Shared by the f32 reduction (cpu/reduction.cpp) and norm (cpu/norm.cpp) kernels.
#pragma once
#include <omp.h>

#include <cstdint>
#include <memory>
#include <string>
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

// f64 forms of the reductions (cpu/reduction_f64.cpp) and norms (cpu/norm_f64.cpp), asked by
// the factories in reduction.cpp / norm.cpp when input 0 is not f32; nullptr unless it is f64.
std::unique_ptr<Kernel> make_f64_reduction(const KernelContext& ctx, const std::string& name);
std::unique_ptr<Kernel> make_f64_norm(const KernelContext& ctx, const std::string& name);
// i64 forms of sum, prod, amax, amin and cumsum (cpu/reduction_int.cpp);
// nullptr for other dtypes and ops.
std::unique_ptr<Kernel> make_int_reduction(const KernelContext& ctx, const std::string& name);

// Sum of f(x[i]) for i < n in double: 16 partial sums per leaf of 256 elements (independent
// lanes, so the compiler vectorises the loop without reassociating anything) and leaves joined
// pairwise, so the rounding error grows with log2(n / 256) instead of n.
template <typename F>
double pairwise_sum_f64(const double* x, int64_t n, F f) {
  constexpr int64_t kLeaf = 256;
  if (n <= kLeaf) {
    double acc[16] = {};
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
      for (int j = 0; j < 16; ++j) acc[j] += f(x[i + j]);
    for (int j = 0; i < n; ++i, ++j) acc[j] += f(x[i]);
    for (int w = 8; w >= 1; w /= 2)
      for (int j = 0; j < w; ++j) acc[j] += acc[j + w];
    return acc[0];
  }
  int64_t h = (n / 2 + 15) / 16 * 16;  // split on a multiple of 16: full lanes in the left half
  return pairwise_sum_f64(x, h, f) + pairwise_sum_f64(x + h, n - h, f);
}
inline double row_sum_f64(const double* x, int64_t n) {
  return pairwise_sum_f64(x, n, [](double v) { return v; });
}

// Norm kernels live in cpu/norm.cpp; register_cpu_reduction_kernels calls this.
void register_cpu_norm_kernels(KernelRegistry& r);
// batch_norm_train and batch_norm_backward (cpu/batch_norm_train.cpp); register_cpu_norm_kernels calls this.
void register_cpu_batch_norm_train_kernels(KernelRegistry& r);

// Splits a contiguous input into [O, R, I] when the reduced dims form one block.
inline bool as_block(const TensorView& x, const std::vector<bool>& mask, int64_t& O, int64_t& R, int64_t& I) {
  O = R = I = 1;
  int state = 0;  // 0: before the block, 1: inside, 2: after
  for (int d = 0; d < x.ndim; ++d) {
    if (x.sizes[d] == 1) continue;  // size-1 dims neither split nor join blocks
    if (mask[d]) {
      if (state == 2) return false;
      state = 1;
      R *= x.sizes[d];
    } else {
      if (state == 1) state = 2;
      (state == 0 ? O : I) *= x.sizes[d];
    }
  }
  return true;
}

}  // namespace updraft::cpu
