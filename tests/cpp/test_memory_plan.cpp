// Liveness and the arena planner: lifetimes (views extend their root), best-fit placement
// never overlaps two live buffers, and in-place reuse happens exactly where it is safe.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "core/error.h"
#include "ir/graph.h"
#include "ir/op_table.h"
#include "memory/liveness.h"
#include "memory/memory_plan.h"

using namespace updraft;

namespace {

// Independent of plan_is_valid: byte-range intersection of every time-overlapping pair.
bool brute_force_disjoint(const MemoryPlan& mp) {
  for (size_t i = 0; i < mp.buffers.size(); ++i)
    for (size_t j = i + 1; j < mp.buffers.size(); ++j) {
      const auto &a = mp.buffers[i], &b = mp.buffers[j];
      bool live_together = a.first <= b.last && b.first <= a.last;
      bool share_bytes = a.offset < b.offset + b.bytes && b.offset < a.offset + a.bytes;
      if (live_together && share_bytes && a.bytes && b.bytes) return false;
    }
  return true;
}

// The most bytes live at any one step: no valid plan can use a smaller arena.
size_t peak_live_bytes(const std::vector<BufferRequest>& reqs) {
  int lo = 0, hi = 0;
  for (const auto& r : reqs) lo = std::min(lo, r.first), hi = std::max(hi, r.last);
  size_t peak = 0;
  for (int t = lo; t <= hi; ++t) {
    size_t live = 0;
    for (const auto& r : reqs)
      if (r.first <= t && t <= r.last) live += r.bytes;
    peak = std::max(peak, live);
  }
  return peak;
}

std::vector<size_t> bytes_of(const Graph& g) {
  std::vector<size_t> b(g.num_values());
  for (size_t id = 0; id < g.num_values(); ++id) {
    const Value* v = g.value(static_cast<int>(id));
    if (shape_is_static(v->type.shape))
      b[id] = static_cast<size_t>(numel_of(shape_values(v->type.shape))) * dtype_size(v->type.dtype);
  }
  return b;
}

TensorType f32(std::vector<int64_t> s) { return {DType::f32, shape_from(s)}; }

}  // namespace

TEST(MemoryPlan, RandomLifetimesNeverOverlap) {
  std::mt19937 rng(1234);
  for (int trial = 0; trial < 300; ++trial) {
    int n = 1 + static_cast<int>(rng() % 60);
    std::vector<BufferRequest> reqs;
    for (int i = 0; i < n; ++i) {
      int a = static_cast<int>(rng() % 40) - 1, b = static_cast<int>(rng() % 40) - 1;
      size_t bytes = rng() % 5 == 0 ? 0 : rng() % 100000;  // some empty, most odd sizes
      if (trial % 7 == 0) bytes = 4096;                      // many equal sizes: ties
      reqs.push_back({"b" + std::to_string(i), bytes, std::min(a, b), std::max(a, b)});
    }
    MemoryPlan mp = plan_memory(reqs);
    ASSERT_EQ(mp.buffers.size(), reqs.size());
    std::string why;
    ASSERT_TRUE(plan_is_valid(mp, &why)) << "trial " << trial << ": " << why;
    ASSERT_TRUE(brute_force_disjoint(mp)) << "trial " << trial;
    for (size_t i = 0; i < reqs.size(); ++i) {
      EXPECT_EQ(mp.buffers[i].offset % kArenaAlign, 0u);
      EXPECT_EQ(mp.buffers[i].bytes, reqs[i].bytes);  // requests keep their order and sizes
    }
    EXPECT_GE(mp.arena_bytes, peak_live_bytes(reqs));
    size_t padded_sum = 0;
    for (const auto& r : reqs) padded_sum += (r.bytes + kArenaAlign - 1) / kArenaAlign * kArenaAlign;
    EXPECT_LE(mp.arena_bytes, padded_sum);
  }
}

TEST(MemoryPlan, DeadBuffersAreReused) {
  // A chain: each buffer dies when the next is born, so two slots of 1 KiB suffice.
  std::vector<BufferRequest> reqs;
  for (int i = 0; i < 10; ++i) reqs.push_back({"c" + std::to_string(i), 1000, i, i + 1});
  MemoryPlan mp = plan_memory(reqs);
  EXPECT_TRUE(plan_is_valid(mp));
  EXPECT_EQ(mp.arena_bytes, 2 * 1024u);
  EXPECT_EQ(mp.sum_bytes(), 10000u);
}

