// The one harness for "one node, reference vs fast kernel" tests: build a graph holding one op,
// run it on the fast (Device::cpu) kernel and on the reference kernel, compare every output.
//
//   OneNode n("add", {a.view(), input(b), constant(c)});      // graph inputs, strided views, constants
//   EXPECT_TRUE(cpu_matches_ref(n, kF32Rtol, kF32Atol));        // the CPU factory must build a kernel
//   EXPECT_TRUE(cpu_matches_ref("clamp", {x.view()}, attrs, kExact, kExact, Fast::may_fall_back));
//   std::string name = expect_matches_ref("conv2d", {input(x), constant(w)}, attrs);  // + which kernel ran
//   auto k = make_kernel_for(n, Device::cpu); Tensor out = run_kernel(*k, n);         // one step at a time
//
// Kernels come from the KernelRegistry families, called directly: with Fast::required a CPU
// factory that declines fails the test instead of falling back to the reference, so a test can
// never compare the reference with itself. Fast::may_fall_back goes through
// KernelRegistry::create, as the runtime does (for configurations only the reference runs).
// Not here: random tensors, strided copies and all_close (test_util.h); graph-level tests (a
// compiled plan) build their own graphs.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"
#include "core/tensor.h"
#include "ir/elementwise_program.h"
#include "ir/graph.h"
#include "ir/op_table.h"
#include "kernels/kernel.h"
#include "kernels/quantize.h"
#include "test_util.h"

namespace updraft::testing {

// ---- Tolerances shared by several test files (each says why; file-specific ones stay local) ----

// Integer, bool and pure data-selection results (where, compares, casts, copies, argmax) are
// bit-equal: any difference is a bug.
constexpr double kExact = 0.0;
// PyTorch-parity target for f32 elementwise kernels: vector polynomials are within a few ulp of
// the correctly rounded result, and the C-library paths within 1 ulp.
constexpr double kF32Rtol = 1e-5;
constexpr double kF32Atol = 1e-6;
// f32 conv / gemm vs the double-accumulating reference: oneDNN reorders (blocks, splits) the
// K-sums and its eltwise post-ops use polynomial approximations, so results differ from the
// exactly-rounded double result by a few ulps times sqrt(K); with inputs in [-2, 2] and K up
// to a few hundred that stays well under 1e-4 absolute + relative.
constexpr double kGemmRtol = 1e-4, kGemmAtol = 1e-4;

// ---- Building the node -------------------------------------------------------------------------

// One input of the node under test: what the kernels read (`view`, possibly strided), whether it
// enters the graph as a constant (weights: prepacked) or a graph input, and the storage the
// harness keeps alive. A bare TensorView converts to a graph input read through that view (the
// caller keeps its memory alive).
struct Arg {
  TensorView view;
  bool constant = false;
  Tensor owned;  // the logical values (input()/constant()/transposed_input(); constants come from it)
  Tensor store;  // a strided view's memory (Tensor copies share their storage)
  Arg() = default;
  Arg(const TensorView& v) : view(v) {}  // NOLINT: implicit, so {a.view(), b.view()} reads well
};

inline Arg input(Tensor t) {
  Arg a(t.view());
  a.owned = std::move(t);
  return a;
}
inline Arg constant(Tensor t) {
  Arg a = input(std::move(t));
  a.constant = true;
  return a;
}
// A graph input handed to the kernel as a strided view of `store` (which the Arg keeps alive).
inline Arg strided_input(TensorView v, Tensor store) {
  Arg a(v);
  a.store = std::move(store);
  return a;
}
// A graph input handed to the kernel as a transposed-in-memory (non-contiguous) view of `t`.
inline Arg transposed_input(Tensor t) {
  auto [v, store] = transposed_copy(t);
  Arg a = strided_input(v, std::move(store));
  a.owned = std::move(t);
  return a;
}

// Graph inputs read through caller-owned views (for a vector built up by the test).
inline std::vector<Arg> inputs_of(const std::vector<TensorView>& views) { return {views.begin(), views.end()}; }

// A graph with one node `op` over `args` (graph inputs take the views' dtypes and shapes).
struct OneNode {
  Graph g;
  Node* node = nullptr;
  std::vector<Arg> args;
  std::vector<TensorView> views;  // what the kernels read, one per input

