// Memory planning: every planned buffer gets an offset in ONE arena, so a call needs a single
// allocation (made once per pooled arena, then reused) and buffers whose lifetimes do not
// overlap share bytes.
//
//   std::vector<BufferRequest> reqs = {{"%3", 4096, 0, 2}, {"%5", 4096, 3, 4}};
//   MemoryPlan mp = plan_memory(reqs);
//   mp.buffers[1].offset;      // 0: %3 is dead by step 3, so %5 reuses its bytes
//   plan_is_valid(mp);         // true: no two time-overlapping buffers overlap in memory
//   std::cout << mp.str();
//
// Graph-level front end: assign_buffers() decides which graph values need an arena buffer
// (intermediates only: graph inputs, constants and graph outputs live in memory the caller
// or the graph owns), folds View outputs into their root's buffer and applies in-place reuse.
#pragma once
#include <cstddef>
#include <string>
#include <vector>

#include "ir/graph.h"
#include "memory/liveness.h"

namespace updraft {

constexpr size_t kArenaAlign = 64;  // every offset is a multiple; sizes are padded up to it

struct BufferRequest {
  std::string label;  // what the dump prints ("%3", "scratch step 2", "copy of input 0")
  size_t bytes = 0;
  int first = 0;  // first step the buffer must hold data (inclusive)
  int last = 0;   // last step it is read or written (inclusive)
};

struct PlannedBuffer : BufferRequest {
  size_t offset = 0;
};

struct MemoryPlan {
  std::vector<PlannedBuffer> buffers;  // same order as the requests
  size_t arena_bytes = 0;              // bytes the arena must have (a multiple of kArenaAlign)

  size_t sum_bytes() const;  // what separate allocations would take (unpadded)
  // One line per buffer ("%3  4096 B  @ 0  steps [0, 2]"), then the arena total vs the sum.
  std::string str() const;
};

// Greedy best fit: buffers in order of decreasing size (ties: earlier first use), each placed
// in the smallest gap between already-placed, time-overlapping buffers that holds it, or
// above all of them. Zero-byte buffers get offset 0 and take no space.
MemoryPlan plan_memory(const std::vector<BufferRequest>& requests);

// True when every offset is aligned, every buffer fits the arena, and no two buffers whose
// step ranges intersect share a byte. `why`, when given, receives the first violation.
bool plan_is_valid(const MemoryPlan& plan, std::string* why = nullptr);

// Which values of a graph share which arena buffer.
struct BufferAssignment {
  std::vector<int> buffer_of_value;     // by value id; -1: not in the arena
  std::vector<BufferRequest> requests;  // one per buffer, lifetimes from liveness
  std::vector<int> inplace_steps;       // steps whose output 0 reuses input 0's buffer
  // By value id: the graph output (index into g.outputs()) whose memory this root is written
  // into because that output is a view of it; -1 for none.
  std::vector<int> output_host;
};

// `value_bytes` gives each value's concrete byte size (indexed by value id).
// Arena buffers go to node outputs that are their own root (not a View of something) and are
// not graph outputs (those are written straight into the caller's memory). A buffer lives
// from its definition to the last use of any alias (liveness.buffer_last).
//
// A root that is not a graph output but has a graph output among its views of the same byte
// size (a training forward returns reshape(matmul(...)) to save it) is written straight into
// that output's memory instead (output_host), as the output itself would be: no arena buffer
// and no copy of it at the end. Its other views read that memory, which nothing else writes.
//
// In-place reuse: a node whose op is OpDef::inplace writes output 0 into input 0's buffer when
// input 0's buffer is an arena buffer (so not a graph input, constant, output or a view of
// one), its last use is this step, output 0 has the same element count and element size
// (so element i of the output only overwrites element i of the input), output 0 would itself
// get an arena buffer, and no other input of the node reaches the same buffer through a
// different value (a differently shaped alias could be read after being overwritten).
BufferAssignment assign_buffers(const Graph& g, const Liveness& lv, const std::vector<size_t>& value_bytes);

}  // namespace updraft
