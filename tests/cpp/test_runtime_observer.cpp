// The step observer (StepObserver, runtime/plan.h) and the watchdog (runtime/watchdog.h):
// an observer sees every step of one call, in order, with the views the kernel gets, and
// changes nothing of the result; a watched call past its limit is reported on stderr and
// stopped with WatchdogTimeout; a watched call within its limit returns what it returns
// unwatched.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"
#include "ir/graph.h"
#include "runtime/executable.h"
#include "runtime/plan.h"
#include "runtime/watchdog.h"
#include "test_util.h"

using namespace updraft;
using updraft::testing::all_close;
using updraft::testing::random_tensor;

namespace {

// x[4, 8] -> add(x, y) -> relu -> linear(w) -> the output; plus y returned as a second output
// (an output copy step).
std::shared_ptr<Executable> small_graph(double watchdog_s = 0) {
  auto g = std::make_unique<Graph>();
  Value* x = g->add_input("x", {DType::f32, {4, 8}});
  Value* y = g->add_input("y", {DType::f32, {4, 8}});
  Value* w = g->add_constant("w", random_tensor(DType::f32, {6, 8}, 7));
  Value* r = g->add_node("relu", {g->add_node("add", {x, y})->output()})->output();
  g->set_outputs({g->add_node("linear", {r, w})->output(), y});
  CompileOptions o;
  o.fuse = false;  // keep add, relu and linear as three steps
  o.watchdog_s = watchdog_s;
  return Executable::compile(std::move(g), o);
}

// A chain of `n` linear layers of [d, d]: n steps of equal, substantial time.
std::shared_ptr<Executable> matmul_chain(int n, int64_t d, double watchdog_s) {
  auto g = std::make_unique<Graph>();
  Value* v = g->add_input("x", {DType::f32, {d, d}});
  const double scale = 1.0 / std::sqrt(static_cast<double>(d));  // keeps values O(1) down the chain
  for (int i = 0; i < n; ++i)
    v = g->add_node("linear", {v, g->add_constant("w" + std::to_string(i),
                                                  random_tensor(DType::f32, {d, d}, 100 + i, -scale, scale))})
            ->output();
  g->set_outputs({v});
  CompileOptions o;
  o.watchdog_s = watchdog_s;
  auto cg = Executable::compile(std::move(g), o);
  cg->set_label("matmul_chain");
  return cg;
}

struct Seen {
  size_t index;
  std::string op, kernel;
  bool before;
  int64_t start_ns, end_ns;
  std::vector<std::vector<int64_t>> out_shapes;
  float first_out = 0;  // out[0]'s first element (after(): what the step wrote)
};

struct Recorder : StepObserver {
  std::vector<Seen> seen;
  int throw_before = -1;
  void note(const StepEvent& ev, bool before) {
    Seen s{ev.index, ev.op(), ev.kernel(), before, ev.start_ns, ev.end_ns, {}, 0};
    for (size_t k = 0; k < ev.num_out; ++k) s.out_shapes.push_back(ev.out[k].shape());
    if (ev.num_out && ev.out[0].dtype == DType::f32) s.first_out = *ev.out[0].ptr<float>();
    seen.push_back(std::move(s));
  }
  void before(const Plan&, const StepEvent& ev) override {
    if (static_cast<int>(ev.index) == throw_before) throw Error("test", "stop here");
    note(ev, true);
  }
  void after(const Plan&, const StepEvent& ev) override { note(ev, false); }
};

}  // namespace

