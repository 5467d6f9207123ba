// Executable: compile once (pass pipeline), then per input-shape signature a cached Plan,
// then many concurrent run() calls, each on its own pooled arena.
//
// Locking: mu_ guards the LRU of plans (lookup, reorder, build, evict). A Plan is immutable
// once built, so execution runs outside the lock; an evicted plan stays alive while a caller
// still holds its shared_ptr. Each Plan guards its own pool of CallStates.
#include "runtime/executable.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>

#include "core/error.h"
#include "kernels/channel_block.h"
#include "kernels/kernel.h"
#include "passes/pipeline.h"
#include "runtime/bind_inputs.h"
#include "runtime/plan.h"
#include "runtime/cross_shape_cache.h"
#include "runtime/watchdog.h"

namespace updraft {

namespace {

double thread_cpu_ms() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e3 + static_cast<double>(ts.tv_nsec) * 1e-6;
}

std::string dims_str(const int64_t* s, int n) {
  std::string r = "[";
  for (int i = 0; i < n; ++i) r += (i ? ", " : "") + std::to_string(s[i]);
  return r + "]";
}

// Range templates kept per graph: a decode loop moves through one bucket at a time, a server
// with mixed lengths through a few; each template holds only kernels and a schedule.
constexpr size_t kMaxRangeTemplates = 8;

}  // namespace

std::shared_ptr<Executable> Executable::compile(std::unique_ptr<Graph> graph, const CompileOptions& opts) {
  UPDRAFT_CHECK(graph != nullptr, "runtime", "compile() was given no graph");
  UPDRAFT_CHECK(opts.channel_block == -1 || opts.channel_block == 0 || opts.channel_block == 8 ||
                    opts.channel_block == 16 || opts.channel_block == kChannelsLast,
                "runtime", "channel_block is " + std::to_string(opts.channel_block) +
                               "; use -1 (this CPU's preference), 0 (plain NCHW), 8 or 16 (nChw{B}c) or " +
                               std::to_string(kChannelsLast) + " (channels-last)");
  std::shared_ptr<Executable> cg(new Executable());
  cg->opts_ = opts;
  // Only -1 (auto) resolves: kChannelsLast is negative too, and an explicit layout is kept.
  if (cg->opts_.channel_block == -1) cg->opts_.channel_block = preferred_channel_block();
  auto t0 = std::chrono::steady_clock::now();
  cg->pass_log_ = run_pipeline(*graph, cg->opts_);
  cg->compile_ms_ = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  cg->graph_ = std::move(graph);
  if (opts.debug >= 1) {
    for (const PassRecord& r : cg->pass_log_)
      std::fprintf(stderr, "[updraft] pass %-20s %-9s %.3f ms\n", r.name.c_str(),
                   r.skipped ? "skipped" : r.changed ? "changed" : "unchanged", r.ms);
    std::fprintf(stderr, "[updraft] compiled %zu nodes in %.3f ms\n", cg->graph_->num_nodes(), cg->compile_ms_);
  }
  return cg;
}

std::shared_ptr<Executable> Executable::from_optimized(std::unique_ptr<Graph> graph, const CompileOptions& opts,
                                                             double load_ms) {
  UPDRAFT_CHECK(graph != nullptr, "runtime", "from_optimized() was given no graph");
  std::shared_ptr<Executable> cg(new Executable());
  cg->opts_ = opts;
  cg->graph_ = std::move(graph);
  cg->compile_ms_ = load_ms;
  PassRecord load;
  load.name = "cache_load";
  load.ms = load_ms;
  cg->pass_log_.push_back(std::move(load));
  if (opts.debug >= 1)
    std::fprintf(stderr, "[updraft] loaded %zu nodes from the compile cache in %.3f ms\n", cg->graph_->num_nodes(),
                 load_ms);
  return cg;
}

Executable::~Executable() = default;

