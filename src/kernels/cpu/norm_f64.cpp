// f64 layer_norm and rms_norm (Device::cpu): rows over threads, the reference's arithmetic
// (mean, then the sum of squared deviations, in f64; (x - mean) * inv * w + b per element).
// The reference kernel copies each operand through a generic strided reader per call, which
// made layer norms 5% of a float64 BERT's time; these read dense rows in place. A strided
// graph input is copied dense first (cpu::Packed). Shape-generic.
#include <cmath>
#include <optional>
#include <string>

#include "kernels/cpu/f64_kernels.h"
#include "kernels/cpu/strided_copy.h"
#include "kernels/cpu/threads.h"

namespace updraft::cpu::f64 {

std::unique_ptr<Kernel> create_row_norm(const KernelContext& ctx, bool center) {
  const int nd = static_cast<int>(ctx.attr("normalized_ndim").i());
  const double eps = ctx.attr("eps").f();
  const bool hw = ctx.attr("has_weight").b(), hb = center && ctx.attr("has_bias").b();
  const double work = 5.0 * static_cast<double>(numel_of(ctx.in_shapes[0]));
  const int threads = threads_for_work(work, ctx.num_threads);
  std::string name = std::string("cpu_f64_") + (center ? "layer_norm" : "rms_norm");
  return make_generic_kernel(name, [=](const TensorView* in, TensorView* out) {
    std::optional<Packed> xc, wc, bc;
    const TensorView* x = &in[0];
    if (!x->is_contiguous()) x = &xc.emplace(*x, 1).view();
    const double* w = nullptr;
    const double* b = nullptr;
    if (hw) w = (in[1].is_contiguous() ? in[1] : wc.emplace(in[1], 1).view()).ptr<const double>();
    if (hb) b = (in[1 + hw].is_contiguous() ? in[1 + hw] : bc.emplace(in[1 + hw], 1).view()).ptr<const double>();
    int64_t cols = 1;
    for (int d = x->ndim - nd; d < x->ndim; ++d) cols *= x->sizes[d];
    const int64_t rows = cols ? x->numel() / cols : 0;
    const double* xp = x->ptr<const double>();
    double* yp = out[0].ptr<double>();
    ScopedThreads scoped(threads);
    parallel_for(rows, threads, [&](int64_t r) {
      const double* xr = xp + r * cols;
      double* yr = yp + r * cols;
      double mean = 0;
      if (center) {
        for (int64_t j = 0; j < cols; ++j) mean += xr[j];
        mean /= static_cast<double>(cols);
      }
      double ss = 0;
      for (int64_t j = 0; j < cols; ++j) ss += (xr[j] - mean) * (xr[j] - mean);
      const double inv = 1.0 / std::sqrt(ss / static_cast<double>(cols) + eps);
      for (int64_t j = 0; j < cols; ++j) {
        double v = (xr[j] - mean) * inv;
        if (w) v *= w[j];
        if (b) v += b[j];
        yr[j] = v;
      }
    });
  });
}

}  // namespace updraft::cpu::f64
