// Kernel reuse across shape signatures (runtime/cross_shape_cache.h): a transformer layer with a
// dynamic batch s0 and sequence s1 compiled once and run at many shapes (sizes 0 and 1
// included), every output checked against the reference interpreter; shape-generic kernels
// (runtime-M linear, sdpa, the CPU elementwise/norm kernels) are built once and shared by every
// plan, shape-specific ones are reused only for the shapes they were built for, and plans
// built and run from many threads at once agree with the reference.
//
// Tolerance rtol = atol = 1e-4 (f32): oneDNN's gemm and the fused softmax/layer norm sum in
// another order than the reference kernels (which accumulate in double); over two gemms, an
// attention and two layer norms the difference stays near 1e-6 relative. A wrongly sized
// kernel (reading a stale M, S or L) gives O(1) errors or garbage.
#include <gtest/gtest.h>

#include <set>
#include <thread>

#include "core/error.h"
#include "ir/text.h"
#include "runtime/executable.h"
#include "runtime/interpreter.h"
#include "runtime/plan.h"
#include "runtime/cross_shape_cache.h"
#include "test_util.h"

using namespace updraft;
using updraft::testing::all_close;
using updraft::testing::random_tensor;

namespace {

constexpr double kTol = 1e-4;

// Post-norm attention block: %h (not a graph input, so its linears get runtime M) feeds
// q/k/v, attention with an additive mask, an output projection with the residual, layer norm,
// a gelu MLP with its residual, a second layer norm and a matmul by a constant [K, N] matrix
// with a bias (GPT-2's Conv1D). %side is a linear straight on the graph input, which keeps the
// shape-specific static primitive.
const char* kLayer = R"(graph(%x: f32[s0, s1, 32], %m: f32[s0, 1, 1, s1]) {
  %pos = constant f32[32] random(seed=1)
  %wq = constant f32[32, 32] random(seed=2, lo=-0.3, hi=0.3)
  %wk = constant f32[32, 32] random(seed=3, lo=-0.3, hi=0.3)
  %wv = constant f32[32, 32] random(seed=4, lo=-0.3, hi=0.3)
  %wo = constant f32[32, 32] random(seed=5, lo=-0.3, hi=0.3)
  %bo = constant f32[32] random(seed=6)
  %w1 = constant f32[48, 32] random(seed=7, lo=-0.3, hi=0.3)
  %b1 = constant f32[48] random(seed=8)
  %w2 = constant f32[32, 48] random(seed=9, lo=-0.3, hi=0.3)
  %g1 = constant f32[32] random(seed=10)
  %g2 = constant f32[32] random(seed=11)
  %n1 = constant f32[32] random(seed=12)
  %n2 = constant f32[32] random(seed=13)
  %ws = constant f32[8, 32] random(seed=14, lo=-0.3, hi=0.3)
  %wm = constant f32[32, 16] random(seed=15, lo=-0.3, hi=0.3)
  %bm = constant f32[16] random(seed=16)
  %h = add(%x, %pos)
  %q = linear(%h, %wq)
  %k = linear(%h, %wk)
  %v = linear(%h, %wv)
  %q4 = reshape(%q) {shape=[s0, s1, 4, 8]}
  %k4 = reshape(%k) {shape=[s0, s1, 4, 8]}
  %v4 = reshape(%v) {shape=[s0, s1, 4, 8]}
  %qh = permute(%q4) {dims=[0, 2, 1, 3]}
  %kh = permute(%k4) {dims=[0, 2, 1, 3]}
  %vh = permute(%v4) {dims=[0, 2, 1, 3]}
  %a = sdpa(%qh, %kh, %vh, %m) {has_mask=true}
  %ap = permute(%a) {dims=[0, 2, 1, 3]}
  %ar = reshape(%ap) {shape=[s0, s1, 32]}
  %o = linear(%ar, %wo)
  %ob = add(%o, %bo)
  %r1 = add(%ob, %h)
  %y1 = layer_norm(%r1, %g1, %n1) {normalized_ndim=1}
  %f1 = linear(%y1, %w1)
  %f1b = add(%f1, %b1)
  %f1g = gelu(%f1b)
  %f2 = linear(%f1g, %w2)
  %r2 = add(%f2, %y1)
  %y2 = layer_norm(%r2, %g2, %n2) {normalized_ndim=1}
  %side = linear(%x, %ws)
  %mm = matmul(%y2, %wm)
  %mmb = add(%mm, %bm)
  return (%y2, %side, %mmb)
}
)";

