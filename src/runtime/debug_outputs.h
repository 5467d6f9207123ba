// Debug outputs: every node output of a compiled graph for one call, for tensor dumps and
// accuracy comparison (python/updraft/debug/compare.py, docs/debugging.md).
//
//   DebugOutputs d = debug_outputs(*cg);              // cg: a compiled Executable
//   d.exe->prepare(shapes);                            // then run as usual:
//   d.exe->run(inputs, outputs);                       // outputs: cg's own, then one per d.captured
//
// What it does: copies the compiled (already optimised) graph, makes every node output a graph
// output as well, and wraps the copy in an Executable with no passes (Executable::from_optimized)
// and cg's compile options. The normal planner and the same kernels then run, and every
// intermediate lands in a caller buffer. A value the engine keeps channel-blocked
// (kernels/channel_block.h) is captured through one appended channel_block node to plain NCHW, so
// every capture has its logical layout.
//
// What it does not do: touch cg or its call path (the copy shares cg's constant tensors, nothing
// else); keep intermediates in place: since every node output is now a graph output, the memory
// plan reuses no buffer and runs nothing in place, so the capture call uses more memory than a
// normal one (the kernels are the same). The copy keeps the nodes, their attributes and values' types; fold records and
// parameter references (the compile cache's concerns) are not copied.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "ir/graph.h"
#include "runtime/executable.h"

namespace updraft {

// A copy of `g` for running: the same inputs, nodes (in order, with their attributes) and
// outputs; constants share g's tensors. Built by printing g as text IR with every constant as an
// extern reference and parsing it back, the round trip the compile cache relies on (cache/entry.h),
// so it copies whatever the text IR can express, and node and value provenance (Node::origin,
// Value::origin of node outputs) by position. Node k of the copy is node k of g.
std::unique_ptr<Graph> copy_graph(const Graph& g);

// One captured node output.
struct CapturedOutput {
  int node = -1;       // the node's position in the compiled graph's node order (Graph::nodes())
  int output = 0;      // which of the node's outputs
  int value = -1;      // the value's id in the compiled graph
  int64_t block = 0;   // the channel block the engine keeps it in (0: plain); captured as plain
};

struct DebugOutputs {
  // Outputs: the compiled graph's own outputs (num_outputs of them), then one per `captured`.
  std::shared_ptr<Executable> exe;
  size_t num_outputs = 0;
  std::vector<CapturedOutput> captured;  // every node output, in node order
};

// Throws Error("debug", ...) if the copy does not reproduce the graph's nodes.
DebugOutputs debug_outputs(const Executable& cg);

}  // namespace updraft