TEST(MemoryPlan, BestFitTakesTheTightestGap) {
  // big0 and big1 sit side by side with a 256-byte hole freed by `hole`; `small` (live only
  // after `hole` died) must land in that hole, not above everything.
  std::vector<BufferRequest> reqs = {
      {"big0", 4096, 0, 10}, {"hole", 256, 0, 1}, {"big1", 2048, 0, 10}, {"small", 200, 2, 10}};
  MemoryPlan mp = plan_memory(reqs);
  ASSERT_TRUE(plan_is_valid(mp));
  EXPECT_EQ(mp.buffers[3].offset, mp.buffers[1].offset);
  EXPECT_EQ(mp.arena_bytes, 4096u + 2048u + 256u);
}

TEST(MemoryPlan, ValidityCheckCatchesOverlapAndMisalignment) {
  MemoryPlan mp;
  mp.arena_bytes = 256;
  PlannedBuffer a, b;
  a.label = "a", a.bytes = 128, a.first = 0, a.last = 3, a.offset = 0;
  b.label = "b", b.bytes = 128, b.first = 2, b.last = 5, b.offset = 64;
  mp.buffers = {a, b};
  std::string why;
  EXPECT_FALSE(plan_is_valid(mp, &why));
  EXPECT_NE(why.find("overlap"), std::string::npos) << why;
  mp.buffers[1].first = 4;  // no longer live together: sharing bytes is fine
  EXPECT_TRUE(plan_is_valid(mp, &why)) << why;
  mp.buffers[1].offset = 32;
  EXPECT_FALSE(plan_is_valid(mp, &why));
  EXPECT_NE(why.find("unaligned"), std::string::npos) << why;
  mp.buffers[1].offset = 192;  // runs past the arena
  EXPECT_FALSE(plan_is_valid(mp, &why));
}

TEST(MemoryPlan, ValidityCheckAgreesWithBruteForceOnDamagedPlans) {
  // plan_is_valid walks buffers in offset order; the brute force checks every pair. Plans with
  // one buffer moved to a random aligned offset are sometimes valid, sometimes not: both must
  // say the same every time.
  std::mt19937 rng(99);
  int invalid = 0;
  for (int trial = 0; trial < 400; ++trial) {
    std::vector<BufferRequest> reqs;
    const int n = 2 + static_cast<int>(rng() % 40);
    for (int i = 0; i < n; ++i) {
      int a = static_cast<int>(rng() % 30), b = static_cast<int>(rng() % 30);
      reqs.push_back({"b" + std::to_string(i), rng() % 6 == 0 ? 0 : 64 * (1 + rng() % 64), std::min(a, b), std::max(a, b)});
    }
    MemoryPlan mp = plan_memory(reqs);
    PlannedBuffer& moved = mp.buffers[rng() % mp.buffers.size()];
    moved.offset = kArenaAlign * (rng() % (mp.arena_bytes / kArenaAlign + 1));
    mp.arena_bytes = std::max(mp.arena_bytes, moved.offset + moved.bytes);
    const bool valid = plan_is_valid(mp);
    EXPECT_EQ(valid, brute_force_disjoint(mp)) << "trial " << trial;
    invalid += !valid;
  }
  EXPECT_GT(invalid, 50);  // the damage does find overlaps often enough to test that side
  EXPECT_LT(invalid, 350);
}

TEST(MemoryPlan, PrintsEveryBufferAndTheTotal) {
  MemoryPlan mp = plan_memory({{"%3", 4000, 0, 2}, {"%5", 4000, 3, 4}});
  std::string s = mp.str();
  EXPECT_NE(s.find("%3"), std::string::npos) << s;
  EXPECT_NE(s.find("%5"), std::string::npos) << s;
  EXPECT_NE(s.find("[3, 4]"), std::string::npos) << s;
  EXPECT_NE(s.find("arena 4032 B"), std::string::npos) << s;
  EXPECT_NE(s.find("8000 B"), std::string::npos) << s;
}

