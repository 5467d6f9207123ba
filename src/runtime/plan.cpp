#include "runtime/plan.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <optional>

#include "core/checked.h"
#include "core/error.h"
#include "ir/op_table.h"
#include "kernels/cpu/finite_scan.h"
#include "kernels/cpu/strided_copy.h"
#include "memory/liveness.h"
#include "runtime/bind_inputs.h"

namespace updraft {

namespace {

std::string dims_str(const std::vector<int64_t>& s) {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + std::to_string(s[i]);
  return r + "]";
}

// A contiguous view built without touching the heap (TensorView::contiguous takes a vector).
TensorView contiguous_like(void* data, DType dtype, int ndim, const int64_t* sizes) {
  TensorView v;
  v.data = data;
  v.dtype = dtype;
  v.ndim = ndim;
  int64_t acc = 1;
  for (int i = ndim - 1; i >= 0; --i) {
    v.sizes[i] = sizes[i];
    v.strides[i] = acc;
    acc *= sizes[i] > 0 ? sizes[i] : 1;
  }
  return v;
}

// Phase times of one Plan::build, printed at debug >= 1 (where a new shape's plan time goes).
class PhaseTimer {
 public:
  void mark(const char* phase) {
    auto now = std::chrono::steady_clock::now();
    text_ += std::string(text_.empty() ? "" : ", ") + phase + " " +
             std::to_string(std::chrono::duration<double, std::milli>(now - last_).count()).substr(0, 5) + " ms";
    last_ = now;
  }
  const std::string& str() const { return text_; }

 private:
  std::chrono::steady_clock::time_point last_ = std::chrono::steady_clock::now();
  std::string text_;
};

}  // namespace

// Plan::build's five phases, in the order build() runs them; each is named as PhaseTimer
// reports it. The builder carries what one phase hands the next (concrete shapes, buffer
// requests, kernels) and fills the Plan as it goes.
struct Plan::Builder {
  Builder(const Graph& g, const std::vector<std::vector<int64_t>>& input_shapes, const CompileOptions& opts,
          CrossShapeCache& cache)
      : g(g), input_shapes(input_shapes), opts(opts), cache(cache), lv(cache.liveness), p(new Plan()) {}

  void shapes();           // binds symbols, then every value's concrete shape
  void buffers();          // byte counts, arena buffers for values, which inputs may need packing
  void kernels();          // a kernel per node (from the cache) and its scratch request
  void finite_check();     // which inputs each call scans for NaN / inf (runtime/finite_inputs.h)
  void memory_plan();      // offsets of every requested buffer in the arena
  void slots_and_steps();  // the slot table and the schedule

  const Graph& g;
  const std::vector<std::vector<int64_t>>& input_shapes;
  const CompileOptions& opts;
  CrossShapeCache& cache;
  const Liveness& lv;
  std::shared_ptr<Plan> p;

  std::vector<std::vector<int64_t>> shape;          // by value id: its concrete shape
  std::vector<std::optional<Attrs>> bound_attrs;    // by order index: symbolic attributes bound
  BufferAssignment assign;
  std::vector<BufferRequest> requests;
  std::vector<bool> packable;                       // by input: some node reads it (or a view of it)
  std::vector<std::shared_ptr<const Kernel>> node_kernels;  // by order index (null for views)
  std::vector<int> scratch_request;                 // by order index: its scratch request, or -1

