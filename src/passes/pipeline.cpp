// The compile pipeline, read top to bottom. Each pass is a plain function `bool pass(Graph&)`
// (true when it changed the graph); this file only decides the order and the options.
//
// It also holds the bisect switches (CompileOptions::disable_passes, fault_pass): a pass can be
// skipped by name, and, for testing updraft.debug.bisect only, made to corrupt its own result.
#include "passes/pipeline.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <cstdio>
#include <functional>
#include <map>
#include <set>
#include <string>

#include "core/error.h"
#include "core/hash.h"
#include "ir/text.h"
#include "passes/block_conv_layout.h"
#include "passes/canonicalize.h"
#include "passes/constant_fold.h"
#include "passes/cse.h"
#include "passes/dce.h"
#include "passes/fold_conv_bn.h"
#include "passes/fold_dequant_linear.h"
#include "passes/fold_gqa_sdpa.h"
#include "passes/fold_permute_sdpa.h"
#include "passes/fold_pad_conv.h"
#include "passes/fold_transpose_matmul.h"
#include "passes/fuse_elementwise.h"
#include "passes/fuse_epilogue.h"
#include "passes/match_gelu.h"
#include "passes/quantize_activations.h"
#include "passes/quantize_weights.h"
#include "passes/verify.h"

namespace updraft {

namespace {

#ifdef NDEBUG
constexpr bool kDebugBuild = false;
#else
constexpr bool kDebugBuild = true;
#endif

// One entry of the pipeline: its name, whether the options ask for it, and the pass.
struct Step {
  const char* name;
  bool (*wanted)(const CompileOptions&);
  bool (*run)(Graph&, const CompileOptions&);
};

bool always(const CompileOptions&) { return true; }
bool if_fuse(const CompileOptions& o) { return o.fuse; }
bool if_fold(const CompileOptions& o) { return o.fold_constants; }
bool if_block(const CompileOptions& o) { return keeps_conv_layout(o.channel_block); }
bool if_low_weights(const CompileOptions& o) { return o.weight_dtype != WeightDType::f32; }
bool if_int8_activations(const CompileOptions& o) { return o.activation_dtype == ActivationDType::int8; }
template <bool (*Pass)(Graph&)>
bool plain(Graph& g, const CompileOptions&) {
  return Pass(g);
}

// The pipeline. pipeline_pass_names() and run_pipeline both read this list.
const std::vector<Step>& steps() {
  static const std::vector<Step> kSteps = {
      {"verify", always, plain<verify>},              // the front end built a well-formed graph
      {"canonicalize", always, plain<canonicalize>},  // drop identity reshapes/casts, merge reshape chains
      {"match_gelu", if_fuse, plain<match_gelu>},     // GELU's tanh formula in elementwise ops -> gelu
      {"dce", always, plain<dce>},                    // remove what canonicalize left unused
      {"cse", always, plain<cse>},                    // one node per (op, inputs, attributes)
      // linear over an int8/bf16 constant widened in the graph -> linear_wq, before folding widens it
      {"fold_dequant_linear", if_fuse, plain<fold_dequant_linear>},
      {"constant_fold", if_fold, plain<constant_fold>},  // evaluate all-constant nodes with our own kernels
      // again: what folding made an identity (a where on a folded condition: an optimizer's lerp)
      {"canonicalize", if_fold, plain<canonicalize>},
      {"fold_conv_bn", if_fuse, plain<fold_conv_bn>},    // batch_norm after conv2d -> new conv weights
      {"fold_pad_conv", if_fuse, plain<fold_pad_conv>},  // zero pad before conv2d -> the conv's padding
      {"fold_gqa_sdpa", if_fuse, plain<fold_gqa_sdpa>},  // sdpa reads grouped k/v, not their repeat
      {"fold_permute_sdpa", if_fuse, plain<fold_permute_sdpa>},  // sdpa reads/writes [.., S, H, E] in place
      {"fold_transpose_matmul", if_fuse, plain<fold_transpose_matmul>},  // matmul reads x^T in place
      {"fuse_epilogue", if_fuse, plain<fuse_epilogue>},  // bias / residual / activation into conv, linear, matmul
      // large linear weights -> i8 or int4 + scales, or bf16 (weight_dtype), after fusion gave them epilogues
      {"quantize_weights", if_low_weights,
       [](Graph& g, const CompileOptions& o) { return quantize_weights(g, o.weight_dtype); }},
      // linears over int8 weights multiply int8 rows of x (activation_dtype)
      {"quantize_activations", if_int8_activations, plain<quantize_activations>},
      {"fuse_elementwise", if_fuse, plain<fuse_elementwise>},  // elementwise chains -> one pass over memory
      // conv chains in nChw{B}c or NHWC, channel_block reorders at their edges
      {"block_conv_layout", if_block,
       [](Graph& g, const CompileOptions& o) { return block_conv_layout(g, o.channel_block); }},
      {"dce", always, plain<dce>},        // drop nodes the rewrites orphaned
      {"verify", always, plain<verify>},  // what the planner receives is well-formed
  };
  return kSteps;
}

bool is_float(DType t) { return t == DType::f32 || t == DType::f64; }

void bump_element0(Tensor& t) {
  if (t.dtype() == DType::f32) static_cast<float*>(t.data())[0] += 1.0f;
  else static_cast<double*>(t.data())[0] += 1.0;
}

// TEST-ONLY (CompileOptions::fault_pass): corrupts what the pass that just ran produced, so
// that the graph computes other numbers. Values with ids >= first_new are the pass's own. In
// order of preference: a new f32/f64 constant (a folded weight) gets 1 added to element 0, in
// a copy (constants may share memory with the caller's tensors); a new f32/f64 node output
// (a fused node) gets 1 added by an inserted add (at element 0, or, when some dims are
// symbolic, at the first element of every row over them); else the graph's first f32/f64
// output does. A pass that only removes nodes (dce, cse) has no value of its own, so its
// fault shows at the output.
void inject_pass_fault(Graph& g, size_t first_new) {
  Value* target = nullptr;
  for (size_t id = first_new; id < g.num_values() && !target; ++id) {
    Value* v = g.value(static_cast<int>(id));
    if (!is_float(v->type.dtype) || g.use_count(v) == 0) continue;
    if (v->is_constant()) {
      if (v->constant->numel() == 0) continue;
      Tensor copy(v->constant->dtype(), v->constant->shape());
      std::memcpy(copy.data(), v->constant->data(), v->constant->nbytes());
      bump_element0(copy);
      v->constant = std::move(copy);
      return;
    }
    if (v->producer) target = v;
  }
  if (!target)
    for (Value* v : g.outputs())
      if (is_float(v->type.dtype) && !v->is_input) {
        target = v;
        break;
      }
  if (!target) return;
  // The delta has the target's trailing static dims and 1 for the others, broadcast by the add:
  // the whole shape when static (only element 0 changes), else the same offset in every row (a
  // uniform shift could vanish in a normalisation).
  std::vector<int64_t> shape;
  bool leading = false;
  for (auto d = target->type.shape.rbegin(); d != target->type.shape.rend(); ++d) {
    leading = leading || !d->is_static();
    shape.insert(shape.begin(), leading ? 1 : d->value());
  }
  Tensor delta(target->type.dtype, shape);  // zero-filled
  if (delta.numel() == 0) return;
  bump_element0(delta);
  Value* c = g.add_constant(target->name + "_fault", std::move(delta));
  // Right after the producer (a graph input's: first), so every user reads the corrupted value.
  std::vector<Node*> order = g.nodes();
  auto it = target->producer ? std::find(order.begin(), order.end(), target->producer) : order.begin();
  if (it != order.end() && target->producer) ++it;
  g.set_insert_point(it != order.end() ? *it : nullptr);
  Node* add = g.add_node("add", {target, c});
  g.set_insert_point(nullptr);
  g.replace_all_uses(target, add->output(0));
  add->inputs[0] = target;
}

// Runs one pass, times it and records it; re-verifies after it in debug builds or when
// opts.debug > 0, so a broken invariant is blamed on the pass that broke it.
class PassRunner {
 public:
  PassRunner(Graph& g, const CompileOptions& opts) : g_(g), opts_(opts) {}

