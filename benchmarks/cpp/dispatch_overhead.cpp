// Per-step dispatch overhead of the runtime: CompiledGraph::run on a chain of N trivial ops
// (relu on a 1-element tensor), compiled with fusion off so each op stays its own step.
//
//   cmake -S . -B build/bench -DUPDRAFT_BUILD_BENCHMARKS=ON && cmake --build build/bench -t dispatch_overhead
//   build/bench/dispatch_overhead                       # Google Benchmark flags work too
//
// `ns_per_step` is the call time divided by N; the fixed per-call cost (validation, plan
// lookup, arena acquire/release, slot resolution) is the N=1 row, and the marginal cost of one
// more step is the slope between rows: (t(N=1024) - t(N=1)) / 1023, printed as
// BM_DispatchSlope's ns_per_step.
#include <benchmark/benchmark.h>

#include <chrono>
#include <memory>
#include <vector>

#include "ir/graph.h"
#include "runtime/compiled_graph.h"

using namespace updraft;

namespace {

std::shared_ptr<CompiledGraph> relu_chain(int n, int64_t numel) {
  auto g = std::make_unique<Graph>();
  Value* v = g->add_input("x", {DType::f32, {Dim(numel)}});
  for (int i = 0; i < n; ++i) v = g->add_node("relu", {v})->output();
  g->set_outputs({v});
  CompileOptions o;
  o.fuse = false;         // keep N separate kernel steps
  o.fold_constants = false;
  o.num_threads = 1;      // a 1-element op never forks; no thread-pool noise
  return CompiledGraph::compile(std::move(g), o);
}

struct Call {
  std::shared_ptr<CompiledGraph> cg;
  float in = -1.f, out = 0.f;
  std::vector<TensorView> ins, outs;
  explicit Call(int n) : cg(relu_chain(n, 1)) {
    TensorView x;
    x.data = &in;
    x.dtype = DType::f32;
    x.ndim = 1;
    x.sizes[0] = 1;
    x.strides[0] = 1;
    TensorView y = x;
    y.data = &out;
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
    benchmark::DoNotOptimize(c.out);
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

}  // namespace

BENCHMARK_MAIN();