  OneNode(const std::string& op, std::vector<Arg> in, Attrs attrs = {}) : args(std::move(in)) {
    std::vector<Value*> vals;
    for (size_t k = 0; k < args.size(); ++k) {
      std::string name = "x" + std::to_string(k);
      const TensorView& v = args[k].view;
      vals.push_back(args[k].constant ? g.add_constant(name, args[k].owned)
                                      : g.add_input(name, {v.dtype, shape_from(v.shape())}));
      views.push_back(v);
    }
    node = g.add_node(op, vals, std::move(attrs));
  }
  OneNode(const OneNode&) = delete;
  OneNode& operator=(const OneNode&) = delete;

  // The context a plan step would give the kernels (concrete shapes, constant inputs).
  KernelContext context(int num_threads = 0, const KernelOptions& options = {}) const {
    KernelContext ctx{*node, {}, {}, {}, num_threads, nullptr, options};
    for (size_t k = 0; k < views.size(); ++k) {
      ctx.in_shapes.push_back(views[k].shape());
      ctx.const_inputs.push_back(node->inputs[k]->is_constant() ? &*node->inputs[k]->constant : nullptr);
    }
    for (Value* o : node->outputs) ctx.out_shapes.push_back(shape_values(o->type.shape));
    return ctx;
  }
  // Name of the kernel the registry picks for `d` (the runtime's choice, fallback included).
  std::string kernel_name(Device d) const { return KernelRegistry::get().create(context(), d)->name(); }
};

// The same on the heap, for tests that keep or pass nodes around.
inline std::unique_ptr<OneNode> build(const std::string& op, std::vector<Arg> args, Attrs attrs = {}) {
  return std::make_unique<OneNode>(op, std::move(args), std::move(attrs));
}

// ---- Running kernels ---------------------------------------------------------------------------

// Aligned per-call scratch owned by the caller (one per thread in the threading tests).
struct Scratch {
  explicit Scratch(size_t bytes) : buf(bytes + 64) {}
  void* get() { return reinterpret_cast<void*>((reinterpret_cast<uintptr_t>(buf.data()) + 63) & ~uintptr_t{63}); }
  std::vector<char> buf;
};

// The kernel `d`'s own factory builds (no fallback); nullptr, with a test failure, when there
// is none or it declines.
inline std::unique_ptr<Kernel> make_kernel_for(const OneNode& n, Device d, int num_threads = 0,
                                               const KernelOptions& options = {}) {
  const KernelFactory* f = KernelRegistry::get().find(n.node->op_name(), d);
  EXPECT_NE(f, nullptr) << "no " << device_name(d) << " kernel for " << n.node->op_name();
  if (!f) return nullptr;
  auto k = (*f)(n.context(num_threads, options));
  EXPECT_NE(k, nullptr) << device_name(d) << " factory declined " << n.node->op_name();
  return k;
}
// The same under kernel knobs other than the defaults (CompileOptions::kernels).
inline std::unique_ptr<Kernel> make_kernel_for(const OneNode& n, Device d, const KernelOptions& options) {
  return make_kernel_for(n, d, 0, options);
}

// Runs `k` on the node's input views into freshly allocated contiguous outputs, with the
// scratch `k` asks for at the node's shapes too (a kernel built for other shapes may run these).
inline std::vector<Tensor> run_kernel_outputs(const Kernel& k, const OneNode& n) {
  std::vector<Tensor> outs;
  std::vector<TensorView> ov;
  for (Value* o : n.node->outputs) outs.emplace_back(o->type.dtype, shape_values(o->type.shape));
  for (Tensor& t : outs) ov.push_back(t.view());
  // scratch_bytes_for answers only for shapes the kernel runs as it is (runs_shapes_of); the
  // shapes it was built for may need more (sdpa staging strided operands).
  const KernelContext ctx = n.context();
  Scratch s(k.runs_shapes_of(ctx) ? std::max(k.scratch_bytes(), k.scratch_bytes_for(ctx)) : k.scratch_bytes());
  k.run(n.views.data(), ov.data(), s.get());
  return outs;
}
inline Tensor run_kernel(const Kernel& k, const OneNode& n) { return run_kernel_outputs(k, n)[0]; }

// ---- Comparing fast and reference --------------------------------------------------------------

enum class Fast {
  required,       // the CPU factory must build a kernel for this node (a decline fails)
  may_fall_back,  // the runtime's choice: the reference runs what the CPU factory declines
};

// Runs the node on the CPU kernel and the reference kernel and compares every output within
// |got - want| <= atol + rtol * |want| (NaN positions must match). `ran`: the CPU kernel's name.
inline ::testing::AssertionResult cpu_matches_ref(const OneNode& n, double rtol, double atol,
                                                  Fast fast = Fast::required, std::string* ran = nullptr,
                                                  const KernelOptions& options = {}) {
  const std::string& op = n.node->op_name();
  std::unique_ptr<Kernel> cpu = fast == Fast::required ? make_kernel_for(n, Device::cpu, options)
                                                       : KernelRegistry::get().create(n.context(0, options), Device::cpu);
  if (!cpu) return ::testing::AssertionFailure() << op << ": no CPU kernel was built (see the failure above)";
  auto ref = make_kernel_for(n, Device::ref);
  if (!ref) return ::testing::AssertionFailure() << op << ": no reference kernel";
  if (ran) *ran = cpu->name();
  auto want = run_kernel_outputs(*ref, n);
  auto got = run_kernel_outputs(*cpu, n);
  for (size_t k = 0; k < want.size(); ++k) {
    auto r = all_close(got[k], want[k], rtol, atol);
    if (!r)
      return ::testing::AssertionFailure() << op << " via " << cpu->name() << ", output " << k << " "
                                           << n.node->outputs[k]->type.str() << ": " << r.message();
  }
  return ::testing::AssertionSuccess();
}

inline ::testing::AssertionResult cpu_matches_ref(const std::string& op, std::vector<Arg> args, Attrs attrs,
                                                  double rtol, double atol, Fast fast = Fast::required) {
  OneNode n(op, std::move(args), std::move(attrs));
  return cpu_matches_ref(n, rtol, atol, fast);
}

// The same as an EXPECT; returns the CPU kernel's name ("" when none was built), so tests can
// assert which implementation ran.
inline std::string expect_matches_ref(const std::string& op, std::vector<Arg> args, Attrs attrs,
                                      double rtol = kGemmRtol, double atol = kGemmAtol, Fast fast = Fast::required) {
  OneNode n(op, std::move(args), std::move(attrs));
  std::string ran;
  EXPECT_TRUE(cpu_matches_ref(n, rtol, atol, fast, &ran));
  return ran;
}
// The same under kernel knobs other than the defaults.
inline std::string expect_matches_ref(const std::string& op, std::vector<Arg> args, Attrs attrs, double rtol,
                                      double atol, const KernelOptions& options, Fast fast = Fast::required) {
  OneNode n(op, std::move(args), std::move(attrs));
  std::string ran;
  EXPECT_TRUE(cpu_matches_ref(n, rtol, atol, fast, &ran, options));
  return ran;
}

// One kernel, `threads` threads, each calling it `reps` times with its own scratch and output:
// every thread's result must match the single-threaded reference (Kernel::run is const and
// reentrant; oneDNN primitives with a user scratchpad are too).
inline void expect_same_from_threads(const OneNode& n, int reps, double rtol, double atol, int threads = 4) {
  auto fast = make_kernel_for(n, Device::cpu);
  auto ref = make_kernel_for(n, Device::ref);
  ASSERT_TRUE(fast && ref);
  Tensor want = run_kernel(*ref, n);
  std::vector<Tensor> outs(threads);
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t)
    pool.emplace_back([&, t] {
      for (int rep = 0; rep < reps; ++rep) outs[t] = run_kernel(*fast, n);
    });
  for (auto& t : pool) t.join();
  for (int t = 0; t < threads; ++t)
    EXPECT_TRUE(all_close(outs[t], want, rtol, atol)) << n.node->op_name() << " via " << fast->name() << ", thread " << t;
}