  void operator()(const Step& step) {
    const std::string name = step.name;
    PassRecord r;
    r.name = name;
    if (std::find(opts_.disable_passes.begin(), opts_.disable_passes.end(), name) != opts_.disable_passes.end()) {
      UPDRAFT_CHECK(!pass_is_mandatory(name), "passes",
                    "pass '" + name + "' is mandatory and cannot be disabled; remove it from disable_passes");
      r.skipped = true;
      records_.push_back(std::move(r));
      return;
    }
    const size_t first_new = g_.num_values();
    auto t0 = std::chrono::steady_clock::now();
    r.changed = step.run(g_, opts_);
    r.ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (r.changed && !fault_done_ && opts_.fault_pass == name) {
      inject_pass_fault(g_, first_new);
      fault_done_ = true;
    }
    if (opts_.record_ir) r.ir_after = print_parseable(r.externs);
    else if (opts_.debug >= 2) r.ir_after = print_graph(g_);
    records_.push_back(std::move(r));
    if ((kDebugBuild || opts_.debug > 0) && name != "verify") {
      try {
        verify(g_);
      } catch (const Error& e) {
        throw Error("verify", "after pass " + name + ": " + e.what());
      }
    }
  }

  std::vector<PassRecord> take() { return std::move(records_); }

 private:
  // The graph as text that parses back (record_ir): a constant too large to print as data is
  // extern(cHASH), its tensor added to `externs`. HASH covers the type and the bytes, so a
  // constant a pass leaves alone keeps its REF from record to record; it is computed once per
  // storage and type (the records hold the tensors, so no address is reused meanwhile).
  std::string print_parseable(std::vector<std::pair<std::string, Tensor>>& externs) {
    PrintOptions po;
    po.max_literal_numel = 16;  // scalars and short vectors stay readable in the text; the rest by REF
    po.origins = true;          // "// from: addmm, gelu": which aten nodes each node computes
    std::set<std::string> listed;
    po.constant_ref = [&](const Value* v) -> std::string {
      const Tensor& t = *v->constant;
      if (t.numel() <= po.max_literal_numel) return "";
      std::string type = v->type.str();
      auto it = refs_.find({t.data(), type});
      if (it == refs_.end()) {
        uint64_t h = xxh3_64(t.data(), t.nbytes()) ^ (xxh3_64(type.data(), type.size()) * 0x9E3779B97F4A7C15ull);
        char ref[24];
        std::snprintf(ref, sizeof ref, "c%016llx", static_cast<unsigned long long>(h));
        it = refs_.emplace(std::make_pair(t.data(), type), ref).first;
      }
      if (listed.insert(it->second).second) externs.emplace_back(it->second, t);
      return it->second;
    };
    return print_graph(g_, po);
  }

