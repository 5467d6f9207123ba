// The watchdog thread and its registry of watched calls (watchdog.h says what it does and
// what it cannot). The registry is a vector under one mutex: a watched call takes it twice
// (register, unregister); calls without watchdog_s never reach this file.
#include "runtime/watchdog.h"

#include <pthread.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <thread>
#include <vector>

#include "runtime/executable.h"

namespace updraft {

namespace {

std::string seconds(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3g", s);
  return buf;
}

std::string slot_text(const Plan& plan, int slot) {
  const Slot& sl = plan.slots()[slot];
  std::string r = std::string(dtype_name(sl.dtype)) + "[";
  for (size_t i = 0; i < sl.shape.size(); ++i) r += (i ? ", " : "") + std::to_string(sl.shape[i]);
  return r + "]";
}

// "step 3 of 31: mm [onednn_matmul] (f32[8, 8], f32[8, 8]) -> (f32[8, 8])"
std::string step_text(const Plan& plan, int index) {
  const auto& steps = plan.steps();
  if (index < 0) return "packing inputs (before step 0 of " + std::to_string(steps.size()) + ")";
  const Step& st = steps[static_cast<size_t>(index)];
  StepEvent ev;
  ev.step = &st;
  std::string r = "step " + std::to_string(index) + " of " + std::to_string(steps.size()) + ": " + ev.op() + " [" +
                  ev.kernel() + "] (";
  for (size_t j = 0; j < st.in_slots.size(); ++j) r += (j ? ", " : "") + slot_text(plan, st.in_slots[j]);
  r += ") -> (";
  for (size_t j = 0; j < st.out_slots.size(); ++j) r += (j ? ", " : "") + slot_text(plan, st.out_slots[j]);
  return r + ")";
}

std::string graph_name(const Executable& exe) {
  std::string label = exe.label();
  return label.empty() ? "(unlabelled, " + std::to_string(exe.graph().num_nodes()) + " nodes)" : "'" + label + "'";
}

}  // namespace

class Watchdog {
 public:
  static Watchdog& get();
  void add(WatchedCall* c);
  void remove(WatchedCall* c);

 private:
  void loop();
  std::string report(int64_t now, const std::vector<WatchedCall*>& late, const std::vector<int>& steps) const;

  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<WatchedCall*> calls_;  // in flight, registration order
  bool idle_ = false;                // the thread waits for a first call (no timeout)
  double tick_s_ = 0.25;             // the thread's current wake-up period
};

namespace {

// The process's watchdog, made by the first watched call. Never deleted: its detached thread
// may still run while static destructors do. A forked child forgets the parent's (whose
// thread does not exist there) and makes its own on its first watched call.
std::atomic<Watchdog*> g_watchdog{nullptr};

void forget_in_child() { g_watchdog.store(nullptr, std::memory_order_relaxed); }

}  // namespace

Watchdog& Watchdog::get() {
  Watchdog* w = g_watchdog.load(std::memory_order_acquire);
  if (w) return *w;
  static const int atfork = pthread_atfork(nullptr, nullptr, forget_in_child);
  (void)atfork;
  auto* fresh = new Watchdog();
  if (!g_watchdog.compare_exchange_strong(w, fresh, std::memory_order_acq_rel, std::memory_order_acquire)) {
    delete fresh;  // another thread made it first
    return *w;
  }
  try {
    std::thread(&Watchdog::loop, fresh).detach();
  } catch (const std::exception& e) {
    g_watchdog.store(nullptr, std::memory_order_release);
    delete fresh;
    throw Error("runtime", std::string("watchdog: cannot start its thread (") + e.what() +
                               "); set CompilerConfig(watchdog_s=0) to run without it");
  }
  return *fresh;
}

void Watchdog::add(WatchedCall* c) {
  std::lock_guard<std::mutex> lock(mu_);
  calls_.push_back(c);
  // Wake the thread only when it would otherwise look too late: asleep for good, or on a
  // period longer than this call's quarter limit.
  if (idle_ || c->limit_s_ / 4 < tick_s_) cv_.notify_one();
}

void Watchdog::remove(WatchedCall* c) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = std::find(calls_.begin(), calls_.end(), c);
  if (it != calls_.end()) {
    *it = calls_.back();
    calls_.pop_back();
  }
}