std::shared_ptr<Plan> Executable::plan_for(const std::vector<std::vector<int64_t>>& input_shapes) {
  std::lock_guard<std::mutex> lock(mu_);
  for (size_t i = 0; i < plans_.size(); ++i) {
    if (plans_[i].first == input_shapes) {
      // Most recently used goes to the front; rotate moves elements without allocating.
      std::rotate(plans_.begin(), plans_.begin() + static_cast<std::ptrdiff_t>(i),
                  plans_.begin() + static_cast<std::ptrdiff_t>(i) + 1);
      return plans_.front().second;
    }
  }
  // Built under the lock: a plan is built once per signature even when many threads miss.
  std::shared_ptr<Plan> plan = make_plan(input_shapes);
  if (profiling_) plan->set_profiling(true);
  if (opts_.debug >= 2) std::fprintf(stderr, "[updraft] new plan\n%s", plan->str().c_str());
  plans_.insert(plans_.begin(), {input_shapes, plan});
  size_t cap = std::max<size_t>(opts_.plan_cache_size, 1);
  if (plans_.size() > cap) plans_.resize(cap);  // drop the least recently used
  return plan;
}

std::shared_ptr<Plan> Executable::build_timed(const std::vector<std::vector<int64_t>>& input_shapes, bool range,
                                              std::string* why) {
  // The CrossShapeCache is made with the first plan, whichever way this Executable was made.
  // Shape-specific kernels: twice the plan LRU per node, so a signature whose plan was evicted
  // and comes back finds its kernels (shape-generic ones are shared by every plan anyway).
  if (!cross_shape_cache_)
    cross_shape_cache_ = std::make_unique<CrossShapeCache>(*graph_, 2 * std::max<size_t>(opts_.plan_cache_size, 1));
  auto t0 = std::chrono::steady_clock::now();
  const double cpu0 = thread_cpu_ms();
  std::shared_ptr<Plan> plan = range ? Plan::build_range(*graph_, input_shapes, opts_, *cross_shape_cache_, why)
                                     : Plan::build(*graph_, input_shapes, opts_, cross_shape_cache_.get());
  last_plan_ms_ = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  total_plan_ms_ += last_plan_ms_;
  last_plan_cpu_ms_ = thread_cpu_ms() - cpu0;
  total_plan_cpu_ms_ += last_plan_cpu_ms_;
  ++plans_built_;  // a range attempt that did not qualify still built (and counts)
  if (plan) {
    finite_kernels_ = 0;
    for (const Step& st : plan->steps()) finite_kernels_ += st.kernel && st.kernel->fuses_when_finite();
    finite_scanned_ = plan->finite_inputs().size();
  }
  return plan;
}

std::shared_ptr<Plan> Executable::make_plan(const std::vector<std::vector<int64_t>>& input_shapes) {
  if (!opts_.range_plans || (!range_state_.empty() && range_state_ != "on"))
    return build_timed(input_shapes, false, nullptr);
  for (const Value* in : graph_->inputs())
    if (!in->binds.empty()) {
      range_state_ = "the graph has size inputs (each value is a signature of its own)";
      return build_timed(input_shapes, false, nullptr);
    }
  const SymBindings b = bind_input_shapes(*graph_, input_shapes, "runtime");
  if (Plan::bucket_of(b).empty()) return build_timed(input_shapes, false, nullptr);  // static, or a size of 0
  if (range_state_.empty()) {
    // The first symbolic signature: an ordinary plan, which also tells whether the graph
    // qualifies for range plans (the next buckets' templates are built only if it does).
    std::shared_ptr<Plan> p = build_timed(input_shapes, false, nullptr);
    std::string why = p->range_refusal(*graph_, opts_, *cross_shape_cache_);
    range_state_ = why.empty() ? "on" : why;
    return p;
  }
  std::string why;
  std::shared_ptr<Plan> t;
  for (size_t i = 0; i < ranges_.size() && !t; ++i) {
    if (!ranges_[i]->covers(b)) continue;
    std::rotate(ranges_.begin(), ranges_.begin() + static_cast<std::ptrdiff_t>(i),
                ranges_.begin() + static_cast<std::ptrdiff_t>(i) + 1);
    t = ranges_.front();
  }
  if (!t) {
    t = build_timed(input_shapes, true, &why);
    if (!t) {
      range_state_ = why;  // one plan per signature from now on
      return build_timed(input_shapes, false, nullptr);
    }
    ranges_.insert(ranges_.begin(), t);
    if (ranges_.size() > kMaxRangeTemplates) ranges_.resize(kMaxRangeTemplates);
  }
  if (auto p = t->instantiate(input_shapes, b, opts_, &why)) {
    ++plans_instantiated_;
    return p;
  }
  return build_timed(input_shapes, false, nullptr);  // this size does not fit the bucket's plan
}

