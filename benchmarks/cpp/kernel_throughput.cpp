// Kernel throughput against the machine's own ceilings: elementwise / norm kernels in GB/s
// next to a measured memcpy bandwidth, and linear and conv2d (oneDNN) in GFLOP/s next to the
// best gemm rate measured here (a large square problem).
//
//   cmake -S . -B build/bench -DUPDRAFT_BUILD_BENCHMARKS=ON && cmake --build build/bench -t kernel_throughput
//   build/bench/kernel_throughput --benchmark_filter=Gelu
//
// Each benchmark builds one node's cpu kernel for fixed shapes (as a plan would) and calls
// Kernel::run on preallocated buffers, so the numbers are the kernel's, not the runtime's.
// bytes_per_second counts every input read and the output written once. BM_GeluScalarLibm is
// the per-element C-library form the vector gelu replaced, kept as the before/after reference.
#include <benchmark/benchmark.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "core/tensor.h"
#include "ir/graph.h"
#include "ir/op_table.h"
#include "kernels/kernel.h"
#include "kernels/onednn/gemm.h"
#include "kernels/quantize.h"

using namespace updraft;

namespace {

Tensor filled(std::vector<int64_t> shape, uint32_t seed, float lo = -4.f, float hi = 4.f) {
  Tensor t(DType::f32, std::move(shape));
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(lo, hi);
  for (int64_t i = 0; i < t.numel(); ++i) t.ptr<float>()[i] = u(rng);
  return t;
}

// One node's cpu kernel over these inputs (constants where `constant[k]`), plus its buffers.
struct OneKernel {
  Graph g;
  std::vector<Tensor> ins;
  Tensor out, scratch;
  std::unique_ptr<Kernel> kernel;
  std::vector<TensorView> in_views;
  TensorView out_view;