struct Case {
  int64_t b, s;
};

std::vector<Tensor> inputs_for(Case c) {
  auto seed = static_cast<uint32_t>(c.b * 1000 + c.s);
  return {random_tensor(DType::f32, {c.b, c.s, 32}, seed), random_tensor(DType::f32, {c.b, 1, 1, c.s}, seed + 1)};
}

std::vector<std::vector<int64_t>> shapes_of(const std::vector<Tensor>& ts) {
  std::vector<std::vector<int64_t>> r;
  for (const Tensor& t : ts) r.push_back(t.shape());
  return r;
}

// Runs the compiled graph on `in` and checks both outputs against the reference interpreter.
void run_and_check(Executable& cg, const Graph& ref_graph, const std::vector<Tensor>& in, const std::string& what) {
  auto out_shapes = cg.prepare(shapes_of(in));
  std::vector<Tensor> outs;
  std::vector<TensorView> out_views;
  for (const auto& s : out_shapes) outs.emplace_back(DType::f32, s);
  for (Tensor& t : outs) out_views.push_back(t.view());
  cg.run({in[0].view(), in[1].view()}, out_views);
  std::vector<Tensor> want = interpret(ref_graph, in, Device::ref);
  ASSERT_EQ(want.size(), outs.size());
  for (size_t k = 0; k < outs.size(); ++k) EXPECT_TRUE(all_close(outs[k], want[k], kTol, kTol)) << what << " output " << k;
}

const Kernel* kernel_named(const Plan& p, const std::string& part, int nth = 0) {
  for (const Step& st : p.steps())
    if (st.kind == Step::Kind::Kernel && st.kernel->name().find(part) != std::string::npos && nth-- == 0)
      return st.kernel.get();
  return nullptr;
}

// The KernelContext a plan's step was built from (shapes from its slots; no bound attrs in
// this graph's kernel nodes).
KernelContext context_of(const Plan& p, const Step& st) {
  KernelContext ctx{*st.node, {}, {}, {}, 0, nullptr};
  for (int s : st.in_slots) ctx.in_shapes.push_back(p.slots()[s].shape);
  for (int s : st.out_slots) ctx.out_shapes.push_back(p.slots()[s].shape);
  for (const Value* v : st.node->inputs) ctx.const_inputs.push_back(v->is_constant() ? &*v->constant : nullptr);
  return ctx;
}

}  // namespace

TEST(KernelReuse, TransformerLayerAtManyShapesMatchesReference) {
  auto cg = Executable::compile(parse_graph(kLayer), CompileOptions{});
  auto ref = parse_graph(kLayer);
  const std::vector<Case> cases = {{2, 5}, {1, 1}, {3, 17}, {2, 64}, {1, 33}, {0, 7}, {2, 5}, {4, 2}, {1, 128}};
  for (Case c : cases) run_and_check(*cg, *ref, inputs_for(c), "s0=" + std::to_string(c.b) + " s1=" + std::to_string(c.s));
  EXPECT_EQ(cg->plan_stats().built, cases.size() - 1);  // (2, 5) repeats
}