std::vector<std::vector<int64_t>> Executable::prepare(const std::vector<std::vector<int64_t>>& input_shapes) {
  return plan_for(input_shapes)->output_shapes();
}

std::string Executable::plan_text(const std::vector<std::vector<int64_t>>& input_shapes) {
  return plan_for(input_shapes)->str();
}

PlanStats Executable::plan_stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  KernelCache::Stats k = cross_shape_cache_ ? cross_shape_cache_->kernels.stats() : KernelCache::Stats{};
  return {plans_built_,        last_plan_ms_,        total_plan_ms_, k.created,       k.reused,
          last_plan_cpu_ms_,   total_plan_cpu_ms_,   plans_instantiated_, range_state_, finite_kernels_,
          finite_scanned_};
}

void Executable::set_profiling(bool on) {
  std::lock_guard<std::mutex> lock(mu_);
  profiling_ = on;
  for (auto& [shapes, plan] : plans_) plan->set_profiling(on);
}

std::vector<std::pair<std::vector<std::vector<int64_t>>, std::vector<StepTime>>> Executable::step_times()
    const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::pair<std::vector<std::vector<int64_t>>, std::vector<StepTime>>> r;
  for (const auto& [shapes, plan] : plans_) r.emplace_back(shapes, plan->step_times());
  return r;
}

size_t Executable::num_plans() const {
  std::lock_guard<std::mutex> lock(mu_);
  return plans_.size();
}

std::vector<DType> Executable::output_dtypes() const {
  std::vector<DType> r;
  for (const Value* v : graph_->outputs()) r.push_back(v->type.dtype);
  return r;
}

std::shared_ptr<const Plan> Executable::plan(const std::vector<std::vector<int64_t>>& input_shapes) {
  return plan_for(input_shapes);
}

void Executable::check_inputs(const std::vector<TensorView>& inputs) const {
  // Validate what the graph alone decides (count, dtype, rank) before looking for a plan;
  // sizes are checked by the plan lookup (a cached plan matches exactly) or its build.
  const auto& gin = graph_->inputs();
  UPDRAFT_CHECK(inputs.size() == gin.size(), "runtime",
                "expected " + std::to_string(gin.size()) + " inputs, got " + std::to_string(inputs.size()));
  for (size_t k = 0; k < inputs.size(); ++k) {
    const TensorType& t = gin[k]->type;
    if (inputs[k].dtype != t.dtype)
      throw Error("runtime", "input " + std::to_string(k) + " has dtype " + dtype_name(inputs[k].dtype) +
                                 ", expected " + dtype_name(t.dtype) + " (" + t.str() + ")");
    if (inputs[k].ndim != static_cast<int>(t.shape.size()))
      throw Error("runtime", "input " + std::to_string(k) + " has rank " + std::to_string(inputs[k].ndim) +
                                 ", expected " + std::to_string(t.shape.size()) + " (" + t.str() + ")");
    if (inputs[k].data == nullptr && inputs[k].numel() > 0)
      throw Error("runtime", "input " + std::to_string(k) + " has no data pointer");
  }
}

void Executable::set_label(std::string label) {
  std::lock_guard<std::mutex> lock(label_mu_);
  label_ = std::move(label);
}