  // `factory`: the kernel to build; null for the registry's pick, as a plan makes it.
  OneKernel(const std::string& op, std::vector<Tensor> inputs, Attrs attrs, std::vector<bool> constant = {},
            KernelFactory factory = nullptr, CpuIsa isa = CpuIsa::native, bool prepack = true)
      : ins(std::move(inputs)) {
    std::vector<Value*> vals;
    for (size_t k = 0; k < ins.size(); ++k) {
      bool c = k < constant.size() && constant[k];
      vals.push_back(c ? g.add_constant("c" + std::to_string(k), ins[k])
                       : g.add_input("x" + std::to_string(k), {DType::f32, shape_from(ins[k].shape())}));
    }
    Node* n = g.add_node(op, vals, std::move(attrs));
    KernelContext ctx{*n, {}, {}, {}, 0};
    ctx.options.cpu_isa = isa;
    ctx.options.prepack_weights = prepack;
    for (size_t k = 0; k < ins.size(); ++k) {
      ctx.in_shapes.push_back(ins[k].shape());
      ctx.const_inputs.push_back(vals[k]->is_constant() ? &*vals[k]->constant : nullptr);
    }
    std::vector<int64_t> oshape = shape_values(n->output()->type.shape);
    ctx.out_shapes.push_back(oshape);
    kernel = factory ? factory(ctx) : KernelRegistry::get().create(ctx, Device::cpu);
    out = Tensor(DType::f32, oshape);
    scratch = Tensor(DType::u8, {static_cast<int64_t>(kernel->scratch_bytes()) + 64});
    for (const Tensor& t : ins) in_views.push_back(t.view());
    out_view = out.view();
  }
  void run() { kernel->run(in_views.data(), &out_view, scratch.data()); }
};

constexpr int64_t kElems = 1 << 22;  // 16 MiB per f32 tensor: well past L2

void BM_Memcpy(benchmark::State& state) {
  std::vector<float> a(kElems, 1.f), b(kElems);
  for (auto _ : state) {
    std::memcpy(b.data(), a.data(), kElems * sizeof(float));
    benchmark::DoNotOptimize(b.data());
  }
  state.SetBytesProcessed(state.iterations() * kElems * 2 * static_cast<int64_t>(sizeof(float)));
}
BENCHMARK(BM_Memcpy)->UseRealTime();

void unary(benchmark::State& state, const char* op, Attrs attrs = {}) {
  OneKernel k(op, {filled({kElems}, 1)}, std::move(attrs));
  state.SetLabel(k.kernel->name());
  for (auto _ : state) k.run();
  state.SetBytesProcessed(state.iterations() * kElems * 2 * static_cast<int64_t>(sizeof(float)));
}
void BM_Relu(benchmark::State& s) { unary(s, "relu"); }
void BM_Exp(benchmark::State& s) { unary(s, "exp"); }
void BM_Erf(benchmark::State& s) { unary(s, "erf"); }
void BM_Gelu(benchmark::State& s) { unary(s, "gelu"); }
void BM_GeluTanh(benchmark::State& s) { unary(s, "gelu", {{"approximate", "tanh"}}); }
BENCHMARK(BM_Relu)->UseRealTime();
BENCHMARK(BM_Exp)->UseRealTime();
BENCHMARK(BM_Erf)->UseRealTime();
BENCHMARK(BM_Gelu)->UseRealTime();
BENCHMARK(BM_GeluTanh)->UseRealTime();

void BM_GeluScalarLibm(benchmark::State& state) {
  Tensor x = filled({kElems}, 1);
  std::vector<float> y(kElems);
  const float* px = x.ptr<float>();
  for (auto _ : state) {
    for (int64_t i = 0; i < kElems; ++i) y[i] = 0.5f * px[i] * std::erfc(-px[i] * static_cast<float>(M_SQRT1_2));
    benchmark::DoNotOptimize(y.data());
  }
  state.SetBytesProcessed(state.iterations() * kElems * 2 * static_cast<int64_t>(sizeof(float)));
}
BENCHMARK(BM_GeluScalarLibm)->UseRealTime();

void BM_Add(benchmark::State& state) {
  OneKernel k("add", {filled({kElems}, 1), filled({kElems}, 2)}, {});
  state.SetLabel(k.kernel->name());
  for (auto _ : state) k.run();
  state.SetBytesProcessed(state.iterations() * kElems * 3 * static_cast<int64_t>(sizeof(float)));
}
BENCHMARK(BM_Add)->UseRealTime();

void BM_LayerNorm(benchmark::State& state) {
  const int64_t rows = kElems / 768;
  OneKernel k("layer_norm", {filled({rows, 768}, 1), filled({768}, 2), filled({768}, 3)},
              {{"normalized_ndim", int64_t{1}}, {"eps", 1e-5}, {"has_weight", true}, {"has_bias", true}});
  state.SetLabel(k.kernel->name());
  for (auto _ : state) k.run();
  state.SetBytesProcessed(state.iterations() * rows * 768 * 2 * static_cast<int64_t>(sizeof(float)));
}
BENCHMARK(BM_LayerNorm)->UseRealTime();

void BM_Softmax(benchmark::State& state) {
  const int64_t rows = kElems / 1024;
  OneKernel k("softmax", {filled({rows, 1024}, 1)}, {{"dim", int64_t{-1}}});
  state.SetLabel(k.kernel->name());
  for (auto _ : state) k.run();
  state.SetBytesProcessed(state.iterations() * rows * 1024 * 2 * static_cast<int64_t>(sizeof(float)));
}
BENCHMARK(BM_Softmax)->UseRealTime();

// linear x [M, K] @ w[N, K]^T with a constant (prepacked) weight; GFLOP/s = 2 M N K / t.
void BM_Linear(benchmark::State& state) {
  const int64_t M = state.range(0), N = state.range(1), K = state.range(2);
  OneKernel k("linear", {filled({M, K}, 1, -1, 1), filled({N, K}, 2, -1, 1)}, {}, {false, true});
  state.SetLabel(k.kernel->name());
  for (auto _ : state) k.run();
  state.counters["GFLOPs"] = benchmark::Counter(2.0 * M * N * K * static_cast<double>(state.iterations()) / 1e9,
                                                benchmark::Counter::kIsRate);
}
BENCHMARK(BM_Linear)->Args({1024, 1024, 1024})->Args({128, 768, 768})->Args({1, 512, 512})->Args({64, 512, 512})
    ->UseRealTime();

// A decode step's linears: x [M, K] against 24 different constant weights in turn (more than
// the L3 holds, as a model's layers are), so every call streams its weight from memory. The
// engine's pick (the streaming kernel, cpu/linear_stream.h) against oneDNN's kernel for the same
// node (state.range(3) = 1); GB/s counts the weight bytes. `w` is the weight's shape.
void decode_gemm(benchmark::State& state, const char* op, std::vector<int64_t> w, KernelFactory onednn_kernel) {
  const int64_t M = state.range(0), K = std::string(op) == "linear" ? w[1] : w[0];
  constexpr int kWeights = 24;
  std::vector<std::unique_ptr<OneKernel>> ks;
  for (int i = 0; i < kWeights; ++i)
    ks.push_back(std::make_unique<OneKernel>(op, std::vector<Tensor>{filled({M, K}, 1, -1, 1), filled(w, 2 + i, -1, 1)},
                                             Attrs{}, std::vector<bool>{false, true},
                                             state.range(3) ? onednn_kernel : nullptr));
  state.SetLabel(ks[0]->kernel->name());
  for (auto _ : state)
    for (auto& k : ks) k->run();
  state.SetBytesProcessed(state.iterations() * kWeights * w[0] * w[1] * static_cast<int64_t>(sizeof(float)));
}
// linear, weight [N, K]. Args: M, N, K, kernel (0: the engine's, 1: oneDNN).
void BM_DecodeLinear(benchmark::State& state) {
  decode_gemm(state, "linear", {state.range(1), state.range(2)}, onednn::create_onednn_linear);
}
BENCHMARK(BM_DecodeLinear)
    ->ArgNames({"M", "N", "K", "onednn"})
    ->Args({1, 1024, 1024, 0})->Args({1, 1024, 1024, 1})
    ->Args({1, 2816, 1024, 0})->Args({1, 2816, 1024, 1})
    ->Args({1, 1024, 2816, 0})->Args({1, 1024, 2816, 1})
    ->Args({4, 2816, 1024, 0})->Args({4, 2816, 1024, 1})
    ->UseRealTime();

// matmul with a weight stored [K, N] (x @ W, GPT-2's Conv1D), at GPT-2 small's shapes (c_attn
// 768 x 2304, c_fc 768 x 3072, mlp c_proj 3072 x 768). Args: M, K, N, kernel.
void BM_DecodeMatmul(benchmark::State& state) {
  decode_gemm(state, "matmul", {state.range(1), state.range(2)}, onednn::create_onednn_matmul);
}
BENCHMARK(BM_DecodeMatmul)
    ->ArgNames({"M", "K", "N", "onednn"})
    ->Args({1, 768, 2304, 0})->Args({1, 768, 2304, 1})
    ->Args({1, 768, 3072, 0})->Args({1, 768, 3072, 1})
    ->Args({1, 3072, 768, 0})->Args({1, 3072, 768, 1})
    ->Args({4, 768, 3072, 0})->Args({4, 768, 3072, 1})
    ->UseRealTime();

// A prompt's linears (prefill): x [M, K] against 24 different constant weights in turn, as in
// decode_gemm, at the Llama shapes of tools/decode_linears.py and the 1B model. Args: M, N, K,
// kind: 0 the engine's f32 kernel that reads the weight in place (prepack_weights off, so past
// kInPlaceMaxRows too), 1 oneDNN's (packed) kernel, 2 an i8 weight
// (linear_wq with per-row scales); 3 and 4: 0 and 2 on AVX2 (the engine's baseline); 5 and 6: an i8
// and an int4 weight with int8 x (quantize_x, CompilerConfig.activation_dtype="int8"). GFLOP/s = 2 M N K / t.
void BM_PrefillLinear(benchmark::State& state) {
  const int64_t M = state.range(0), N = state.range(1), K = state.range(2);
  const bool avx2 = state.range(3) == 3 || state.range(3) == 4;
  const CpuIsa isa = avx2 ? CpuIsa::avx2 : CpuIsa::native;
  const int64_t kind = avx2 ? (state.range(3) - 3) * 2 : state.range(3);
  constexpr int kWeights = 24;
  std::vector<std::unique_ptr<OneKernel>> ks;
  for (int i = 0; i < kWeights; ++i) {
    Tensor x = filled({M, K}, 1, -1, 1), w = filled({N, K}, 2 + i, -1, 1);
    if (kind == 2 || kind == 5 || kind == 6) {  // linear_wq over the weight as the engine stores it
      const bool int4 = kind == 6;
      Tensor q(int4 ? DType::u8 : DType::i8, {N, int4 ? K / 2 : K});
      Tensor s = int4 ? Tensor(DType::bf16, {N, K / kInt4Group}) : Tensor(DType::f32, {N});
      for (int64_t n = 0; n < N; ++n) {
        const float* row = w.ptr<float>() + n * K;
        if (int4) quantize_row_int4(row, K, q.ptr<uint8_t>() + n * (K / 2), s.ptr<uint16_t>() + n * (K / kInt4Group));
        else s.ptr<float>()[n] = quantize_row_int8(row, K, q.ptr<int8_t>() + n * K);
      }
      ks.push_back(std::make_unique<OneKernel>(
          "linear_wq", std::vector<Tensor>{x, q, s},
          Attrs{{"has_weight_scale", Attr(true)}, {"quantize_x", Attr(kind != 2)}}, std::vector<bool>{false, true, true},
          nullptr, isa));
    } else {
      ks.push_back(std::make_unique<OneKernel>("linear", std::vector<Tensor>{x, w}, Attrs{}, std::vector<bool>{false, true},
                                               kind == 1 ? onednn::create_onednn_linear : nullptr, isa,
                                               /*prepack=*/kind == 1));
    }
  }
  state.SetLabel(ks[0]->kernel->name());
  for (auto _ : state)
    for (auto& k : ks) k->run();
  state.counters["GFLOPs"] = benchmark::Counter(2.0 * M * N * K * kWeights * static_cast<double>(state.iterations()) / 1e9,
                                                benchmark::Counter::kIsRate);
}
BENCHMARK(BM_PrefillLinear)
    ->ArgNames({"M", "N", "K", "kind"})
    ->ArgsProduct({{6, 8, 11, 16, 32, 128}, {2816}, {1024}, {0, 1, 2, 3, 4}})
    ->ArgsProduct({{32}, {1024}, {2816}, {0, 1, 2, 3, 4}})
    ->ArgsProduct({{32}, {2048}, {2048}, {0, 1, 2, 3, 4}})
    ->ArgsProduct({{32}, {5632}, {2048}, {0, 1, 2, 5, 6}})
    ->ArgsProduct({{1, 32}, {2816}, {1024}, {5, 6}})
    ->ArgsProduct({{32}, {2048}, {5632}, {0, 1, 2}})
    ->ArgsProduct({{32}, {256}, {2048}, {0, 1, 2}})
    ->ArgsProduct({{128, 512}, {768, 3072}, {768}, {0, 1}})
    ->ArgsProduct({{128, 512}, {768}, {3072}, {0, 1}})
    ->UseRealTime();

// conv2d (prepacked weights, bias + relu epilogue) at ResNet-50 layer shapes, batch 1, in plain
// NCHW (block 0: oneDNN's gemm convolution) and in the channel-blocked layout the
// block_conv_layout pass picks (block 16 with AVX-512, 8 with AVX2); GFLOP/s = 2 N O OH OW C k^2 / t.
// Args: C, H (= W), O, k, stride, blocked.
void BM_Conv(benchmark::State& state) {
  const int64_t C = state.range(0), H = state.range(1), O = state.range(2), kk = state.range(3), st = state.range(4);
  const int64_t block = state.range(5) ? preferred_channel_block() : 0;
  const int64_t pad = kk / 2, OH = (H + 2 * pad - kk) / st + 1;
  Attrs a = {{"stride", std::vector<int64_t>{st, st}}, {"padding", std::vector<int64_t>{pad, pad}},
             {"has_bias", true}, {"activation", std::string("relu")},
             {"src_block", block}, {"dst_block", block}};
  OneKernel k("conv2d", {filled({1, C, H, H}, 1, -1, 1), filled({O, C, kk, kk}, 2, -1, 1), filled({O}, 3, -1, 1)},
              std::move(a), {false, true, true});
  state.SetLabel(k.kernel->name());
  for (auto _ : state) k.run();
  state.counters["GFLOPs"] = benchmark::Counter(
      2.0 * O * OH * OH * C * kk * kk * static_cast<double>(state.iterations()) / 1e9, benchmark::Counter::kIsRate);
}
BENCHMARK(BM_Conv)
    ->ArgNames({"C", "H", "O", "k", "s", "blocked"})
    ->Args({64, 56, 64, 3, 1, 0})->Args({64, 56, 64, 3, 1, 1})
    ->Args({256, 56, 64, 1, 1, 0})->Args({256, 56, 64, 1, 1, 1})
    ->Args({256, 14, 256, 3, 1, 0})->Args({256, 14, 256, 3, 1, 1})
    ->Args({1024, 14, 256, 1, 1, 0})->Args({1024, 14, 256, 1, 1, 1})
    ->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
