// Plan::build for a new shape signature, on a graph shaped like BERT-base's engine graph: an
// embedding-sum and 12 post-norm encoder layers (q/k/v linears, head reshapes and permutes,
// masked sdpa, output projection + residual + layer norm, gelu MLP + residual + layer norm)
// over a dynamic batch s0 and sequence s1; ~290 nodes after the pass pipeline, as BERT's.
// The hidden size is small (64): a plan build's work does not depend on the weights' sizes
// once the compile's kernels exist (they are shape-generic), only on the graph.
//
//   cmake -S . -B build/bench -DUPDRAFT_BUILD_BENCHMARKS=ON && cmake --build build/bench -t plan_build
//   build/bench/plan_build                       # Google Benchmark flags work too
//   valgrind --tool=callgrind --cache-sim=yes --toggle-collect='updraft::Executable::prepare*' \
//       build/bench/plan_build --benchmark_filter=Fixed     # instructions and simulated misses
//
// Each iteration builds the plan of a sequence length not seen for a while (the compiled
// graph's plan cache holds 16; lengths cycle through 40), as a service meeting a new length
// does. BM_PlanBuildCold first writes 64 MB (outside the timing), as the forward pass before a
// new length does to the caches; BM_PlanBuildWarm does not.
#include <benchmark/benchmark.h>

#include <memory>
#include <string>
#include <vector>

#include "ir/text.h"
#include "runtime/executable.h"

using namespace updraft;

namespace {

constexpr int kLayers = 12;

std::string layer(int i, const std::string& in) {
  const std::string p = "%l" + std::to_string(i) + "_";
  auto w = [&](const std::string& name, const std::string& shape, int seed) {
    return "  " + p + name + " = constant f32" + shape + " random(seed=" + std::to_string(seed) +
           ", lo=-0.2, hi=0.2)\n";
  };
  const int s = 100 * (i + 1);
  std::string t = w("wq", "[64, 64]", s) + w("wk", "[64, 64]", s + 1) + w("wv", "[64, 64]", s + 2) +
                  w("wo", "[64, 64]", s + 3) + w("w1", "[256, 64]", s + 4) + w("w2", "[64, 256]", s + 5) +
                  w("bq", "[64]", s + 6) + w("bk", "[64]", s + 7) + w("bv", "[64]", s + 8) + w("bo", "[64]", s + 9) +
                  w("b1", "[256]", s + 10) + w("b2", "[64]", s + 11) + w("g1", "[64]", s + 12) +
                  w("n1", "[64]", s + 13) + w("g2", "[64]", s + 14) + w("n2", "[64]", s + 15);
  for (const char* h : {"q", "k", "v"}) {
    const std::string x = p + h;
    t += "  " + x + " = linear(" + in + ", " + p + "w" + h + ")\n";
    t += "  " + x + "b = add(" + x + ", " + p + "b" + h + ")\n";
    t += "  " + x + "4 = reshape(" + x + "b) {shape=[s0, s1, 4, 16]}\n";
    t += "  " + x + "h = permute(" + x + "4) {dims=[0, 2, 1, 3]}\n";
  }
  t += "  " + p + "a = sdpa(" + p + "qh, " + p + "kh, " + p + "vh, %mask) {has_mask=true}\n";
  t += "  " + p + "ap = permute(" + p + "a) {dims=[0, 2, 1, 3]}\n";
  t += "  " + p + "ar = reshape(" + p + "ap) {shape=[s0, s1, 64]}\n";
  t += "  " + p + "o = linear(" + p + "ar, " + p + "wo)\n";
  t += "  " + p + "ob = add(" + p + "o, " + p + "bo)\n";
  t += "  " + p + "r1 = add(" + p + "ob, " + in + ")\n";
  t += "  " + p + "y1 = layer_norm(" + p + "r1, " + p + "g1, " + p + "n1) {normalized_ndim=1}\n";
  t += "  " + p + "f1 = linear(" + p + "y1, " + p + "w1)\n";
  t += "  " + p + "f1b = add(" + p + "f1, " + p + "b1)\n";
  t += "  " + p + "f1g = gelu(" + p + "f1b)\n";
  t += "  " + p + "f2 = linear(" + p + "f1g, " + p + "w2)\n";
  t += "  " + p + "f2b = add(" + p + "f2, " + p + "b2)\n";
  t += "  " + p + "r2 = add(" + p + "f2b, " + p + "y1)\n";
  t += "  " + p + "y = layer_norm(" + p + "r2, " + p + "g2, " + p + "n2) {normalized_ndim=1}\n";
  return t;
}

std::shared_ptr<Executable> bert_like() {
  std::string t = "graph(%x: f32[s0, s1, 64], %m: f32[s0, s1]) {\n";
  t += "  %pos = constant f32[64] random(seed=1)\n";
  t += "  %h = add(%x, %pos)\n";
  // The additive mask, [s0, 1, 1, s1], from the 0/1 attention mask as BERT's front end makes it.
  t += "  %one = constant f32[] full(1.0)\n  %big = constant f32[] full(-10000.0)\n";
  t += "  %inv = sub(%one, %m)\n  %neg = mul(%inv, %big)\n";
  t += "  %mask = reshape(%neg) {shape=[s0, 1, 1, s1]}\n";
  std::string in = "%h";
  for (int i = 0; i < kLayers; ++i) {
    t += layer(i, in);
    in = "%l" + std::to_string(i) + "_y";
  }
  t += "  return (" + in + ")\n}\n";
  CompileOptions o;
  o.num_threads = 1;
  return Executable::compile(parse_graph(t), o);
}

void run(benchmark::State& state, bool flush) {
  auto cg = bert_like();
  std::vector<float> junk(size_t{16} << 20);  // 64 MB
  int64_t seq = 8;
  for (auto _ : state) {
    if (flush) {
      state.PauseTiming();
      for (float& f : junk) f += 1.0f;
      benchmark::DoNotOptimize(junk.data());
      state.ResumeTiming();
    }
    seq = seq >= 400 ? 8 : seq + 10;  // 40 lengths, more than the 16 plans the cache keeps
    benchmark::DoNotOptimize(cg->prepare({{2, seq, 64}, {2, seq}}));
  }
  state.counters["nodes"] = static_cast<double>(cg->graph().num_nodes());
}

void BM_PlanBuildCold(benchmark::State& state) { run(state, true); }
void BM_PlanBuildWarm(benchmark::State& state) { run(state, false); }

}  // namespace

BENCHMARK(BM_PlanBuildCold)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_PlanBuildWarm)->Unit(benchmark::kMicrosecond);
// A fixed count for callgrind: 40 builds after the first 40 (which create the kernels).
BENCHMARK(BM_PlanBuildCold)->Name("BM_PlanBuildColdFixed")->Iterations(80)->Unit(benchmark::kMicrosecond);

BENCHMARK_MAIN();
