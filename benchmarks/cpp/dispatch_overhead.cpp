// Per-step dispatch overhead of the runtime: Executable::run on a chain of N trivial ops
// (relu on a 1-element tensor), compiled with fusion off so each op stays its own step.
//
//   cmake -S . -B build/bench -DUPDRAFT_BUILD_BENCHMARKS=ON && cmake --build build/bench -t dispatch_overhead
//   build/bench/dispatch_overhead                       # Google Benchmark flags work too
//
// `ns_per_step` is the call time divided by N; the fixed per-call cost (validation, plan
// lookup, arena acquire/release, slot resolution) is the N=1 row, and the marginal cost of one
// more step is the slope between rows: (t(N=1024) - t(N=1)) / 1023, printed as
// BM_DispatchSlope's ns_per_step. BM_DispatchLinear is the same for a chain of tiny oneDNN
// steps (linear 8 -> 8 with a constant weight and bias, relu fused): the per-call cost of
// executing a oneDNN primitive (argument handles, stream) rather than of the runtime loop.
#include <benchmark/benchmark.h>

#include <chrono>
#include <memory>
#include <vector>

#include "ir/graph.h"
#include "runtime/executable.h"

using namespace updraft;

namespace {

std::shared_ptr<Executable> relu_chain(int n, int64_t numel) {
  auto g = std::make_unique<Graph>();
  Value* v = g->add_input("x", {DType::f32, {Dim(numel)}});
  for (int i = 0; i < n; ++i) v = g->add_node("relu", {v})->output();
  g->set_outputs({v});
  CompileOptions o;
  o.fuse = false;         // keep N separate kernel steps
  o.fold_constants = false;
  o.num_threads = 1;      // a 1-element op never forks; no thread-pool noise
  return Executable::compile(std::move(g), o);
}

constexpr int64_t kWidth = 8;  // linear chain: [1, 8] x [8, 8]^T per step

std::shared_ptr<Executable> linear_chain(int n) {
  auto g = std::make_unique<Graph>();
  Value* v = g->add_input("x", {DType::f32, {Dim(1), Dim(kWidth)}});
  for (int i = 0; i < n; ++i) {
    Tensor w(DType::f32, {kWidth, kWidth}), b(DType::f32, {kWidth});
    for (int64_t j = 0; j < kWidth * kWidth; ++j) w.ptr<float>()[j] = (j % 3 == 0 ? 0.25f : -0.125f);
    for (int64_t j = 0; j < kWidth; ++j) b.ptr<float>()[j] = 0.5f;
    Value* wv = g->add_constant("w" + std::to_string(i), std::move(w));
    Value* bv = g->add_constant("b" + std::to_string(i), std::move(b));
    v = g->add_node("linear", {v, wv, bv}, {{"has_bias", true}, {"activation", "relu"}})->output();
  }
  g->set_outputs({v});
  CompileOptions o;
  o.fuse = false;
  o.fold_constants = false;
  o.num_threads = 1;
  return Executable::compile(std::move(g), o);
}

struct Call {
  std::shared_ptr<Executable> cg;
  std::vector<float> in, out;
  std::vector<TensorView> ins, outs;
  // relu chain on 1 element, or (linear) a linear chain on [1, kWidth].
  explicit Call(int n, bool linear = false)
      : cg(linear ? linear_chain(n) : relu_chain(n, 1)), in(linear ? kWidth : 1, -1.f), out(in.size(), 0.f) {
    TensorView x;
    x.data = in.data();
    x.dtype = DType::f32;
    x.ndim = linear ? 2 : 1;
    x.sizes[0] = linear ? 1 : 1;
    x.strides[0] = static_cast<int64_t>(in.size());
    if (linear) x.sizes[1] = kWidth, x.strides[1] = 1;
    TensorView y = x;
    y.data = out.data();
    ins = {x};
    outs = {y};
    cg->run(ins, outs);  // builds the plan once
  }
};

void BM_DispatchRun(benchmark::State& state) {
  const int n = static_cast<int>(state.range(0));
  Call c(n);
  for (auto _ : state) {
    c.cg->run(c.ins, c.outs);
    benchmark::DoNotOptimize(c.out.data());
  }
  state.counters["ns_per_step"] =
      benchmark::Counter(static_cast<double>(state.iterations()) * n, benchmark::Counter::kIsRate |
                                                                          benchmark::Counter::kInvert);
  state.counters["steps"] = n;
}
BENCHMARK(BM_DispatchRun)->Arg(1)->Arg(16)->Arg(256)->Arg(1024);

// Marginal cost of one step: times a 1024-step and a 1-step graph back to back per iteration
// and attributes the difference to the 1023 extra steps.
void BM_DispatchSlope(benchmark::State& state) {
  Call big(1024), small(1);
  double extra_ns = 0;
  for (auto _ : state) {
    auto t0 = std::chrono::steady_clock::now();
    big.cg->run(big.ins, big.outs);
    auto t1 = std::chrono::steady_clock::now();
    small.cg->run(small.ins, small.outs);
    auto t2 = std::chrono::steady_clock::now();
    extra_ns += std::chrono::duration<double, std::nano>((t1 - t0) - (t2 - t1)).count();
  }
  state.counters["ns_per_step"] = extra_ns / (static_cast<double>(state.iterations()) * 1023);
}
BENCHMARK(BM_DispatchSlope);

void BM_DispatchLinear(benchmark::State& state) {
  const int n = static_cast<int>(state.range(0));
  Call c(n, /*linear=*/true);
  for (auto _ : state) {
    c.cg->run(c.ins, c.outs);
    benchmark::DoNotOptimize(c.out.data());
  }
  state.counters["ns_per_step"] =
      benchmark::Counter(static_cast<double>(state.iterations()) * n, benchmark::Counter::kIsRate |
                                                                          benchmark::Counter::kInvert);
}
BENCHMARK(BM_DispatchLinear)->Arg(1)->Arg(64);

}  // namespace

BENCHMARK_MAIN();