TEST(StepObserver, SeesEveryStepInOrderWithTheKernelsViews) {
  auto cg = small_graph();
  Tensor x = random_tensor(DType::f32, {4, 8}, 1), y = random_tensor(DType::f32, {4, 8}, 2);
  Tensor a(DType::f32, {4, 6}), ay(DType::f32, {4, 8}), b(DType::f32, {4, 6}), by(DType::f32, {4, 8});
  cg->run({x.view(), y.view()}, {a.view(), ay.view()});  // unobserved
  Recorder rec;
  cg->run({x.view(), y.view()}, {b.view(), by.view()}, &rec);
  EXPECT_TRUE(all_close(a, b, 0, 0));  // the observer changes nothing
  EXPECT_TRUE(all_close(ay, by, 0, 0));

  auto plan = cg->plan({{4, 8}, {4, 8}});
  const auto& steps = plan->steps();
  ASSERT_EQ(rec.seen.size(), 2 * steps.size());
  std::vector<std::string> ops;
  int64_t last_end = 0;
  for (size_t i = 0; i < steps.size(); ++i) {
    const Seen& bf = rec.seen[2 * i];
    const Seen& af = rec.seen[2 * i + 1];
    EXPECT_TRUE(bf.before);
    EXPECT_FALSE(af.before);
    EXPECT_EQ(bf.index, i);
    EXPECT_EQ(af.index, i);
    EXPECT_EQ(af.op, bf.op);
    EXPECT_EQ(af.kernel, bf.kernel);
    EXPECT_LE(af.start_ns, af.end_ns);
    EXPECT_GE(af.start_ns, last_end);  // steps do not overlap, in schedule order
    last_end = af.end_ns;
    ops.push_back(af.op);
  }
  EXPECT_EQ(ops, (std::vector<std::string>{"add", "relu", "linear", "copy-out"}));
  EXPECT_EQ(rec.seen[5].out_shapes, (std::vector<std::vector<int64_t>>{{4, 6}}));  // linear, after
  EXPECT_EQ(rec.seen[5].first_out, b.ptr<float>()[0]);  // the view is the output buffer
  EXPECT_EQ(rec.seen[7].kernel, "strided_copy");
  EXPECT_EQ(rec.seen[7].first_out, y.ptr<float>()[0]);
}

TEST(StepObserver, AThrowingHookStopsTheCallAndTheNextCallRuns) {
  auto cg = small_graph();
  Tensor x = random_tensor(DType::f32, {4, 8}, 1), y = random_tensor(DType::f32, {4, 8}, 2);
  Tensor a(DType::f32, {4, 6}), ay(DType::f32, {4, 8}), b(DType::f32, {4, 6}), by(DType::f32, {4, 8});
  Recorder rec;
  rec.throw_before = 2;
  EXPECT_THROW(cg->run({x.view(), y.view()}, {b.view(), by.view()}, &rec), Error);
  ASSERT_EQ(rec.seen.size(), 4u);  // steps 0 and 1, before and after; step 2 never ran
  cg->run({x.view(), y.view()}, {a.view(), ay.view()});
  Recorder again;
  cg->run({x.view(), y.view()}, {b.view(), by.view()}, &again);
  EXPECT_TRUE(all_close(a, b, 0, 0));
}

TEST(StepObserver, ObservedCallsCountInStepProfiling) {
  auto cg = small_graph();
  Tensor x = random_tensor(DType::f32, {4, 8}, 1), y = random_tensor(DType::f32, {4, 8}, 2);
  Tensor a(DType::f32, {4, 6}), ay(DType::f32, {4, 8});
  cg->set_profiling(true);
  Recorder rec;
  cg->run({x.view(), y.view()}, {a.view(), ay.view()}, &rec);
  cg->run({x.view(), y.view()}, {a.view(), ay.view()});
  auto times = cg->step_times();
  ASSERT_EQ(times.size(), 1u);
  for (const StepTime& t : times[0].second) EXPECT_EQ(t.calls, 2) << t.op;
}

TEST(Watchdog, AWatchedCallWithinItsLimitReturnsTheSameResult) {
  auto plain = small_graph(), watched = small_graph(/*watchdog_s=*/30);
  Tensor x = random_tensor(DType::f32, {4, 8}, 1), y = random_tensor(DType::f32, {4, 8}, 2);
  Tensor a(DType::f32, {4, 6}), ay(DType::f32, {4, 8}), b(DType::f32, {4, 6}), by(DType::f32, {4, 8});
  plain->run({x.view(), y.view()}, {a.view(), ay.view()});
  ::testing::internal::CaptureStderr();
  Recorder rec;  // the watchdog passes every step on to the caller's observer
  for (int i = 0; i < 3; ++i) watched->run({x.view(), y.view()}, {b.view(), by.view()}, i == 0 ? &rec : nullptr);
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_TRUE(all_close(a, b, 0, 0));
  EXPECT_TRUE(all_close(ay, by, 0, 0));
  EXPECT_EQ(rec.seen.size(), 8u);
  EXPECT_EQ(err.find("watchdog"), std::string::npos) << err;
}

