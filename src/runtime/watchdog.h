// Watchdog: an engine call (Executable::run / run_plan) still running after
// CompileOptions::watchdog_s seconds is reported on stderr and then stopped with an error,
// rather than hanging the process without a word.
//
//   CompileOptions o;  o.watchdog_s = 30;           // Python: CompilerConfig(watchdog_s=30)
//   auto cg = Executable::compile(std::move(g), o);
//   cg->run(ins, outs);   // past 30 s: report on stderr, then throws WatchdogTimeout
//
// How: with the option set, each call registers a WatchedCall (a StepObserver) that publishes
// the step it is about to run. One watchdog thread per process, started by the first watched
// call, wakes every quarter of the smallest limit in flight (at most every 250 ms; it sleeps
// for good while nothing is in flight). When a call passes its limit it prints every
// in-flight watched call (thread id, graph label, current step with op, kernel and shapes,
// time so far) and each one's plan (Plan::str), and flags the late call; the call throws
// WatchdogTimeout (an Error("runtime", "watchdog: ...")) at its next step boundary.
// Off (watchdog_s = 0) costs one test of the option per call and nothing per step.
//
// What it cannot do:
// - Interrupt a step. A kernel that never returns is reported (its step, op, kernel and
//   shapes) but the call stops only when that kernel returns; a call past its last step
//   returns its (complete, correct) result after being reported.
// - See calls without the option, or anything outside the engine's steps: Python, Dynamo, the
//   ops that run in PyTorch, the pass pipeline and a new shape's Plan::build are not watched
//   (the clock starts after the plan lookup), and the limit is per engine call, not per
//   compiled-model call (a model of several partitions gets the limit for each).
// - Survive fork() with calls in flight: a child starts a fresh watchdog thread on its first
//   watched call and knows nothing of the parent's calls.
#pragma once
#include <atomic>
#include <cstdint>
#include <string>

#include "core/error.h"
#include "runtime/plan.h"

namespace updraft {

class Executable;
class Watchdog;  // watchdog.cpp

// The error a watched call throws once the watchdog flagged it. Its own type so that a caller
// can tell a hang from an input error (Python: updraft._C.WatchdogTimeout, which a partition
// does not turn into a PyTorch fallback).
class WatchdogTimeout : public Error {
 public:
  explicit WatchdogTimeout(const std::string& message) : Error("runtime", message) {}
};

// One engine call under the watchdog, for as long as it lives (on the calling thread's stack):
// registers on construction, unregisters on destruction. Forwards every step to `next`.
class WatchedCall : public StepObserver {
 public:
  WatchedCall(const Executable& exe, const Plan& plan, double limit_s, StepObserver* next);
  ~WatchedCall() override;
  WatchedCall(const WatchedCall&) = delete;
  WatchedCall& operator=(const WatchedCall&) = delete;

  void before(const Plan& plan, const StepEvent& ev) override;  // throws WatchdogTimeout once flagged
  void after(const Plan& plan, const StepEvent& ev) override;

 private:
  friend class Watchdog;
  Watchdog* dog_ = nullptr;  // the one it registered with
  const Executable& exe_;
  const Plan& plan_;
  const double limit_s_;
  StepObserver* const next_;
  const int64_t start_ns_;  // runtime_clock_ns() at registration
  const long tid_;          // the OS thread id (gettid), as a debugger or py-spy shows it
  std::atomic<int> step_{-1};  // the step running now (-1: inputs being packed)
  std::atomic<bool> flagged_{false};
  int flagged_step_ = -1;  // the step running when flagged (written before flagged_ is released)
};

}  // namespace updraft
