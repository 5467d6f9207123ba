// Shared machinery of the fast elementwise kernels (src/kernels/cpu/elementwise*.cpp):
//
//   BcastPlan p = make_bcast_plan(out, in, nin, "add");   // collapse dims, 0-strides for broadcast
//   bcast_for(p, 256, [&] { return [&](const int64_t* off, int64_t n) { ... }; });
//
// f32 ops (single ops and fused programs alike) and f64 single ops run through BlockProgram: a
// one-pass, blocked evaluator that holds each intermediate in a small stack buffer. Integer/bool ops and cast
// have typed loops in elementwise_int.cpp.
#pragma once
#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>

#include "core/error.h"
#include "core/tensor.h"
#include "ir/elementwise_program.h"
#include "kernels/cpu/threads.h"
#include "kernels/kernel.h"

namespace updraft::cpu_ew {

constexpr int kMaxInputs = 16;
constexpr int kMaxOperands = kMaxInputs + 1;  // operand 0 is the output
// Below this many elements a single thread wins: an OpenMP fork/join costs a few microseconds.
constexpr int64_t kParallelMin = 32768;

// Iteration plan over an output and its inputs. Output dims of size 1 are dropped and
// adjacent dims merged wherever every operand steps through them jointly, so contiguous and
// same-shape cases become one flat dim. strides[k] is operand k's stride per dim in elements
// (0 where input k broadcasts). numel == 0 means nothing to do.
//
// Periodic inputs (make_bcast_plan's periodic_chunk > 0): an input that repeats the P
// elements of the last dim over the dim before it (stride 0 there, stride 1 over P) lets
// those two dims merge anyway; period[k] = P and its inner stride is 0 (element i of the
// merged dim is base[i % P]). A per-channel vector against a channel-blocked tensor
// ([N, C/B, H, W, B] times [N, C/B, 1, 1, B], passes/block_conv_layout.h) then runs in
// blocks of kBlock elements instead of rows of B. Only when P divides periodic_chunk, so
// every chunk bcast_for hands out starts at phase 0.
struct BcastPlan {
  int ndim = 1;
  int nops = 0;
  int64_t numel = 0;
  bool periodic = false;  // whether period[0, nops) is set
  // Only sizes[0, ndim), strides[0, nops)[0, ndim) and (if periodic) period[0, nops) are set:
  // the arrays are left uninitialised because clearing all of them (about 1 KB) is a visible
  // part of a small call.
  int64_t sizes[kMaxDims];
  int64_t strides[kMaxOperands][kMaxDims];
  int64_t period[kMaxOperands];  // 0: not periodic
  int64_t inner() const { return sizes[ndim - 1]; }
  int64_t inner_stride(int k) const { return strides[k][ndim - 1]; }
  int64_t inner_period(int k) const { return periodic ? period[k] : 0; }
};
BcastPlan make_bcast_plan(const TensorView& out, const TensorView* in, int nin, const std::string& op,
                          int64_t periodic_chunk = 0);

// The OpenMP thread count an elementwise kernel runs with: the compile's (ctx.num_threads) when
// set, else the caller's. Applied with cpu::ScopedThreads around the kernel's run.
inline int ew_threads(int requested) { return requested > 0 ? requested : omp_get_max_threads(); }

// Items [it0, it1) of a plan's walk (`per_row` chunks of at most `chunk` inner-dim elements per
// row, rows in row-major order over the outer dims) to body(offsets, n). Divisions place the
// first item only; after that the offsets step (an odometer over the outer dims), since four
// 64-bit divisions per item cost as much as a short block's arithmetic (a [1, 960, 7, 7]
// per-channel multiply is 960 items of 49 elements).
template <typename Body>
void walk_items(const BcastPlan& p, int64_t chunk, int64_t per_row, int64_t it0, int64_t it1, Body& body) {
  const int nd = p.ndim, nops = p.nops;
  const int64_t inner = p.inner();
  int64_t idx[kMaxDims], row_off[kMaxOperands];  // only [0, nd - 1) and [0, nops) are used
  for (int d = 0; d + 1 < nd; ++d) idx[d] = 0;
  for (int k = 0; k < nops; ++k) row_off[k] = 0;
  int64_t row = it0 / per_row, j = it0 % per_row;
  for (int d = nd - 2; d >= 0 && row; --d) {
    idx[d] = row % p.sizes[d];
    row /= p.sizes[d];
    for (int k = 0; k < nops; ++k) row_off[k] += idx[d] * p.strides[k][d];
  }
  int64_t off[kMaxOperands];
  for (int64_t it = it0; it < it1;) {
    for (; j < per_row && it < it1; ++j, ++it) {
      const int64_t j0 = j * chunk;
      for (int k = 0; k < nops; ++k) off[k] = row_off[k] + j0 * p.strides[k][nd - 1];
      body(static_cast<const int64_t*>(off), std::min(chunk, inner - j0));
    }
    j = 0;
    for (int d = nd - 2; d >= 0; --d) {  // the next row
      for (int k = 0; k < nops; ++k) row_off[k] += p.strides[k][d];
      if (++idx[d] < p.sizes[d]) break;
      for (int k = 0; k < nops; ++k) row_off[k] -= p.sizes[d] * p.strides[k][d];
      idx[d] = 0;
    }
  }
}

// Walks the plan in chunks of at most `chunk` inner-dim elements, in parallel when the tensor
// is large (each thread a contiguous range of items). make_worker() runs once per thread and
// returns body(offsets, n): offsets[k] is operand k's element offset at the chunk start;
// consecutive elements step by inner_stride(k).
template <typename MakeWorker>
void bcast_for(const BcastPlan& p, int64_t chunk, MakeWorker make_worker) {
  if (p.numel == 0) return;
  const int64_t inner = p.inner();
  const int64_t per_row = (inner + chunk - 1) / chunk;
  const int64_t items = (p.numel / inner) * per_row;
  // The team size is the calling thread's OpenMP setting, which the kernel has capped at the
  // compile's thread count (elementwise kernels run inside cpu::ScopedThreads, see ew_threads).
  const bool parallel = p.numel > kParallelMin && items > 1 && omp_get_max_threads() > 1;
  if (!parallel) {
    // Serial: no OpenMP region at all (even `parallel if (false)` builds a team, which costs
    // more than a small op itself).
    auto body = make_worker();
    walk_items(p, chunk, per_row, 0, items, body);
    return;
  }
#pragma omp parallel
  {
    const int64_t t = omp_get_thread_num(), T = omp_get_num_threads();
    const int64_t it0 = items * t / T, it1 = items * (t + 1) / T;
    if (it0 < it1) {
      auto body = make_worker();
      walk_items(p, chunk, per_row, it0, it1, body);
    }
  }
}

// ---- f32 / f64 evaluation ----------------------------------------------------------------

constexpr int kBlock = 128;    // elements per block; a block of every live value fits in L1
constexpr int kMaxSlots = 64;  // inputs + immediates + live intermediates of one program

// d[i] = op(a[i], b[i], c[i]) for i < n (n <= kBlock); unused operands may be null. d may
// alias an operand. The f32 form is in elementwise_f32_ops.cpp (AVX2/FMA), the f64 form in
// elementwise_f64.cpp (per-element loops in double, the reference's formulas).
template <typename T> using BlockFn = void (*)(const T* a, const T* b, const T* c, T* d, int n);
// op's block functor for T (float or double), or nullptr where there is none (no fast kernel).
// A program resolves its steps' functors once, at compile: per block and step the evaluator
// then makes one direct call, not a switch behind a call through the shared object's PLT
// (a fifth of an optimizer program's time, measured in docs/BENCHMARKS.md, session 43).
BlockFn<float> block_fn(EwOp op, float);
BlockFn<double> block_fn(EwOp op, double);

// The table over a family's block functors, generated from the op rows: Fn<op> is a
// specialisation per op with `static void run(a, b, c, d, n)` and kHas = true; the primary
// template (kHas = false) stands for "no fast functor".
template <template <EwOp> class Fn, typename T>
BlockFn<T> block_fn_of(EwOp op) {
  switch (op) {
#define UPDRAFT_EW_OP(name, ...)                                  \
  case EwOp::name:                                                \
    if constexpr (Fn<EwOp::name>::kHas) return &Fn<EwOp::name>::run; \
    return nullptr;
#include "ir/elementwise_ops.def"
    case EwOp::count_: break;
  }
  return nullptr;
}

// A program compiled to slots: every input, immediate and intermediate owns a block-sized
// slot; intermediates reuse slots after their last use. T is the data type (float or double):
// inputs are T or bool, every intermediate is computed in T, the output is T or bool.
template <typename T>
class BlockProgram {
 public:
  // Returns nullptr when the program needs more inputs or slots than the stack blocks hold;
  // the caller then declines and the reference kernel runs.
  static std::unique_ptr<BlockProgram> compile(const EwProgram& p, int num_inputs);
  // out: output 0, then one per extra result of the program (contiguous, output 0's shape).
  void run(const TensorView* in, int nin, TensorView* out, const std::string& op) const;
  // Per step, the output it may write in place of its slot (-1: its slot): an extra result
  // goes straight to its output when no input that output overlaps is read by a later step
  // (an optimizer's moment updated in place: its last read is the step that computes it).
  // Otherwise, as always, it is copied out once the block's reads are done. Empty when the
  // program has no extra results.
  std::vector<int> direct_outputs(const TensorView* in, int nin, const TensorView* outs) const;
  int num_inputs() const { return static_cast<int>(input_slot_.size()); }

