// The compiler's input options and its per-pass log: what run_pipeline takes and returns, and
// what the runtime (runtime/executable.h) keeps for building plans. They live with the
// passes because the pipeline is their first reader; the runtime includes this header, not the
// other way round.
#pragma once
#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"
#include "core/tensor.h"
#include "kernels/kernel_options.h"

namespace updraft {

// How large linear weights are stored (passes/quantize_weights.h, docs/quantization.md): f32 as
// given; bf16; int8 with a per-output-channel scale; int4 with a scale per group of 32 values
// of a row. CompilerConfig.weight_dtype.
enum class WeightDType : uint8_t { f32, bf16, int8, int4 };

// "f32" / "bf16" / "int8" / "int4" -> WeightDType; anything else throws Error("options", ...)
// naming the accepted values (CompilerConfig validated it already; this is the bindings'
// conversion).
inline WeightDType weight_dtype_from_name(const std::string& name) {
  if (name == "f32") return WeightDType::f32;
  if (name == "bf16") return WeightDType::bf16;
  if (name == "int8") return WeightDType::int8;
  if (name == "int4") return WeightDType::int4;
  throw Error("options", "weight_dtype '" + name + "' is unknown; use f32, bf16, int8 or int4");
}

// What the linears over int8 weights multiply x as (passes/quantize_activations.h,
// docs/quantization.md): f32 as given, or int8 quantised per row at every call.
// CompilerConfig.activation_dtype.
enum class ActivationDType : uint8_t { f32, int8 };

inline ActivationDType activation_dtype_from_name(const std::string& name) {
  if (name == "f32") return ActivationDType::f32;
  if (name == "int8") return ActivationDType::int8;
  throw Error("options", "activation_dtype '" + name + "' is unknown; use f32 or int8");
}

struct CompileOptions {
  bool fold_constants = true;
  bool fuse = true;           // conv+bn folding, epilogue fusion, elementwise fusion
  int num_threads = 0;        // 0: all cores
  int debug = 0;              // UPDRAFT_DEBUG: 1 pass summary, 2 IR after each pass + plans
  size_t plan_cache_size = 16;
  // Range plans (runtime/plan.h, Plan::build_range): a graph with symbolic sizes builds one plan
  // per size bucket and instantiates it per size, rather than building a plan per size.
  bool range_plans = true;
  // Layout of conv activations (passes/block_conv_layout.h): -1 the kernels' preference on this
  // CPU (preferred_channel_block()), 0 plain NCHW, 8 or 16 (nChw{B}c), kChannelsLast (-2, NHWC;
  // kernels/channel_block.h).
  int channel_block = -1;
  // Storage of large linear weights; not f32 adds the quantize_weights pass. Changes the
  // optimised graph, so it is in the compile-cache key (CompilerConfig.cache_options).
  WeightDType weight_dtype = WeightDType::f32;
  // int8 adds the quantize_activations pass (linear_wq over i8 weights quantises x). Changes the
  // optimised graph, so it is in the compile-cache key too.
  ActivationDType activation_dtype = ActivationDType::f32;
  // Which kernels the plans build and how they thread (kernels/kernel_options.h). They change
  // no pass's result: constant folding evaluates with the default KernelOptions.
  KernelOptions kernels;
  // Bisect switches (updraft.debug.bisect, python/updraft/debug/bisect.py); CompilerConfig
  // validated the names against pipeline_pass_names() (passes/pipeline.h).
  // Passes run_pipeline skips (every run of each; logged as skipped). "verify" is mandatory.
  std::vector<std::string> disable_passes;
  // TEST-ONLY deliberate fault ("pass:NAME" of CompilerConfig.debug_fault): the first time pass
  // `fault_pass` changes the graph, run_pipeline corrupts what it produced so that the results
  // change. Empty: off. For testing the bisect tool, never for users.
  std::string fault_pass;
  // Graph dumps (updraft/debug/dump.py): every PassRecord gets ir_after as text that parses
  // back, large constants written extern(REF) with their tensors in PassRecord::externs. It
  // prints nothing (debug does) and changes no pass.
  bool record_ir = false;
  // Seconds an Executable::run may take before the watchdog reports it on stderr and stops it
  // at its next step boundary (runtime/watchdog.h); 0: no watchdog. Changes no pass's result.
  double watchdog_s = 0;
  // Keep each plan's arena (its intermediates' memory) between calls, pooled for the next call
  // (true), or free it when the call returns (false). Keeping saves an allocation and its page
  // faults per call; freeing returns the memory while the caller does other work, which a
  // training step's forward graph wants: its arena would otherwise stay resident through the
  // backward. Changes no pass's result.
  bool keep_arenas = true;
};

struct PassRecord {
  std::string name;
  bool changed = false;
  double ms = 0;
  bool skipped = false;  // named in CompileOptions::disable_passes: not run
  std::string ir_after;  // filled when debug >= 2 or record_ir
  // record_ir: the tensors ir_after names as extern(REF), each REF once (shared with the graph).
  std::vector<std::pair<std::string, Tensor>> externs;
};

}  // namespace updraft