// ---- Fused epilogue activations ---------------------------------------------------------------

// Every activation a compute op's fused epilogue accepts (the `activation` attribute of linear,
// matmul and conv2d, checked by one function in src/ir/ops/compute.cpp): the attribute's default
// ("none") and each elementwise op (ew_op_info) the op table's check accepts. The op table keeps
// no list of them to read, so it is asked; an activation becomes tested as soon as the op table
// accepts it. (An activation not spelled like an elementwise op would be missed; they are the
// same vocabulary.)
inline std::vector<std::string> epilogue_activations() {
  const OpDef& linear = OpTable::get().at("linear");
  std::vector<std::string> r;
  for (const AttrSpec& a : linear.attrs)
    if (a.name == "activation" && a.default_value) r.push_back(a.default_value->s());
  const std::vector<TensorType> in = {{DType::f32, {Dim(2), Dim(4)}}, {DType::f32, {Dim(3), Dim(4)}}};
  for (int k = 0; k < static_cast<int>(EwOp::count_); ++k) {
    std::string name = ew_op_info(static_cast<EwOp>(k)).name;
    try {
      OpTable::infer(linear, in, {{"activation", name}});
      r.push_back(name);
    } catch (const Error&) {
    }
  }
  return r;
}

// The epilogue attributes for `act`, with parameters that make them matter for the two
// activations that take some (act_alpha / act_beta default to 0: clamp(0, 0), a zero slope).
inline Attrs epilogue_attrs(const std::string& act) {
  Attrs a{{"activation", act}};
  if (act == "clamp") a["act_alpha"] = -0.5, a["act_beta"] = 0.7;
  if (act == "leaky_relu") a["act_alpha"] = 0.1;
  return a;
}