 private:
  struct Step {
    BlockFn<T> fn;
    int nargs;
    int args[3];
    int dst;
  };
  static constexpr DType kData = sizeof(T) == 4 ? DType::f32 : DType::f64;
  std::vector<Step> steps_;
  std::vector<std::pair<int, T>> imms_;  // (slot, value), filled once per thread
  std::vector<int> input_slot_;          // per input; -1 when the program never reads it
  std::vector<int> also_slots_;          // the slot of each extra result (EwProgram::also)
  std::vector<int> also_step_;           // the step computing each extra result
  std::vector<int> input_last_read_;     // per input: the last step reading it (-1: none)
  int nslots_ = 0;
  DType out_dtype_ = kData;
};
using F32Program = BlockProgram<float>;
using F64Program = BlockProgram<double>;

// Kernels for one elementwise node / a fused_elementwise node on f32 data; nullptr to decline.
std::unique_ptr<Kernel> make_f32_kernel(const KernelContext& ctx);
// The same for one elementwise node on f64 data (where: f64 branches).
std::unique_ptr<Kernel> make_f64_kernel(const KernelContext& ctx);
std::unique_ptr<Kernel> make_fused_kernel(const KernelContext& ctx);
// Integer/bool ops (and cast between any supported dtypes); nullptr to decline.
std::unique_ptr<Kernel> make_int_kernel(const KernelContext& ctx);
std::unique_ptr<Kernel> make_cast_kernel(const KernelContext& ctx);

}  // namespace updraft::cpu_ew
