// The compile pipeline, read top to bottom. Each pass is a plain function `bool pass(Graph&)`
// (true when it changed the graph); this file only decides the order and the options.
#include "passes/pipeline.h"

#include <chrono>
#include <functional>
#include <string>

#include "core/error.h"
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
    if (opts_.debug >= 2) r.ir_after = print_graph(g_);
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
  Graph& g_;
  const CompileOptions& opts_;
  std::vector<PassRecord> records_;
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