TEST(KernelReuse, GenericKernelsAreBuiltOncePerCompile) {
  auto cg = Executable::compile(parse_graph(kLayer), CompileOptions{});
  auto first = cg->plan({{2, 5, 32}, {2, 1, 1, 5}});
  ASSERT_NE(kernel_named(*first, ":runtime_m"), nullptr) << first->str();
  ASSERT_NE(kernel_named(*first, "onednn_f32_matmul:"), nullptr) << first->str();
  EXPECT_NE(kernel_named(*first, "onednn_f32_matmul:")->name().find(":runtime_m"), std::string::npos);
  const size_t created_first = cg->plan_stats().kernels_created;
  // The one shape-specific kernel: the static linear on the graph input.
  size_t specific = 0;
  for (const Step& st : first->steps())
    if (st.kind == Step::Kind::Kernel && st.node->op_name() == "linear" && st.kernel->name().find(":runtime_m") == std::string::npos)
      ++specific;
  EXPECT_EQ(specific, 1u) << first->str();

  const std::vector<Case> more = {{3, 17}, {1, 1}, {2, 64}, {5, 9}};
  for (Case c : more) {
    auto p = cg->plan({{c.b, c.s, 32}, {c.b, 1, 1, c.s}});
    ASSERT_EQ(p->steps().size(), first->steps().size());
    for (size_t i = 0; i < p->steps().size(); ++i) {
      const Step &a = first->steps()[i], &b = p->steps()[i];
      if (a.kind != Step::Kind::Kernel) continue;
      if (a.kernel->runs_shapes_of(context_of(*p, b)))
        EXPECT_EQ(a.kernel.get(), b.kernel.get()) << a.node->op_name() << " was rebuilt";
      else
        EXPECT_NE(a.kernel.get(), b.kernel.get()) << a.node->op_name() << " reused at other shapes";
    }
    EXPECT_EQ(kernel_named(*p, ":runtime_m", 0), kernel_named(*first, ":runtime_m", 0));
    EXPECT_EQ(kernel_named(*p, "sdpa"), kernel_named(*first, "sdpa"));
    EXPECT_EQ(kernel_named(*p, "onednn_f32_matmul:"), kernel_named(*first, "onednn_f32_matmul:"));
  }
  // Only the static linear is created again, once per new shape.
  EXPECT_EQ(cg->plan_stats().kernels_created, created_first + more.size() * specific);
  EXPECT_GT(cg->plan_stats().kernels_reused, 0u);
}

TEST(KernelReuse, ShapeSpecificKernelsAreReusedForTheirOwnShapes) {
  // A fully static-weight conv-free graph whose linear reads the graph input: static oneDNN
  // primitives. With a plan LRU of one, shapes alternate and every plan is rebuilt, but the
  // kernels built for a shape are found again in the KernelCache.
  CompileOptions opts;
  opts.plan_cache_size = 1;
  auto cg = Executable::compile(parse_graph(kLayer), opts);
  auto ref = parse_graph(kLayer);
  run_and_check(*cg, *ref, inputs_for({2, 5}), "first");
  size_t after_first = cg->plan_stats().kernels_created;
  run_and_check(*cg, *ref, inputs_for({3, 7}), "second");
  size_t after_second = cg->plan_stats().kernels_created;
  EXPECT_GT(after_second, after_first);  // the static linear for [3, 7, 32]
  run_and_check(*cg, *ref, inputs_for({2, 5}), "first again");
  run_and_check(*cg, *ref, inputs_for({3, 7}), "second again");
  EXPECT_EQ(cg->plan_stats().built, 4u);                          // evicted and rebuilt
  EXPECT_EQ(cg->plan_stats().kernels_created, after_second);      // but no kernel made again
}

TEST(KernelReuse, PlanBuildWithoutCacheStillWorks) {
  auto g = parse_graph(kLayer);
  CompileOptions opts;
  auto p = Plan::build(*g, {{2, 3, 32}, {2, 1, 1, 3}}, opts);
  EXPECT_EQ(p->output_shapes(), (std::vector<std::vector<int64_t>>{{2, 3, 32}, {2, 3, 8}, {2, 3, 16}}));
  CrossShapeCache cache(*g, 4);
  auto a = Plan::build(*g, {{2, 3, 32}, {2, 1, 1, 3}}, opts, &cache);
  auto b = Plan::build(*g, {{1, 9, 32}, {1, 1, 1, 9}}, opts, &cache);
  EXPECT_EQ(kernel_named(*a, "sdpa"), kernel_named(*b, "sdpa"));
  EXPECT_NE(kernel_named(*p, "sdpa"), kernel_named(*a, "sdpa"));  // no cache: its own kernels
}