TEST(Watchdog, ALongCallIsReportedAndStoppedAtAStepBoundary) {
  // No fault switch: 30 real [384, 384] matmuls, with a limit set from how long the chain
  // takes here, unwatched (a tenth of it: ~3 steps in), so the test holds on a slow or loaded
  // machine as on a fast one.
  const int n = 30;
  const int64_t d = 384;
  Tensor x = random_tensor(DType::f32, {d, d}, 1), out(DType::f32, {d, d});
  auto unwatched = matmul_chain(n, d, 0);
  unwatched->run({x.view()}, {out.view()});  // builds the plan and the kernels' primitives
  auto t0 = std::chrono::steady_clock::now();
  unwatched->run({x.view()}, {out.view()});
  const double full_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const double limit = std::max(full_s / 10, 1e-3);

  auto watched = matmul_chain(n, d, limit);
  watched->prepare({{d, d}});
  ::testing::internal::CaptureStderr();
  std::string what;
  t0 = std::chrono::steady_clock::now();
  try {
    watched->run({x.view()}, {out.view()});
  } catch (const WatchdogTimeout& e) {
    what = e.what();
  }
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const std::string err = ::testing::internal::GetCapturedStderr();
  ASSERT_FALSE(what.empty()) << "no WatchdogTimeout; the chain took " << took << " s, limit " << limit
                             << " s (unwatched " << full_s << " s)";
  EXPECT_EQ(what.rfind("[runtime] watchdog: the engine call of graph 'matmul_chain' exceeded", 0), 0u) << what;
  EXPECT_NE(what.find("(linear, "), std::string::npos) << what;
  EXPECT_NE(what.find("raise CompilerConfig(watchdog_s)"), std::string::npos) << what;
  // The report: the late call, its thread and step (op, kernel, shapes), and its plan.
  EXPECT_NE(err.find("[updraft] watchdog: engine calls in flight (1):"), std::string::npos) << err;
  EXPECT_NE(err.find("graph 'matmul_chain' (late)"), std::string::npos) << err;
  EXPECT_NE(err.find(": linear ["), std::string::npos) << err;
  EXPECT_NE(err.find("(f32[384, 384], f32[384, 384]) -> (f32[384, 384])"), std::string::npos) << err;
  EXPECT_NE(err.find("plan for inputs [384, 384]"), std::string::npos) << err;

  // The executable stays usable: the next call within a generous limit completes.
  Tensor want(DType::f32, {d, d}), got(DType::f32, {d, d});
  unwatched->run({x.view()}, {want.view()});
  auto relaxed = matmul_chain(n, d, 600);
  relaxed->run({x.view()}, {got.view()});
  EXPECT_TRUE(all_close(want, got, 0, 0));
}

TEST(Watchdog, ConcurrentWatchedCallsAreEachTracked) {
  // Several threads in watched calls at once register and unregister without a report.
  auto cg = small_graph(/*watchdog_s=*/30);
  Tensor x = random_tensor(DType::f32, {4, 8}, 1), y = random_tensor(DType::f32, {4, 8}, 2);
  Tensor want(DType::f32, {4, 6}), wy(DType::f32, {4, 8});
  cg->run({x.view(), y.view()}, {want.view(), wy.view()});
  std::vector<std::thread> threads;
  std::atomic<int> bad{0};
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&] {
      Tensor a(DType::f32, {4, 6}), ay(DType::f32, {4, 8});
      for (int i = 0; i < 50; ++i) {
        cg->run({x.view(), y.view()}, {a.view(), ay.view()});
        if (!all_close(a, want, 0, 0)) bad.fetch_add(1);
      }
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(bad.load(), 0);
}