TEST(MemoryPlan, RejectsBackwardsLifetime) {
  EXPECT_THROW(plan_memory({{"x", 64, 3, 1}}), Error);
}

TEST(Liveness, ViewsExtendTheirRootBuffer) {
  Graph g;
  Value* x = g.add_input("x", f32({4, 6}));
  Value* a = g.add_node("copy", {x})->output();                              // step 0
  Value* v = g.add_node("reshape", {a}, {{"shape", std::vector<int64_t>{24}}})->output();  // step 1
  Value* b = g.add_node("copy", {a})->output();                              // step 2: a's own last use
  Value* c = g.add_node("copy", {v})->output();                              // step 3: via the view
  g.set_outputs({b, c});
  Liveness lv = compute_liveness(g);
  EXPECT_EQ(lv.at_end, 4);
  EXPECT_EQ(lv.of(x).def, Liveness::kBeforeFirst);
  EXPECT_EQ(lv.of(x).last, 0);
  EXPECT_EQ(lv.of(a).def, 0);
  EXPECT_EQ(lv.of(a).last, 2);
  EXPECT_EQ(lv.of(v).root, a->id);
  EXPECT_EQ(lv.buffer_last(a->id), 3);  // the view is read at step 3
  EXPECT_EQ(lv.of(b).last, lv.at_end);  // graph outputs live to the end
  EXPECT_EQ(lv.of(c).last, lv.at_end);

  BufferAssignment as = assign_buffers(g, lv, bytes_of(g));
  ASSERT_EQ(as.requests.size(), 1u);  // only `a`: b and c are outputs, v lives in a's buffer
  EXPECT_EQ(as.buffer_of_value[v->id], as.buffer_of_value[a->id]);
  EXPECT_EQ(as.requests[0].first, 0);
  EXPECT_EQ(as.requests[0].last, 3);
  EXPECT_EQ(as.buffer_of_value[x->id], -1);
  EXPECT_EQ(as.buffer_of_value[b->id], -1);
}

TEST(Liveness, UnreadValuesStillLiveDuringTheirStep) {
  Graph g;
  Value* x = g.add_input("x", f32({8}));
  Value* dead = g.add_node("copy", {x})->output();
  Value* y = g.add_node("copy", {x})->output();
  g.set_outputs({y});
  Liveness lv = compute_liveness(g);
  EXPECT_EQ(lv.of(dead).def, 0);
  EXPECT_EQ(lv.of(dead).last, 0);
  BufferAssignment as = assign_buffers(g, lv, bytes_of(g));
  ASSERT_EQ(as.requests.size(), 1u);
  EXPECT_EQ(as.requests[0].first, 0);
  EXPECT_EQ(as.requests[0].last, 0);
}

// In-place tests need an elementwise op marked inplace (relu), declared by the elementwise family.
TEST(MemoryPlan, InPlaceReuseAlongAReluChain) {
  Graph g;
  Value* x = g.add_input("x", f32({16, 16}));
  Value* a = g.add_node("relu", {x})->output();  // step 0: x is a graph input: no reuse
  Value* b = g.add_node("relu", {a})->output();  // step 1: reuses a
  Value* c = g.add_node("relu", {b})->output();  // step 2: reuses a>b
  Value* d = g.add_node("relu", {c})->output();  // step 3: graph output, written in place of the caller
  g.set_outputs({d});
  ASSERT_TRUE(g.nodes()[0]->op->inplace) << "relu should be declared inplace (docs/ops.md)";
  Liveness lv = compute_liveness(g);
  BufferAssignment as = assign_buffers(g, lv, bytes_of(g));
  EXPECT_EQ(as.inplace_steps, (std::vector<int>{1, 2}));
  ASSERT_EQ(as.requests.size(), 1u);
  EXPECT_EQ(as.buffer_of_value[a->id], 0);
  EXPECT_EQ(as.buffer_of_value[b->id], 0);
  EXPECT_EQ(as.buffer_of_value[c->id], 0);
  EXPECT_EQ(as.buffer_of_value[d->id], -1);
  EXPECT_EQ(as.requests[0].first, 0);
  EXPECT_EQ(as.requests[0].last, 3);
  EXPECT_TRUE(plan_is_valid(plan_memory(as.requests)));
}