TEST(KernelReuse, ConcurrentCallsAtManyShapesShareKernels) {
  auto cg = Executable::compile(parse_graph(kLayer), CompileOptions{.num_threads = 1});
  auto ref = parse_graph(kLayer);
  const std::vector<Case> cases = {{2, 5}, {1, 1}, {3, 17}, {2, 30}, {1, 33}, {4, 2}, {2, 12}, {3, 3}};
  std::vector<std::vector<Tensor>> ins;
  std::vector<std::vector<Tensor>> want;
  for (Case c : cases) {
    ins.push_back(inputs_for(c));
    want.push_back(interpret(*ref, ins.back(), Device::ref));
  }
  constexpr int kThreads = 4, kRounds = 6;
  std::vector<int> bad(kThreads, 0), errors(kThreads, 0);
  std::vector<std::thread> pool;
  for (int t = 0; t < kThreads; ++t) {
    pool.emplace_back([&, t] {
      for (int r = 0; r < kRounds; ++r) {
        for (size_t i = 0; i < cases.size(); ++i) {
          size_t c = (i + static_cast<size_t>(t) * 3 + static_cast<size_t>(r)) % cases.size();
          try {
            std::vector<Tensor> outs;
            std::vector<TensorView> views;
            for (const auto& s : cg->prepare(shapes_of(ins[c]))) outs.emplace_back(DType::f32, s);
            for (Tensor& o : outs) views.push_back(o.view());
            cg->run({ins[c][0].view(), ins[c][1].view()}, views);
            for (size_t k = 0; k < outs.size(); ++k)
              if (!all_close(outs[k], want[c][k], kTol, kTol)) ++bad[t];
          } catch (const Error&) {
            ++errors[t];
          }
        }
      }
    });
  }
  for (auto& th : pool) th.join();
  for (int t = 0; t < kThreads; ++t) {
    EXPECT_EQ(bad[t], 0) << "thread " << t;
    EXPECT_EQ(errors[t], 0) << "thread " << t;
  }
  EXPECT_EQ(cg->plan_stats().built, cases.size());
}

TEST(KernelReuse, TwinNodesShareShapeWorkAndAgreeWithTheirOwnInference) {
  // CrossShapeCache::twin: a node with the op, attributes and input types of an earlier node takes
  // that node's concrete output shapes (and bound attributes) in every plan.
  auto g = parse_graph(kLayer);
  CrossShapeCache cache(*g, 4);
  const Liveness& lv = cache.liveness;
  auto index_of = [&](const std::string& out_name) {
    for (int i = 0; i < lv.at_end; ++i)
      if (lv.order[i]->output()->name == out_name) return i;
    ADD_FAILURE() << "no node makes %" << out_name;
    return -1;
  };
  auto twin_of = [&](const std::string& name) { return cache.twin[static_cast<size_t>(index_of(name))]; };
  EXPECT_EQ(twin_of("q"), index_of("q"));
  EXPECT_EQ(twin_of("k"), index_of("q"));    // linear of %h by another [32, 32] weight
  EXPECT_EQ(twin_of("v4"), index_of("q4"));  // reshape to [s0, s1, 4, 8]: symbolic attributes
  EXPECT_TRUE(cache.symbolic_attrs[static_cast<size_t>(index_of("q4"))]);
  EXPECT_EQ(twin_of("y2"), index_of("y1"));  // layer norm over the same types
  EXPECT_EQ(twin_of("side"), index_of("side"));  // [8, 32] weight: another type
  EXPECT_EQ(twin_of("ar"), index_of("ar"));  // reshape to [s0, s1, 32]: other attributes
  // Every value's plan shape is what the graph's symbolic type gives for the binding.
  for (Case c : std::vector<Case>{{2, 5}, {1, 1}, {0, 7}, {3, 17}}) {
    auto p = Plan::build(*g, shapes_of(inputs_for(c)), CompileOptions{}, &cache);
    for (const Step& st : p->steps()) {
      if (st.kind != Step::Kind::Kernel) continue;
      for (size_t k = 0; k < st.out_slots.size(); ++k)
        EXPECT_EQ(p->slots()[st.out_slots[k]].shape,
                  shape_eval(st.node->outputs[k]->type.shape, {{"s0", c.b}, {"s1", c.s}}))
            << st.node->op_name() << " %" << st.node->outputs[k]->name;
    }
  }
}