void Watchdog::loop() {
  std::unique_lock<std::mutex> lock(mu_);
  std::vector<WatchedCall*> late;
  std::vector<int> steps;
  for (;;) {
    if (calls_.empty()) {
      idle_ = true;
      cv_.wait(lock, [&] { return !calls_.empty(); });
      idle_ = false;
    }
    const int64_t now = runtime_clock_ns();
    tick_s_ = 0.25;
    late.clear();
    steps.clear();
    for (WatchedCall* c : calls_) {
      tick_s_ = std::min(tick_s_, c->limit_s_ / 4);
      steps.push_back(c->step_.load(std::memory_order_relaxed));
      if (!c->flagged_.load(std::memory_order_relaxed) &&
          static_cast<double>(now - c->start_ns_) >= c->limit_s_ * 1e9)
        late.push_back(c);
    }
    if (!late.empty()) {
      // Printed before the calls are flagged, so the report shows where each one was stuck;
      // under the lock, so no call it names can end meanwhile.
      try {
        const std::string text = report(now, late, steps);
        std::fputs(text.c_str(), stderr);
        std::fflush(stderr);
      } catch (...) {  // an allocation failure must not take the process down with the report
      }
      for (WatchedCall* c : late) {
        c->flagged_step_ = c->step_.load(std::memory_order_relaxed);
        c->flagged_.store(true, std::memory_order_release);
      }
    }
    cv_.wait_for(lock, std::chrono::nanoseconds(static_cast<int64_t>(std::max(tick_s_, 1e-3) * 1e9)));
  }
}

std::string Watchdog::report(int64_t now, const std::vector<WatchedCall*>& late, const std::vector<int>& steps) const {
  std::string r;
  for (const WatchedCall* c : late)
    r += "[updraft] watchdog: the engine call on thread " + std::to_string(c->tid_) + " (graph " +
         graph_name(c->exe_) + ") has run " + seconds(static_cast<double>(now - c->start_ns_) * 1e-9) +
         " s, over its limit of " + seconds(c->limit_s_) +
         " s (CompilerConfig(watchdog_s)); it stops at its next step boundary\n";
  r += "[updraft] watchdog: engine calls in flight (" + std::to_string(calls_.size()) + "):\n";
  std::vector<const Plan*> plans;
  for (size_t i = 0; i < calls_.size(); ++i) {
    const WatchedCall* c = calls_[i];
    const bool is_late = std::find(late.begin(), late.end(), c) != late.end();
    r += "[updraft]   thread " + std::to_string(c->tid_) + ", graph " + graph_name(c->exe_) + (is_late ? " (late)" : "") +
         ": " + seconds(static_cast<double>(now - c->start_ns_) * 1e-9) + " s so far (limit " + seconds(c->limit_s_) +
         " s), at " + step_text(c->plan_, steps[i]) + "\n";
    if (std::find(plans.begin(), plans.end(), &c->plan_) == plans.end()) plans.push_back(&c->plan_);
  }
  for (const Plan* p : plans) {
    std::string who;
    for (const WatchedCall* c : calls_)
      if (&c->plan_ == p) who += (who.empty() ? "" : ", ") + std::to_string(c->tid_);
    for (const WatchedCall* c : calls_)
      if (&c->plan_ == p) {
        r += "[updraft] watchdog: plan of graph " + graph_name(c->exe_) + " (thread " + who + "):\n" + p->str();
        break;
      }
  }
  return r;
}

WatchedCall::WatchedCall(const Executable& exe, const Plan& plan, double limit_s, StepObserver* next)
    : exe_(exe),
      plan_(plan),
      limit_s_(limit_s),
      next_(next),
      start_ns_(runtime_clock_ns()),
      tid_(static_cast<long>(::syscall(SYS_gettid))) {
  dog_ = &Watchdog::get();
  dog_->add(this);
}

WatchedCall::~WatchedCall() { dog_->remove(this); }

void WatchedCall::before(const Plan& plan, const StepEvent& ev) {
  if (flagged_.load(std::memory_order_acquire)) {
    const auto& steps = plan.steps();
    std::string at = flagged_step_ < 0 ? std::string("while packing inputs")
                                       : "at step " + std::to_string(flagged_step_) + " (" + [&] {
                                           StepEvent f;
                                           f.step = &steps[static_cast<size_t>(flagged_step_)];
                                           return f.op() + ", " + f.kernel();
                                         }() + ")";
    throw WatchdogTimeout("watchdog: the engine call of graph " + graph_name(exe_) + " exceeded " + seconds(limit_s_) +
                          " s " + at + "; stopped before step " + std::to_string(ev.index) + " of " +
                          std::to_string(steps.size()) + " after " +
                          seconds(static_cast<double>(runtime_clock_ns() - start_ns_) * 1e-9) +
                          " s (where every engine call was: the report on stderr); raise "
                          "CompilerConfig(watchdog_s) (or UPDRAFT_WATCHDOG_S) if the call is only slow, or set it "
                          "to 0 to turn the watchdog off");
  }
  step_.store(static_cast<int>(ev.index), std::memory_order_relaxed);
  if (next_) next_->before(plan, ev);
}

void WatchedCall::after(const Plan& plan, const StepEvent& ev) {
  if (next_) next_->after(plan, ev);
}

}  // namespace updraft
