// The compile pipeline, read top to bottom. Each pass is a plain function `bool pass(Graph&)`
// (true when it changed the graph); this file only decides the order and the options.
#include "passes/pipeline.h"

#include <chrono>
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
#include "passes/fold_pad_conv.h"
#include "passes/fuse_elementwise.h"
#include "passes/fuse_epilogue.h"
#include "passes/match_gelu.h"
#include "passes/verify.h"

namespace updraft {

namespace {

#ifdef NDEBUG
constexpr bool kDebugBuild = false;
#else
constexpr bool kDebugBuild = true;
#endif

// Runs one pass, times it and records it; re-verifies after it in debug builds or when
// opts.debug > 0, so a broken invariant is blamed on the pass that broke it.
class PassRunner {
 public:
  PassRunner(Graph& g, const CompileOptions& opts) : g_(g), opts_(opts) {}

  void operator()(const char* name, const std::function<bool(Graph&)>& pass) {
    auto t0 = std::chrono::steady_clock::now();
    PassRecord r;
    r.name = name;
    r.changed = pass(g_);
    r.ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (opts_.record_ir) r.ir_after = print_parseable(r.externs);
    else if (opts_.debug >= 2) r.ir_after = print_graph(g_);
    records_.push_back(std::move(r));
    if ((kDebugBuild || opts_.debug > 0) && std::string(name) != "verify") {
      try {
        verify(g_);
      } catch (const Error& e) {
        throw Error("verify", std::string("after pass ") + name + ": " + e.what());
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
  std::map<std::pair<const void*, std::string>, std::string> refs_;  // (storage, type) -> REF
};

}  // namespace

std::vector<PassRecord> run_pipeline(Graph& g, const CompileOptions& opts) {
  PassRunner run(g, opts);
  run("verify", verify);              // the front end built a well-formed graph
  run("canonicalize", canonicalize);  // drop identity reshapes/casts, merge reshape chains
  if (opts.fuse) run("match_gelu", match_gelu);  // GELU's tanh formula in elementwise ops -> gelu
  run("dce", dce);                    // remove what canonicalize left unused
  run("cse", cse);                    // one node per (op, inputs, attributes)
  if (opts.fold_constants)
    run("constant_fold", constant_fold);  // evaluate all-constant nodes with our own kernels
  if (opts.fuse) {
    run("fold_conv_bn", fold_conv_bn);          // batch_norm after conv2d -> new conv weights
    run("fold_pad_conv", fold_pad_conv);        // zero pad before conv2d -> the conv's padding
    run("fuse_epilogue", fuse_epilogue);        // bias / residual / activation into conv, linear, matmul
    run("fuse_elementwise", fuse_elementwise);  // elementwise chains -> one pass over memory
  }
  if (opts.channel_block > 0)  // conv chains in nChw{B}c, channel_block reorders at their edges
    run("block_conv_layout", [&](Graph& gr) { return block_conv_layout(gr, opts.channel_block); });
  run("dce", dce);        // drop nodes the rewrites orphaned
  run("verify", verify);  // what the planner receives is well-formed
  return run.take();
}

}  // namespace updraft