// ---- Small helpers for hand-written inputs -----------------------------------------------------

// Output types the op table infers for symbolic inputs.
inline std::vector<TensorType> infer(const std::string& op, const std::vector<TensorType>& in, const Attrs& attrs) {
  return OpTable::get().infer(op, in, attrs);
}

inline Tensor from_values(DType dt, const std::vector<int64_t>& shape, const std::vector<double>& v) {
  Tensor t(dt, shape);
  EXPECT_EQ(static_cast<int64_t>(v.size()), t.numel());
  for (size_t i = 0; i < v.size(); ++i) {
    switch (dt) {
      case DType::f32: t.ptr<float>()[i] = static_cast<float>(v[i]); break;
      case DType::f64: t.ptr<double>()[i] = v[i]; break;
      case DType::i64: t.ptr<int64_t>()[i] = static_cast<int64_t>(v[i]); break;
      case DType::i32: t.ptr<int32_t>()[i] = static_cast<int32_t>(v[i]); break;
      case DType::boolean: t.ptr<bool>()[i] = v[i] != 0; break;
      default: ADD_FAILURE() << "from_values: dtype not handled";
    }
  }
  return t;
}

inline std::vector<double> values_of(const Tensor& t) {
  std::vector<double> r;
  for (int64_t i = 0; i < t.numel(); ++i) r.push_back(element_as_double(t.view(), i));
  return r;
}

// ---- Low-precision weights and instruction sets (test_linear_wq.cpp, test_linear_i8.cpp) ----

// A random f32 weight [N, K] quantized per row as the engine stores it: (i8 q, f32 scale).
inline std::pair<Tensor, Tensor> int8_weight(int64_t N, int64_t K, uint32_t seed) {
  Tensor w = random_tensor(DType::f32, {N, K}, seed);
  Tensor q(DType::i8, {N, K}), s(DType::f32, {N});
  for (int64_t n = 0; n < N; ++n) s.ptr<float>()[n] = quantize_row_int8(w.ptr<float>() + n * K, K, q.ptr<int8_t>() + n * K);
  return {q, s};
}

// The same as an int4 weight: q u8 [N, K / 2] and a bf16 scale per group of 32, [N, K / 32] (K a
// multiple of 64).
inline std::pair<Tensor, Tensor> int4_weight(int64_t N, int64_t K, uint32_t seed) {
  Tensor w = random_tensor(DType::f32, {N, K}, seed);
  const int64_t G = K / kInt4Group;
  Tensor q(DType::u8, {N, K / 2}), s(DType::bf16, {N, G});
  for (int64_t n = 0; n < N; ++n)
    quantize_row_int4(w.ptr<float>() + n * K, K, q.ptr<uint8_t>() + n * (K / 2), s.ptr<uint16_t>() + n * G);
  return {q, s};
}

// A linear node's epilogue inputs for test level `epi`: 0 none, 1 a bias [N], 2 a bias, a
// residual [M, N] and SiLU (appended to args, flagged in attrs).
inline void add_linear_epilogue(std::vector<Arg>& args, Attrs& attrs, int epi, int64_t M, int64_t N) {
  if (epi >= 1) {
    args.push_back(constant(random_tensor(DType::f32, {N}, 3)));
    attrs["has_bias"] = Attr(true);
  }
  if (epi == 2) {
    args.push_back(input(random_tensor(DType::f32, {M, N}, 4)));
    attrs["has_residual"] = Attr(true);
    attrs["activation"] = Attr("silu");
  }
}

inline KernelOptions isa_options(CpuIsa isa) {
  KernelOptions o;
  o.cpu_isa = isa;
  return o;
}

}  // namespace updraft::testing