  // Node i's bound attributes (its first twin's), or null when they hold no symbols.
  const Attrs* bound(int i) const {
    const std::optional<Attrs>& b = bound_attrs[cache.twin[static_cast<size_t>(i)]];
    return b ? &*b : nullptr;
  }
};

void Plan::Builder::shapes() {
  p->input_shapes_ = input_shapes;
  p->num_threads_ = opts.num_threads;
  p->bindings_ = bind_input_shapes(g, input_shapes, "runtime");

  // Concrete shapes: inputs as given, constants as stored, node outputs re-inferred from
  // concrete inputs (the same shape functions the kernels are built against).
  shape.resize(g.num_values());
  // A size input's signature entry is its value; as a value it is an i64 scalar.
  for (size_t k = 0; k < g.inputs().size(); ++k) {
    const Value* in = g.inputs()[k];
    shape[in->id] = in->binds.empty() ? input_shapes[k] : std::vector<int64_t>{};
    p->size_input_.push_back(!in->binds.empty());
  }
  for (const Value* c : cache.constants) shape[c->id] = c->constant->shape();
  // Symbolic attributes (reshape to [s0, s1, 12, 64], slice end s1) evaluated for this
  // binding: the shape functions below and the kernels see concrete sizes only.
  // A node whose first twin (CrossShapeCache::twin) has the same attributes shares its binding.
  bound_attrs.resize(lv.at_end);
  for (int i = 0; i < lv.at_end; ++i) {
    if (!cache.symbolic_attrs[static_cast<size_t>(i)] || cache.twin[static_cast<size_t>(i)] != i) continue;
    const Node* n = lv.order[i];
    try {
      bound_attrs[i] = bind_attrs(n->attrs, p->bindings_);
    } catch (const Error& e) {
      throw Error("runtime", "node %" + std::to_string(n->id) + " (" + n->op_name() + "): " + e.what() +
                                 "; its symbols must appear as plain input dims");
    }
  }
  std::vector<TensorType> in_types;
  for (int i = 0; i < lv.at_end; ++i) {
    const Node* n = lv.order[i];
    const int t = cache.twin[static_cast<size_t>(i)];
    if (t != i) {  // same op, attributes and input types as node t: same shapes if same inputs
      const Node* tn = lv.order[t];
      bool same = true;
      for (size_t k = 0; k < n->inputs.size() && same; ++k) same = shape[n->inputs[k]->id] == shape[tn->inputs[k]->id];
      if (same) {
        for (size_t k = 0; k < n->outputs.size(); ++k) shape[n->outputs[k]->id] = shape[tn->outputs[k]->id];
        continue;
      }
    }
    const Attrs* b = bound(i);
    const Attrs& attrs = b ? *b : n->attrs;
    // Reuses in_types' shape vectors from node to node rather than allocating new ones.
    in_types.resize(n->inputs.size());
    for (size_t k = 0; k < n->inputs.size(); ++k) {
      const std::vector<int64_t>& s = shape[n->inputs[k]->id];
      in_types[k].dtype = n->inputs[k]->type.dtype;
      in_types[k].shape.assign(s.begin(), s.end());
    }
    std::vector<TensorType> out_types;
    try {
      // The op's shape function itself: arity, attribute kinds and dtypes were validated
      // when the graph was built and are the same for every shape (OpTable::infer repeats
      // those checks, which cost more than the shape function for most ops).
      InferCtx ictx(*n->op, in_types, attrs);
      n->op->infer(ictx);
      out_types = std::move(ictx.outputs());
    } catch (const Error& e) {
      throw Error("runtime", "node %" + std::to_string(n->id) + " (" + n->op_name() +
                                 ") cannot take the shapes these inputs give it: " + e.what());
    }
    UPDRAFT_CHECK(out_types.size() == n->outputs.size(), "runtime",
                  "node %" + std::to_string(n->id) + " (" + n->op_name() + ") has " +
                      std::to_string(n->outputs.size()) + " outputs but its shape function gives " +
                      std::to_string(out_types.size()) + " for these shapes");
    for (size_t k = 0; k < n->outputs.size(); ++k) {
      const Value* out = n->outputs[k];
      UPDRAFT_CHECK(out_types[k].dtype == out->type.dtype, "runtime",
                    "node %" + std::to_string(n->id) + " (" + n->op_name() + ") output " + std::to_string(k) +
                        " is " + dtype_name(out_types[k].dtype) + " for concrete shapes but " +
                        out->type.str() + " in the graph; re-run shape inference (Graph::reinfer)");
      shape[out->id] = shape_values(out_types[k].shape);
    }
  }
}

void Plan::Builder::buffers() {
  // Byte counts are checked, every value's (views too: their copies and strides are computed
  // from the shape) and their sum, which bounds every arena offset: an expand to 2^62
  // elements wrapped to a few bytes and its kernel wrote past them.
  std::vector<size_t> bytes(g.num_values(), 0);
  size_t total_bytes = 0;
  for (size_t id = 0; id < g.num_values(); ++id) {
    size_t b = 0;
    try {
      b = shape_nbytes(shape[id], g.value(id)->type.dtype, "plan");
      total_bytes = checked_add(total_bytes, b, "plan", "arena size");
      UPDRAFT_CHECK(total_bytes <= static_cast<size_t>(INT64_MAX), "plan", "arena size is past 2^63 bytes");
    } catch (const Error& e) {
      throw Error("plan", value_label(g.value(id)) + " is " + dtype_name(g.value(id)->type.dtype) + dims_str(shape[id]) +
                              " for these input shapes: " + e.what() + "; the graph cannot run at this size");
    }
    if (lv.values[id].live()) bytes[id] = b;
  }

  assign = assign_buffers(g, lv, bytes);
  p->num_inplace_ = static_cast<int>(assign.inplace_steps.size());
  requests = assign.requests;

  // Graph inputs that some node reads get packed when a call passes them strided (see the
  // header). Their packed copies are not arena buffers: a training graph reads every
  // parameter and saved activation, and reserving room for a copy of each made its arena as
  // large as its inputs (ViT-B/16's backward: 919 MB, 861 of them for copies no call made).
  std::vector<bool> read_by_node(g.num_values(), false);
  for (const Node* n : lv.order)
    for (const Value* v : n->inputs) read_by_node[v->id] = true;
  // A view of an input counts: the view reads the input's memory with contiguous strides.
  for (const Node* n : lv.order)
    for (const Value* v : n->inputs)
      if (lv.of(v).root != v->id) read_by_node[lv.of(v).root] = true;
  packable.assign(g.inputs().size(), false);
  for (size_t k = 0; k < g.inputs().size(); ++k) packable[k] = read_by_node[g.inputs()[k]->id];
}

void Plan::Builder::kernels() {
  // Kernels (View nodes run none), and their scratch, live only during their own step.
  node_kernels.resize(lv.at_end);
  scratch_request.assign(lv.at_end, -1);
  // The contexts' shape lists move from node to node, so their vectors are reused rather than
  // allocated per node.
  std::vector<std::vector<int64_t>> ctx_in, ctx_out;
  std::vector<const Tensor*> ctx_const;
  auto fill = [&](std::vector<std::vector<int64_t>>& dst, const std::vector<Value*>& vals) {
    dst.resize(vals.size());
    for (size_t k = 0; k < vals.size(); ++k) dst[k].assign(shape[vals[k]->id].begin(), shape[vals[k]->id].end());
  };
  for (int i = 0; i < lv.at_end; ++i) {
    const Node* n = lv.order[i];
    if (n->op->alias) continue;
    fill(ctx_in, n->inputs);
    fill(ctx_out, n->outputs);
    ctx_const.clear();
    for (const Value* v : n->inputs) ctx_const.push_back(v->is_constant() ? &*v->constant : nullptr);
    KernelContext ctx{*n, std::move(ctx_in), std::move(ctx_out), std::move(ctx_const), opts.num_threads, bound(i),
                      opts.kernels};
    ctx.finite_inputs = cache.finite.marks(*n);
    size_t s = 0;
    node_kernels[i] = cache.kernels.get(ctx, Device::cpu, &s);
    ctx_in = std::move(ctx.in_shapes);
    ctx_out = std::move(ctx.out_shapes);
    ctx_const = std::move(ctx.const_inputs);
    if (s) {
      scratch_request[i] = static_cast<int>(requests.size());
      requests.push_back({"scratch step " + std::to_string(i) + " (" + n->op_name() + ")", s, i, i});
    }
  }
}

void Plan::Builder::finite_check() {
  // Scanning pays when it reads fewer bytes than the activation passes it saves: a relu or
  // clamp applied after the primitive reads and writes the whole output once more.
  if (cache.finite.inputs.empty()) return;
  size_t scan = 0, saved = 0;
  for (int k : cache.finite.inputs) scan += shape_nbytes(shape[g.inputs()[static_cast<size_t>(k)]->id], DType::f32, "plan");
  for (int i = 0; i < lv.at_end; ++i)
    if (node_kernels[i] && node_kernels[i]->fuses_when_finite())
      for (const Value* v : lv.order[i]->outputs) saved += 2 * shape_nbytes(shape[v->id], v->type.dtype, "plan");
  if (saved > 0 && scan <= saved) p->finite_inputs_ = cache.finite.inputs;
}

void Plan::Builder::memory_plan() {
  p->memory_ = plan_memory(requests);
  std::string why;
  UPDRAFT_CHECK(plan_is_valid(p->memory_, &why), "plan", "internal error, memory plan overlaps: " + why);
}

void Plan::Builder::slots_and_steps() {
  // Slots. Every alias points at an earlier slot, so one forward pass resolves pointers.
  auto add_slot = [&](Slot s) {
    p->slots_.push_back(std::move(s));
    return static_cast<int>(p->slots_.size()) - 1;
  };
  std::vector<int> slot_of(g.num_values(), -1);
  for (size_t k = 0; k < g.inputs().size(); ++k) {
    const Value* in = g.inputs()[k];
    slot_of[in->id] = add_slot({SlotKind::Input, static_cast<int>(k), 0, nullptr, in->type.dtype, shape[in->id], in});
    p->input_slot_.push_back(slot_of[in->id]);
    p->packable_.push_back(packable[k]);
  }
  for (const Value* c : cache.constants) {
    if (lv.of(c).last == ValueLife::kNever || lv.of(c).last < 0) continue;  // unread constant
    slot_of[c->id] = add_slot({SlotKind::Constant, -1, 0, c->constant->data(), c->type.dtype, shape[c->id], c});
  }
  const auto& outs = g.outputs();
  std::vector<bool> direct(outs.size(), false);  // output k is written by its producer
  for (size_t k = 0; k < outs.size(); ++k) {
    p->output_slot_.push_back(add_slot({SlotKind::Output, static_cast<int>(k), 0, nullptr, outs[k]->type.dtype,
                                        shape[outs[k]->id], nullptr}));
    p->output_shapes_.push_back(shape[outs[k]->id]);
  }
  for (int i = 0; i < lv.at_end; ++i) {
    const Node* n = lv.order[i];
    for (size_t k = 0; k < n->outputs.size(); ++k) {
      const Value* v = n->outputs[k];
      const ValueLife& life = lv.of(v);
      if (life.root != v->id) {
        slot_of[v->id] = add_slot({SlotKind::Alias, slot_of[n->inputs[0]->id], 0, nullptr, v->type.dtype,
                                   shape[v->id], v});
        continue;
      }
      int b = assign.buffer_of_value[v->id];
      if (b >= 0) {
        slot_of[v->id] = add_slot({SlotKind::Arena, -1, p->memory_.buffers[b].offset, nullptr, v->type.dtype,
                                   shape[v->id], v});
        continue;
      }
      // Not in the arena: a graph output; its first occurrence is written in place. Or the root
      // of one (assign_buffers' output_host): written into that output's memory, which the
      // output, its view, then reads with no copy.
      for (size_t o = 0; o < outs.size(); ++o)
        if (outs[o] == v) {
          slot_of[v->id] = p->output_slot_[o];
          direct[o] = true;
          break;
        }
      if (const int o = assign.output_host[v->id]; slot_of[v->id] < 0 && o >= 0) {
        slot_of[v->id] = add_slot({SlotKind::Alias, p->output_slot_[o], 0, nullptr, v->type.dtype, shape[v->id], v});
        direct[o] = true;
      }
      UPDRAFT_CHECK(slot_of[v->id] >= 0, "plan", "internal error: " + value_label(v) + " has no buffer");
    }
  }

  // Steps: kernels in graph order, then copies for outputs not written in place.
  size_t nviews = 0;
  for (int i = 0; i < lv.at_end; ++i) {
    if (!node_kernels[i]) continue;
    const Node* n = lv.order[i];
    Step st;
    st.time = i;
    st.node = n;
    st.kernel = std::move(node_kernels[i]);
    for (const Value* v : n->inputs) st.in_slots.push_back(slot_of[v->id]);
    for (const Value* v : n->outputs) st.out_slots.push_back(slot_of[v->id]);
    if (scratch_request[i] >= 0) {
      st.scratch_offset = p->memory_.buffers[scratch_request[i]].offset;
      st.scratch_bytes = p->memory_.buffers[scratch_request[i]].bytes;
    }
    st.view_base = nviews;
    nviews += st.in_slots.size() + st.out_slots.size();
    p->steps_->push_back(std::move(st));
  }
  for (size_t k = 0; k < outs.size(); ++k) {
    if (direct[k]) continue;
    Step st;
    st.kind = Step::Kind::CopyOut;
    st.time = lv.at_end;
    st.in_slots = {slot_of[outs[k]->id]};
    st.out_slots = {p->output_slot_[k]};
    st.view_base = nviews;
    nviews += 2;
    p->steps_->push_back(std::move(st));
  }
  p->num_views_ = nviews;
  p->index_call_positions();
}

std::shared_ptr<Plan> Plan::build(const Graph& g, const std::vector<std::vector<int64_t>>& input_shapes,
                                  const CompileOptions& opts, CrossShapeCache* cache) {
  PhaseTimer timer;
  std::optional<CrossShapeCache> own;
  if (!cache) cache = &own.emplace(g, 1);
  Builder b(g, input_shapes, opts, *cache);
  b.shapes();
  timer.mark("shapes");
  b.buffers();
  timer.mark("buffers");
  b.kernels();
  b.finite_check();
  timer.mark("kernels");
  b.memory_plan();
  timer.mark("memory plan");
  b.slots_and_steps();
  if (opts.debug >= 1) {
    timer.mark("slots+steps");
    std::fprintf(stderr, "[updraft] plan build: %s\n", timer.str().c_str());
  }
  return std::move(b.p);
}
namespace {

// The symbolic shape a slot takes its sizes from: its value's type (a graph output slot: the
// output's). Constants are static.
const Shape& slot_type_shape(const Graph& g, const Slot& sl) {
  return sl.kind == SlotKind::Output ? g.outputs()[static_cast<size_t>(sl.index)]->type.shape : sl.value->type.shape;
}

// A node's kernel context at the sizes `b` gives its values' types.
KernelContext context_at(const Node& n, const SymBindings& b, const CompileOptions& opts) {
  std::vector<std::vector<int64_t>> in, out;
  std::vector<const Tensor*> consts;
  for (const Value* v : n.inputs) {
    in.push_back(shape_eval(v->type.shape, b));
    consts.push_back(v->is_constant() ? &*v->constant : nullptr);
  }
  for (const Value* v : n.outputs) out.push_back(shape_eval(v->type.shape, b));
  return KernelContext{n, std::move(in), std::move(out), std::move(consts), opts.num_threads, nullptr, opts.kernels};
}

std::string node_label(const Node& n) { return "node %" + std::to_string(n.id) + " (" + n.op_name() + ")"; }

}  // namespace

std::vector<SizeRange> Plan::bucket_of(const SymBindings& b) {
  std::vector<SizeRange> out;
  for (const auto& [sym, v] : b) {
    if (v <= 0) return {};
    int64_t hi = 8;
    while (hi < v) hi *= 2;
    out.push_back({sym, hi == 8 ? 1 : hi / 2 + 1, hi});
  }
  return out;
}

bool Plan::covers(const SymBindings& b) const {
  if (ranges_.empty() || b.size() != ranges_.size()) return false;
  size_t i = 0;
  for (const auto& [sym, v] : b) {  // both in symbol order (SymBindings is a std::map)
    const SizeRange& r = ranges_[i++];
    if (r.sym != sym || v < r.lo || v > r.hi) return false;
  }
  return true;
}

bool Plan::find_moving_parts(const Graph& g, std::string* why) {
  // Slots whose shapes move with a symbol: their types must give exactly this plan's shapes.
  sym_slots_.clear();
  sym_steps_.clear();
  sym_views_.clear();
  std::vector<bool> sym_slot(slots_.size(), false);
  for (size_t s = 0; s < slots_.size(); ++s) {
    const Slot& sl = slots_[s];
    if (sl.kind == SlotKind::Constant) continue;
    const Shape& ty = slot_type_shape(g, sl);
    if (shape_is_static(ty)) continue;
    std::string label = sl.value ? value_label(sl.value) : "output " + std::to_string(sl.index);
    try {
      if (shape_eval(ty, bindings_) != sl.shape) {
        *why = label + " is " + shape_str(ty) + " in the graph but " + dims_str(sl.shape) + " in the plan";
        return false;
      }
    } catch (const Error& e) {
      *why = label + ": " + e.what();
      return false;
    }
    sym_slot[s] = true;
    sym_slots_.push_back({static_cast<int>(s), &ty});
  }
  for (size_t i = 0; i < steps_->size(); ++i) {
    const Step& st = (*steps_)[i];
    size_t v = st.view_base;  // make_state's order: in views, then out views
    for (const std::vector<int>* slots : {&st.in_slots, &st.out_slots})
      for (int sl : *slots) {
        if (sym_slot[static_cast<size_t>(sl)]) sym_views_.push_back({v, sl});
        ++v;
      }
    if (st.kind != Step::Kind::Kernel) continue;
    bool moves = false;
    for (int sl : st.in_slots) moves = moves || sym_slot[static_cast<size_t>(sl)];
    for (int sl : st.out_slots) moves = moves || sym_slot[static_cast<size_t>(sl)];
    if (moves) sym_steps_.push_back(i);
  }
  return true;
}

std::string Plan::range_refusal(const Graph& g, const CompileOptions& opts, const CrossShapeCache& cache) {
  std::string why;
  if (!find_moving_parts(g, &why)) return why;
  std::vector<SizeRange> ranges = bucket_of(bindings_);
  if (ranges.empty()) return "a symbolic size is 0";
  SymBindings lo, hi;
  for (const SizeRange& r : ranges) {
    lo[r.sym] = r.lo;
    hi[r.sym] = r.hi;
  }
  // Every kernel step, moving or not: a kernel on static shapes can still have bound a
  // symbolic attribute (a slice of a fixed table at a size-dependent offset).
  for (const Step& st : *steps_)
    if (st.kind == Step::Kind::Kernel && cache.symbolic_attrs[static_cast<size_t>(st.time)] &&
        st.kernel->reads_attrs())
      return node_label(*st.node) + " has attributes that depend on a size, and its kernel " + st.kernel->name() +
             " reads them";
  for (size_t i : sym_steps_) {
    const Step& st = (*steps_)[i];
    try {
      if (!st.kernel->runs_shapes_of(context_at(*st.node, lo, opts)) ||
          !st.kernel->runs_shapes_of(context_at(*st.node, hi, opts)))
        return node_label(*st.node) + ": its kernel " + st.kernel->name() + " is built for one size";
    } catch (const Error& e) {
      return node_label(*st.node) + ": " + e.what();
    }
  }
  sym_slots_.clear();  // only templates keep them
  sym_steps_.clear();
  sym_views_.clear();
  return "";
}

std::shared_ptr<Plan> Plan::build_range(const Graph& g, const std::vector<std::vector<int64_t>>& input_shapes,
                                        const CompileOptions& opts, CrossShapeCache& cache, std::string* why) {
  for (const Value* in : g.inputs())
    UPDRAFT_CHECK(in->binds.empty(), "plan", "internal error: build_range() on a graph with size inputs");
  std::vector<SizeRange> ranges = bucket_of(bind_input_shapes(g, input_shapes, "runtime"));
  UPDRAFT_CHECK(!ranges.empty(), "plan", "internal error: build_range() for sizes with no bucket");
  SymBindings hi;
  for (const SizeRange& r : ranges) hi[r.sym] = r.hi;
  std::vector<std::vector<int64_t>> top;
  for (const Value* in : g.inputs()) top.push_back(shape_eval(in->type.shape, hi));
  std::shared_ptr<Plan> t;
  try {
    t = build(g, top, opts, &cache);
  } catch (const Error& e) {
    *why = std::string("the plan for the top of the bucket failed: ") + e.what();
    return nullptr;
  }
  if (!t->find_moving_parts(g, why)) return nullptr;
  t->ranges_ = std::move(ranges);
  return t;
}

std::shared_ptr<Plan> Plan::instantiate(const std::vector<std::vector<int64_t>>& input_shapes, const SymBindings& b,
                                        const CompileOptions& opts, std::string* why) const {
  UPDRAFT_CHECK(covers(b), "plan", "internal error: instantiate() outside the template's ranges");
  std::shared_ptr<Plan> p(new Plan());
  p->input_shapes_ = input_shapes;
  p->bindings_ = b;
  p->slots_ = slots_;
  p->steps_ = steps_;  // shared, not copied
  p->template_ = shared_from_this();
  p->input_slot_ = input_slot_;
  p->output_slot_ = output_slot_;
  p->packable_ = packable_;
  p->finite_inputs_ = finite_inputs_;
  p->input_last_steps_ = input_last_steps_;  // the same schedule: the same call positions
  p->output_first_steps_ = output_first_steps_;
  p->output_aliases_ = output_aliases_;
  p->size_input_ = size_input_;
  p->memory_ = memory_;
  p->num_inplace_ = num_inplace_;
  p->num_threads_ = num_threads_;
  p->num_views_ = num_views_;
  for (const auto& [s, ty] : sym_slots_) {
    Slot& sl = p->slots_[static_cast<size_t>(s)];
    std::vector<int64_t> shape = shape_eval(*ty, b);
    if (sl.kind == SlotKind::Arena &&
        shape_nbytes(shape, sl.dtype, "plan") > shape_nbytes(slots_[static_cast<size_t>(s)].shape, sl.dtype, "plan")) {
      *why = (sl.value ? value_label(sl.value) : "a buffer") + " outgrows the template's buffer";
      return nullptr;
    }
    sl.shape = std::move(shape);
  }
  for (size_t i : sym_steps_) {
    const Step& st = (*steps_)[i];
    KernelContext ctx = context_at(*st.node, b, opts);
    if (!st.kernel->runs_shapes_of(ctx) || st.kernel->scratch_bytes_for(ctx) > st.scratch_bytes) {
      *why = node_label(*st.node) + ": its kernel does not run these sizes in the template's scratch";
      return nullptr;
    }
  }
  for (int s : output_slot_) p->output_shapes_.push_back(p->slots_[static_cast<size_t>(s)].shape);
  for (const SizeRange& r : ranges_)
    p->instance_of_ += (p->instance_of_.empty() ? "" : ", ") + r.sym + " in [" + std::to_string(r.lo) + ", " +
                       std::to_string(r.hi) + "]";
  return p;
}

int64_t runtime_clock_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

const std::string& StepEvent::op() const {
  static const std::string copy_out = "copy-out";
  return step->kind == Step::Kind::Kernel ? step->node->op_name() : copy_out;
}

std::string StepEvent::kernel() const {
  return step->kind == Step::Kind::Kernel ? step->kernel->name() : "strided_copy";
}

bool Plan::matches(const std::vector<TensorView>& inputs) const {
  if (inputs.size() != input_shapes_.size()) return false;
  for (size_t k = 0; k < inputs.size(); ++k) {
    const auto& want = input_shapes_[k];
    if (size_input_[k]) {  // the value, not the shape, selects the plan
      if (inputs[k].ndim != 0 || inputs[k].dtype != DType::i64 || inputs[k].data == nullptr ||
          *static_cast<const int64_t*>(inputs[k].data) != want[0])
        return false;
      continue;
    }
    if (inputs[k].ndim != static_cast<int>(want.size())) return false;
    for (int d = 0; d < inputs[k].ndim; ++d)
      if (inputs[k].sizes[d] != want[d]) return false;
  }
  return true;
}

// By step, in order: the `kind` call positions (inputs or outputs) whose memory it touches.
template <typename F>
static void for_each_touch(const std::vector<Step>& steps, const std::vector<Slot>& slots, SlotKind kind, F&& f) {
  for (size_t i = 0; i < steps.size(); ++i)
    for (const std::vector<int>* in_or_out : {&steps[i].in_slots, &steps[i].out_slots})
      for (int s : *in_or_out) {
        while (slots[s].kind == SlotKind::Alias) s = slots[s].index;
        if (slots[s].kind == kind) f(static_cast<int>(i), slots[s].index);
      }
}

void Plan::index_call_positions() {
  input_last_steps_.assign(input_slot_.size(), -1);
  for_each_touch(*steps_, slots_, SlotKind::Input, [&](int i, int k) { input_last_steps_[k] = i; });
  output_first_steps_.assign(output_slot_.size(), -1);
  for_each_touch(*steps_, slots_, SlotKind::Output, [&](int i, int k) {
    if (output_first_steps_[k] < 0) output_first_steps_[k] = i;
  });
  output_aliases_.assign(output_slot_.size(), {});
  for (size_t s = 0; s < slots_.size(); ++s) {
    if (slots_[s].kind != SlotKind::Alias) continue;
    size_t r = s;
    while (slots_[r].kind == SlotKind::Alias) r = static_cast<size_t>(slots_[r].index);
    if (slots_[r].kind == SlotKind::Output) output_aliases_[static_cast<size_t>(slots_[r].index)].push_back(static_cast<int>(s));
  }
}

bool Plan::inputs_finite(const CallState& st) const {
  for (int k : finite_inputs_) {
    const TensorView& v = st.inputs[static_cast<size_t>(k)];
    if (!v.is_contiguous() || !cpu::all_finite(v.ptr<const float>(), v.numel(), num_threads_)) return false;
  }
  return true;
}

std::unique_ptr<CallState> Plan::make_state() const {
  auto st = std::make_unique<CallState>();
  st->arena = aligned_alloc_shared(memory_.arena_bytes);
  st->ptrs.assign(slots_.size(), nullptr);
  st->views.resize(num_views_);
  for (const Step& s : *steps_) {
    size_t v = s.view_base;
    for (int slot : s.in_slots) {
      const Slot& sl = slots_[slot];
      st->views[v++] = contiguous_like(nullptr, sl.dtype, static_cast<int>(sl.shape.size()), sl.shape.data());
    }
    for (int slot : s.out_slots) {
      const Slot& sl = slots_[slot];
      st->views[v++] = contiguous_like(nullptr, sl.dtype, static_cast<int>(sl.shape.size()), sl.shape.data());
    }
  }
  st->inputs.resize(input_slot_.size());
  st->shaped_for = uid_;
  return st;
}

uint64_t Plan::new_uid() {
  static std::atomic<uint64_t> next{1};
  return next.fetch_add(1, std::memory_order_relaxed);
}

void Plan::reshape(CallState& st) const {
  for (const auto& [v, slot] : pool_owner().sym_views_) {
    const Slot& sl = slots_[static_cast<size_t>(slot)];
    st.views[v] = contiguous_like(nullptr, sl.dtype, static_cast<int>(sl.shape.size()), sl.shape.data());
  }
  st.shaped_for = uid_;
}

std::unique_ptr<CallState> Plan::acquire() const {
  const Plan& owner = pool_owner();
  std::unique_ptr<CallState> st;
  {
    std::lock_guard<std::mutex> lock(owner.pool_mu_);
    if (!owner.pool_.empty()) {
      st = std::move(owner.pool_.back());
      owner.pool_.pop_back();
    }
  }
  if (!st) return make_state();  // first use (or more concurrent callers than ever before)
  // The template's arena holds every instance's buffers (instantiate checked them), and the
  // slots that do not move have the same views in every instance.
  if (st->shaped_for != uid_) reshape(*st);
  return st;
}

void Plan::release(std::unique_ptr<CallState> st) const {
  const Plan& owner = pool_owner();
  std::lock_guard<std::mutex> lock(owner.pool_mu_);
  owner.pool_.push_back(std::move(st));  // capacity only grows, so steady state does not allocate
}

namespace {

// A caller's output of 32 MB or more is, as a rule, memory mapped for this call: glibc's malloc
// (under torch.empty) maps every block from its largest mmap threshold up and unmaps it when
// freed, so each call faults it in 4 KB at a time (a training step's embedding gradient, an LM's
// logits). Advised huge pages, 512 times fewer faults: filling GPT-2's 154 MB embedding
// gradient went from ~43 to ~8.5 ms (docs/BENCHMARKS.md). Smaller outputs come from the heap,
// already faulted in, where an madvise would only split the heap's mapping.
constexpr size_t kFreshOutputBytes = size_t{32} << 20;

void advise_fresh_output(void* p, size_t bytes) {
  if (p != nullptr && bytes >= kFreshOutputBytes) advise_huge_pages(p, bytes);
}

}  // namespace

void Plan::execute(CallState& st, const std::vector<TensorView>& inputs, const std::vector<TensorView>& outputs,
                   StepObserver* observer, OutputSource* source) const {
  char* base = static_cast<char*>(st.arena.get());
  // Inputs: read in place when contiguous; otherwise packed first, so every kernel (and every
  // view of the input) sees contiguous memory. The packed copies share one buffer of the
  // call's state, grown to what this call's strided inputs need.
  auto padded = [](const TensorView& v) { return (v.nbytes() + kArenaAlign - 1) / kArenaAlign * kArenaAlign; };
  size_t pack_bytes = 0;
  for (size_t k = 0; k < inputs.size(); ++k)
    if (packable_[k] && !inputs[k].is_contiguous()) pack_bytes += padded(inputs[k]);
  if (pack_bytes > st.pack_bytes) {
    st.pack = aligned_alloc_shared(pack_bytes);
    st.pack_bytes = pack_bytes;
  }
  char* pack = static_cast<char*>(st.pack.get());
  for (size_t k = 0; k < inputs.size(); ++k) {
    if (packable_[k] && !inputs[k].is_contiguous()) {
      TensorView packed = contiguous_like(pack, inputs[k].dtype, inputs[k].ndim, inputs[k].sizes);
      pack += padded(inputs[k]);
      cpu::copy_strided(inputs[k], packed, num_threads_);
      st.inputs[k] = packed;
    } else {
      st.inputs[k] = inputs[k];
    }
  }
  for (size_t s = 0; s < slots_.size(); ++s) {
    const Slot& sl = slots_[s];
    switch (sl.kind) {
      case SlotKind::Input: st.ptrs[s] = st.inputs[sl.index].data; break;
      case SlotKind::Output:
        st.ptrs[s] = outputs[sl.index].data;
        advise_fresh_output(st.ptrs[s], outputs[sl.index].nbytes());
        break;
      case SlotKind::Constant: st.ptrs[s] = sl.constant; break;
      case SlotKind::Arena: st.ptrs[s] = base + sl.offset; break;
      case SlotKind::Alias: st.ptrs[s] = st.ptrs[sl.index]; break;
    }
  }
  // Kernels built with KernelContext::finite_inputs take their fused form on this call only
  // when the inputs they depend on are finite (runtime/finite_inputs.h).
  FiniteCall finite(!finite_inputs_.empty() && inputs_finite(st));
  // Kernels that evaluate symbolic attributes per call read this plan's binding (a range
  // plan's instance carries its own).
  BoundCall bound(&bindings_);
  auto bind_step = [&](const Step& step) {
    TensorView* v = st.views.data() + step.view_base;
    const size_t nin = step.in_slots.size();
    for (size_t j = 0; j < nin; ++j) v[j].data = st.ptrs[step.in_slots[j]];
    for (size_t j = 0; j < step.out_slots.size(); ++j) v[nin + j].data = st.ptrs[step.out_slots[j]];
    return v;
  };
  auto run_step = [&](const Step& step, TensorView* v) {
    const size_t nin = step.in_slots.size();
    if (step.kind == Step::Kind::Kernel) {
      step.kernel->run(v, v + nin, base + step.scratch_offset);
    } else {
      // An input returned as an output may still be strided: copy from the caller's view.
      const Slot& src = slots_[step.in_slots[0]];
      cpu::copy_strided(src.kind == SlotKind::Input ? st.inputs[src.index] : v[0], v[1], num_threads_);
    }
  };
  // Outputs without memory come from the source just before their first step (OutputSource),
  // in step order; each supply re-points that output's aliases (in slot order: an alias always
  // follows the slot it aliases).
  std::vector<std::pair<int, int>> due;  // (step, output)
  if (source) {
    for (size_t k = 0; k < outputs.size(); ++k)
      if (outputs[k].data == nullptr) due.emplace_back(std::max(output_first_steps_[k], 0), static_cast<int>(k));
    std::sort(due.begin(), due.end());
  }
  size_t next_due = 0;
  auto supply = [&](size_t i) {
    for (; next_due < due.size() && static_cast<size_t>(due[next_due].first) <= i; ++next_due) {
      const int k = due[next_due].second, slot = output_slot_[static_cast<size_t>(k)];
      const Slot& sl = slots_[static_cast<size_t>(slot)];
      const size_t bytes = shape_nbytes(sl.shape, sl.dtype, "plan");
      st.ptrs[slot] = source->output(static_cast<size_t>(k), bytes);
      advise_fresh_output(st.ptrs[slot], bytes);
      for (int a : output_aliases_[static_cast<size_t>(k)]) st.ptrs[a] = st.ptrs[slots_[a].index];
    }
  };
  const bool profiling = profiling_.load(std::memory_order_relaxed);
  if (!observer && !profiling) {
    for (size_t i = 0; i < steps_->size(); ++i) {
      supply(i);
      run_step((*steps_)[i], bind_step((*steps_)[i]));
    }
    supply(steps_->size());  // a call of no steps
    return;
  }
  // Timed: one pair of clock reads per step feeds both the profiling counters and the observer.
  using clock = std::chrono::steady_clock;
  StepEvent ev;
  TensorView copy_views[2];  // an output copy's event views (the caller's view of a strided input)
  for (size_t i = 0; i < steps_->size(); ++i) {
    const Step& step = (*steps_)[i];
    supply(i);
    TensorView* v = bind_step(step);
    if (observer) {
      ev = StepEvent{};
      ev.index = i;
      ev.step = &step;
      ev.num_in = step.in_slots.size();
      ev.num_out = step.out_slots.size();
      ev.in = v;
      ev.out = v + ev.num_in;
      if (step.kind == Step::Kind::CopyOut && slots_[step.in_slots[0]].kind == SlotKind::Input) {
        copy_views[0] = st.inputs[slots_[step.in_slots[0]].index];
        copy_views[1] = v[1];
        ev.in = copy_views;
        ev.out = copy_views + 1;
      }
      observer->before(*this, ev);
    }
    const auto t0 = clock::now();
    run_step(step, v);
    const auto t1 = clock::now();
    if (profiling) {
      step_ns_[i].fetch_add(std::chrono::duration_cast<std::chrono::nanoseconds>(t1 - t0).count(),
                            std::memory_order_relaxed);
      step_calls_[i].fetch_add(1, std::memory_order_relaxed);
    }
    if (observer) {
      ev.start_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(t0.time_since_epoch()).count();
      ev.end_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(t1.time_since_epoch()).count();
      observer->after(*this, ev);
    }
  }
  supply(steps_->size());
}


void Plan::set_profiling(bool on) const {
  std::lock_guard<std::mutex> lock(pool_mu_);
  if (on && !step_ns_) {
    step_ns_ = std::make_unique<std::atomic<int64_t>[]>(steps_->size());
    step_calls_ = std::make_unique<std::atomic<int64_t>[]>(steps_->size());
    for (size_t i = 0; i < steps_->size(); ++i) step_ns_[i] = step_calls_[i] = 0;
  }
  profiling_.store(on, std::memory_order_release);
}

std::vector<StepTime> Plan::step_times() const {
  std::lock_guard<std::mutex> lock(pool_mu_);
  std::vector<StepTime> r;
  for (size_t i = 0; i < steps_->size(); ++i) {
    const Step& st = (*steps_)[i];
    StepTime t;
    t.step = static_cast<int>(i);
    t.op = st.kind == Step::Kind::Kernel ? st.node->op_name() : "copy-out";
    t.kernel = st.kind == Step::Kind::Kernel ? st.kernel->name() : "strided_copy";
    if (step_ns_) {
      t.calls = step_calls_[i].load(std::memory_order_relaxed);
      t.total_ns = step_ns_[i].load(std::memory_order_relaxed);
    }
    r.push_back(std::move(t));
  }
  return r;
}

std::string Plan::str() const {
  std::string s = "plan for inputs";
  for (const auto& sh : input_shapes_) s += " " + dims_str(sh);
  for (const auto& [name, val] : bindings_) s += "  " + name + "=" + std::to_string(val);
  if (!instance_of_.empty())
    s += "\n(no build: an instance of the range plan for " + instance_of_ + ", memory planned for the top)";
  s += "\nslots:\n";
  static const char* kinds[] = {"input", "output", "const", "arena", "alias"};
  char line[512];
  for (size_t i = 0; i < slots_.size(); ++i) {
    const Slot& sl = slots_[i];
    std::string label = sl.kind == SlotKind::Input    ? "input " + std::to_string(sl.index) + " " + value_label(sl.value)
                        : sl.kind == SlotKind::Output ? "output " + std::to_string(sl.index)
                        : sl.kind == SlotKind::Constant ? "const " + value_label(sl.value)
                                                        : value_label(sl.value);
    std::string where = sl.kind == SlotKind::Arena   ? "@" + std::to_string(sl.offset)
                        : sl.kind == SlotKind::Alias ? "= #" + std::to_string(sl.index)
                                                     : "";
    std::snprintf(line, sizeof line, "  #%-3zu %-6s %-4s%-18s %-10s %s\n", i, kinds[static_cast<int>(sl.kind)],
                  dtype_name(sl.dtype), dims_str(sl.shape).c_str(), where.c_str(), label.c_str());
    s += line;
  }
  s += "steps (t: the step in the memory plan's lifetimes; views run no kernel):\n";
  for (size_t i = 0; i < steps_->size(); ++i) {
    const Step& st = (*steps_)[i];
    std::string ins, outs;
    for (int x : st.in_slots) ins += (ins.empty() ? "#" : ", #") + std::to_string(x);
    for (int x : st.out_slots) outs += (outs.empty() ? "#" : ", #") + std::to_string(x);
    std::string op = st.kind == Step::Kind::Kernel ? st.node->op_name() : "copy-out";
    std::string kname = st.kind == Step::Kind::Kernel ? st.kernel->name() : "strided_copy";
    std::snprintf(line, sizeof line, "  %-3zu t=%-3d %-16s %-28s (%s) -> (%s)", i, st.time, op.c_str(), kname.c_str(),
                  ins.c_str(), outs.c_str());
    s += line;
    if (st.scratch_bytes)
      s += "  scratch " + std::to_string(st.scratch_bytes) + " B @" + std::to_string(st.scratch_offset);
    s += "\n";
  }
  s += "memory (" + std::to_string(num_inplace_) + " in-place):\n" + memory_.str();
  return s;
}

}  // namespace updraft