TEST(MemoryPlan, NoInPlaceWhileTheInputIsStillNeeded) {
  Graph g;
  Value* x = g.add_input("x", f32({32}));
  Value* a = g.add_node("relu", {x})->output();                 // 0
  Value* v = g.add_node("reshape", {a}, {{"shape", std::vector<int64_t>{4, 8}}})->output();  // 1
  Value* b = g.add_node("relu", {a})->output();                 // 2: a still read (via v) at 3
  Value* c = g.add_node("relu", {v})->output();                 // 3: a's buffer dies here: reuse
  Value* r = g.add_node("reshape", {c}, {{"shape", std::vector<int64_t>{32}}})->output();  // 4
  Value* d = g.add_node("add", {b, r})->output();  // 5: b dies, but d is a graph output anyway
  g.set_outputs({d});
  Liveness lv = compute_liveness(g);
  BufferAssignment as = assign_buffers(g, lv, bytes_of(g));
  EXPECT_EQ(as.inplace_steps, (std::vector<int>{3}));
  EXPECT_NE(as.buffer_of_value[b->id], as.buffer_of_value[a->id]);
  EXPECT_EQ(as.buffer_of_value[c->id], as.buffer_of_value[a->id]);
  MemoryPlan mp = plan_memory(as.requests);
  EXPECT_TRUE(plan_is_valid(mp));
  EXPECT_NE(mp.str().find(">"), std::string::npos);  // the merged buffer is labelled a>c
}

TEST(MemoryPlan, NoInPlaceWhenInputZeroIsBroadcast) {
  // add(f32[4], f32[4, 4]) -> f32[4, 4]: input 0 dies here but is smaller than the output, so
  // writing the output over it would clobber elements later output rows still read.
  Graph g;
  Value* x = g.add_input("x", f32({4}));
  Value* y = g.add_input("y", f32({4, 4}));
  Value* a = g.add_node("relu", {x})->output();     // 0
  Value* e = g.add_node("add", {a, y})->output();   // 1
  Value* n = g.add_node("neg", {e})->output();      // 2: e dies here, same size: reuse
  g.set_outputs({g.add_node("relu", {n})->output()});
  ASSERT_TRUE(e->producer->op->inplace);
  Liveness lv = compute_liveness(g);
  BufferAssignment as = assign_buffers(g, lv, bytes_of(g));
  EXPECT_EQ(as.inplace_steps, (std::vector<int>{2}));
  EXPECT_NE(as.buffer_of_value[e->id], as.buffer_of_value[a->id]);
  EXPECT_EQ(as.buffer_of_value[n->id], as.buffer_of_value[e->id]);
}

// A root whose view is a graph output of the same size is written into that output's memory
// (output_host): no arena buffer. Not when the root is an output itself; of two outputs
// viewing one root, the first hosts it.
TEST(MemoryPlan, RootOfAnOutputViewIsWrittenIntoTheOutput) {
  Graph g;
  Value* x = g.add_input("x", f32({4, 6}));
  Value* a = g.add_node("relu", {x})->output();
  Value* v = g.add_node("reshape", {a}, {{"shape", std::vector<int64_t>{24}}})->output();
  Value* w = g.add_node("reshape", {a}, {{"shape", std::vector<int64_t>{6, 4}}})->output();
  Value* b = g.add_node("neg", {a})->output();  // another reader of a, after it is written
  Value* c = g.add_node("relu", {b})->output();
  Value* d = g.add_node("reshape", {c}, {{"shape", std::vector<int64_t>{24}}})->output();
  g.set_outputs({b, v, w, c, d});
  Liveness lv = compute_liveness(g);
  BufferAssignment as = assign_buffers(g, lv, bytes_of(g));
  EXPECT_EQ(as.output_host[a->id], 1);   // v, the first output viewing it
  EXPECT_EQ(as.output_host[c->id], -1);  // c is an output itself: d is copied from it
  EXPECT_EQ(as.buffer_of_value[a->id], -1);
  EXPECT_TRUE(as.requests.empty()) << as.requests.size();
}