std::string Executable::label() const {
  std::lock_guard<std::mutex> lock(label_mu_);
  return label_;
}

void Executable::run(const std::vector<TensorView>& inputs, const std::vector<TensorView>& outputs,
                     StepObserver* observer) {
  check_inputs(inputs);
  std::shared_ptr<Plan> plan;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (size_t i = 0; i < plans_.size(); ++i) {
      if (plans_[i].second->matches(inputs)) {
        std::rotate(plans_.begin(), plans_.begin() + static_cast<std::ptrdiff_t>(i),
                    plans_.begin() + static_cast<std::ptrdiff_t>(i) + 1);
        plan = plans_.front().second;
        break;
      }
    }
  }
  if (!plan) {  // first call with these shapes: build (allocates, once)
    std::vector<std::vector<int64_t>> shapes;
    const auto& gin = graph_->inputs();
    for (size_t k = 0; k < inputs.size(); ++k)  // a size input's entry is its value (check_inputs: an i64 scalar)
      shapes.push_back(gin[k]->binds.empty() ? inputs[k].shape()
                                             : std::vector<int64_t>{*static_cast<const int64_t*>(inputs[k].data)});
    plan = plan_for(shapes);
  }
  execute_checked(*plan, inputs, outputs, observer);
}

void Executable::run_plan(const Plan& plan, const std::vector<TensorView>& inputs,
                             const std::vector<TensorView>& outputs, StepObserver* observer, OutputSource* source) {
  check_inputs(inputs);
  if (!plan.matches(inputs)) {
    std::string got;
    for (const TensorView& v : inputs) got += dims_str(v.sizes, v.ndim);
    throw Error("runtime", "run_plan: input shapes " + got + " are not the plan's");
  }
  execute_checked(plan, inputs, outputs, observer, source);
}

void Executable::execute_checked(const Plan& plan_ref, const std::vector<TensorView>& inputs,
                                    const std::vector<TensorView>& outputs, StepObserver* observer,
                                    OutputSource* source) {
  const Plan* plan = &plan_ref;
  const auto& want = plan->output_shapes();
  UPDRAFT_CHECK(outputs.size() == want.size(), "runtime",
                "expected " + std::to_string(want.size()) + " outputs, got " + std::to_string(outputs.size()));
  const auto& gout = graph_->outputs();
  for (size_t k = 0; k < outputs.size(); ++k) {
    const TensorView& o = outputs[k];
    if (o.dtype != gout[k]->type.dtype)
      throw Error("runtime", "output " + std::to_string(k) + " has dtype " + dtype_name(o.dtype) + ", expected " +
                                 dtype_name(gout[k]->type.dtype));
    bool same = o.ndim == static_cast<int>(want[k].size());
    for (int d = 0; same && d < o.ndim; ++d) same = o.sizes[d] == want[k][d];
    if (!same)
      throw Error("runtime", "output " + std::to_string(k) + " has shape " + dims_str(o.sizes, o.ndim) +
                                 ", expected " + dims_str(want[k].data(), static_cast<int>(want[k].size())) +
                                 " (call prepare() for the output shapes)");
    if (!o.is_contiguous())
      throw Error("runtime", "output " + std::to_string(k) + " is not contiguous; pass a contiguous buffer");
    if (o.data == nullptr && o.numel() > 0 && !source)
      throw Error("runtime", "output " + std::to_string(k) + " has no data pointer");
  }

  std::unique_ptr<CallState> st = plan->acquire();
  try {
    if (opts_.watchdog_s > 0) {  // the whole cost of the watchdog when off: this test
      WatchedCall watched(*this, *plan, opts_.watchdog_s, observer);
      plan->execute(*st, inputs, outputs, &watched, source);
    } else {
      plan->execute(*st, inputs, outputs, observer, source);
    }
  } catch (...) {
    if (opts_.keep_arenas) plan->release(std::move(st));
    throw;
  }
  if (opts_.keep_arenas) plan->release(std::move(st));  // else the arena is freed here
}

}  // namespace updraft
