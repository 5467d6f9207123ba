// Integer reductions (i64): sum prod amax amin cumsum, called from the f32 factories in
// cpu/reduction.cpp when input 0 is an integer. Results have the input's dtype and accumulate
// in int64 with two's-complement wrap, as the reference kernels and PyTorch do.
//
// Why they exist: the lowering turns a symbolic size into a tensor as sum(expand(1, [s])) and
// builds positions with an i64 cumsum (transformers' masks, every decode step), and the
// reference kernels are built for one size, which turned range plans off for such graphs.
// These kernels run every shape as built (make_generic_kernel). They are plain loops: the
// tensors they see are index vectors, not hot data.
//
// Not here: mean and var (PyTorch refuses them on integers), argmax/argmin on integers, and
// other integer dtypes (the op table types these reductions for f32, f64 and i64 only).
#include <algorithm>
#include <limits>

#include "ir/op_table.h"
#include "ir/ops/params.h"
#include "kernels/cpu/reduce_common.h"
#include "kernels/cpu/strided_copy.h"
#include "kernels/cpu/threads.h"
#include "kernels/kernel.h"

namespace updraft::cpu {
namespace {

enum class IntOp { sum, prod, amax, amin };

// Wrapping int64 arithmetic (unsigned: signed overflow is undefined in C++).
inline int64_t wrap_add(int64_t a, int64_t b) {
  return static_cast<int64_t>(static_cast<uint64_t>(a) + static_cast<uint64_t>(b));
}
inline int64_t wrap_mul(int64_t a, int64_t b) {
  return static_cast<int64_t>(static_cast<uint64_t>(a) * static_cast<uint64_t>(b));
}

int64_t identity(IntOp op) {
  if (op == IntOp::amax) return std::numeric_limits<int64_t>::min();
  if (op == IntOp::amin) return std::numeric_limits<int64_t>::max();
  return op == IntOp::prod ? 1 : 0;
}

int64_t reduce_row(IntOp op, const int64_t* x, int64_t n) {
  int64_t acc = identity(op);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t v = x[i];
    switch (op) {
      case IntOp::sum: acc = wrap_add(acc, v); break;
      case IntOp::prod: acc = wrap_mul(acc, v); break;
      case IntOp::amax: acc = std::max(acc, v); break;
      case IntOp::amin: acc = std::min(acc, v); break;
    }
  }
  return acc;
}

// Kept dims first, reduced dims last: the packed input is [O, R] rows (R may be 0: every
// output is then the identity).
void run_reduce(IntOp op, const std::vector<bool>& mask, const TensorView& x, int64_t* y, int64_t O, int threads) {
  std::vector<int> order;
  int64_t R = 1;
  for (int d = 0; d < x.ndim; ++d)
    if (!mask[d]) order.push_back(d);
  for (int d = 0; d < x.ndim; ++d)
    if (mask[d]) order.push_back(d), R *= x.sizes[d];
  Packed packed(permute_view(x, order), threads);
  const int64_t* p = packed.ptr<int64_t>();
  parallel_for(O, threads_for(O * R, threads), [&](int64_t o) { y[o] = reduce_row(op, p + o * R, R); });
}

void run_cumsum(int dim, const TensorView& x, int64_t* y, int threads) {
  Packed packed(x, threads);
  const int64_t* p = packed.ptr<int64_t>();
  Lines L(packed.view(), x.ndim ? dim : 0);
  parallel_for(L.outer * L.inner, threads_for(x.numel(), threads), [&](int64_t line) {
    const int64_t o = line / L.inner, i = line % L.inner;
    int64_t acc = 0;
    for (int64_t j = 0; j < L.n; ++j) {
      const int64_t at = (o * L.n + j) * L.inner + i;
      y[at] = acc = wrap_add(acc, p[at]);
    }
  });
}

std::unique_ptr<Kernel> reduce_kernel(IntOp op, const KernelContext& ctx, const std::string& name) {
  if (ctx.out_dtype(0) != DType::i64) return nullptr;
  auto mask = reduce_mask(ctx.node.attr("dims").ints(), static_cast<int>(ctx.in_shapes[0].size()), name);
  const int threads = ctx.num_threads;
  return make_generic_kernel("cpu_int_" + name, [=](const TensorView* in, TensorView* out) {
    if ((op == IntOp::amax || op == IntOp::amin) && in[0].numel() == 0 && out[0].numel() > 0)
      throw Error(name, "cannot reduce over an empty dim (no identity)");
    if (out[0].numel() == 0) return;
    run_reduce(op, mask, in[0], out[0].ptr<int64_t>(), out[0].numel(), threads);
  });
}

std::unique_ptr<Kernel> cumsum_kernel(const KernelContext& ctx) {
  if (ctx.out_dtype(0) != DType::i64) return nullptr;
  const int dim = wrap_dim(ctx.node.attr("dim").i(), static_cast<int>(ctx.in_shapes[0].size()), "cumsum");
  const int threads = ctx.num_threads;
  return make_generic_kernel("cpu_int_cumsum", [=](const TensorView* in, TensorView* out) {
    if (out[0].numel() == 0) return;
    run_cumsum(dim, in[0], out[0].ptr<int64_t>(), threads);
  });
}

}  // namespace

std::unique_ptr<Kernel> make_int_reduction(const KernelContext& ctx, const std::string& name) {
  if (ctx.in_dtype(0) != DType::i64) return nullptr;
  if (name == "sum") return reduce_kernel(IntOp::sum, ctx, name);
  if (name == "prod") return reduce_kernel(IntOp::prod, ctx, name);
  if (name == "amax") return reduce_kernel(IntOp::amax, ctx, name);
  if (name == "amin") return reduce_kernel(IntOp::amin, ctx, name);
  if (name == "cumsum") return cumsum_kernel(ctx);
  return nullptr;
}

}  // namespace updraft::cpu