  Graph& g_;
  const CompileOptions& opts_;
  std::vector<PassRecord> records_;
  bool fault_done_ = false;
  std::map<std::pair<const void*, std::string>, std::string> refs_;  // (storage, type) -> REF
};

}  // namespace

const std::vector<std::string>& pipeline_pass_names() {
  static const std::vector<std::string> kNames = [] {
    std::vector<std::string> names;
    for (const Step& s : steps())
      if (std::find(names.begin(), names.end(), s.name) == names.end()) names.push_back(s.name);
    return names;
  }();
  return kNames;
}

bool pass_is_mandatory(const std::string& name) { return name == "verify"; }

std::vector<PassRecord> run_pipeline(Graph& g, const CompileOptions& opts) {
  auto known = [](const std::string& n) {
    const auto& names = pipeline_pass_names();
    return std::find(names.begin(), names.end(), n) != names.end();
  };
  for (const std::string& n : opts.disable_passes)
    UPDRAFT_CHECK(known(n), "passes", "disable_passes names an unknown pass '" + n + "'; see pipeline_pass_names()");
  UPDRAFT_CHECK(opts.fault_pass.empty() || known(opts.fault_pass), "passes",
                "fault_pass names an unknown pass '" + opts.fault_pass + "'; see pipeline_pass_names()");
  PassRunner run(g, opts);
  for (const Step& s : steps())
    if (s.wanted(opts)) run(s);
  return run.take();
}

}  // namespace updraft
