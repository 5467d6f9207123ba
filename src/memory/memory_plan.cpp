#include "memory/memory_plan.h"

#include <algorithm>
#include <cstdio>
#include <numeric>

#include "core/error.h"
#include "ir/op_table.h"

namespace updraft {

namespace {

size_t padded(size_t bytes) { return (bytes + kArenaAlign - 1) / kArenaAlign * kArenaAlign; }

bool times_overlap(const BufferRequest& a, const BufferRequest& b) {
  return a.first <= b.last && b.first <= a.last;
}

}  // namespace

size_t MemoryPlan::sum_bytes() const {
  size_t s = 0;
  for (const PlannedBuffer& b : buffers) s += b.bytes;
  return s;
}

std::string MemoryPlan::str() const {
  size_t width = 6;
  for (const PlannedBuffer& b : buffers) width = std::max(width, b.label.size());
  std::string s;
  char line[256];
  for (const PlannedBuffer& b : buffers) {
    std::snprintf(line, sizeof line, "  %-*s %12zu B  @ %-12zu steps [%d, %d]\n", static_cast<int>(width),
                  b.label.c_str(), b.bytes, b.offset, b.first, b.last);
    s += line;
  }
  size_t sum = sum_bytes();
  std::snprintf(line, sizeof line, "  arena %zu B for %zu buffers totalling %zu B (%.1f%%)\n", arena_bytes,
                buffers.size(), sum, sum ? 100.0 * static_cast<double>(arena_bytes) / static_cast<double>(sum) : 100.0);
  s += line;
  return s;
}

MemoryPlan plan_memory(const std::vector<BufferRequest>& requests) {
  MemoryPlan plan;
  plan.buffers.reserve(requests.size());
  for (const BufferRequest& r : requests) {
    UPDRAFT_CHECK(r.first <= r.last, "plan",
                  "buffer " + r.label + " ends (step " + std::to_string(r.last) + ") before it starts (step " +
                      std::to_string(r.first) + ")");
    PlannedBuffer b;
    static_cast<BufferRequest&>(b) = r;
    plan.buffers.push_back(std::move(b));
  }

  // Largest first: big buffers claim the low offsets and small ones fill the gaps between
  // them, which is what keeps the arena close to the peak of live bytes.
  std::vector<size_t> order(requests.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    if (requests[a].bytes != requests[b].bytes) return requests[a].bytes > requests[b].bytes;
    return requests[a].first < requests[b].first;
  });

  // Placed buffers, ordered by their first step: the ones live together with b are among those
  // that start no later than b ends (a binary search), and of those the ones that end no
  // earlier than b starts. Kept as plain numbers so the scan reads one small array.
  struct Placed {
    int first, last;
    size_t begin, end;  // bytes [begin, end)
  };
  std::vector<Placed> placed;
  placed.reserve(order.size());
  std::vector<std::pair<size_t, size_t>> busy;  // [begin, end) of time-overlapping placed buffers
  for (size_t idx : order) {
    PlannedBuffer& b = plan.buffers[idx];
    size_t need = padded(b.bytes);
    if (need == 0) {
      b.offset = 0;  // takes no space, so it cannot collide with anything
      continue;
    }
    busy.clear();
    auto stop = std::upper_bound(placed.begin(), placed.end(), b.last,
                                 [](int last, const Placed& o) { return last < o.first; });
    for (auto it = placed.begin(); it != stop; ++it)
      if (it->last >= b.first) busy.emplace_back(it->begin, it->end);
    std::sort(busy.begin(), busy.end());
    // Walk the free gaps in offset order; keep the tightest one that fits.
    size_t cursor = 0, best = SIZE_MAX, best_gap = SIZE_MAX;
    for (const auto& [begin, end] : busy) {
      if (begin > cursor && begin - cursor >= need && begin - cursor < best_gap) {
        best = cursor;
        best_gap = begin - cursor;
      }
      cursor = std::max(cursor, end);
    }
    b.offset = best != SIZE_MAX ? best : cursor;  // no gap fits: go above everything live
    plan.arena_bytes = std::max(plan.arena_bytes, b.offset + need);
    auto at = std::upper_bound(placed.begin(), placed.end(), b.first,
                               [](int first, const Placed& o) { return first < o.first; });
    placed.insert(at, Placed{b.first, b.last, b.offset, b.offset + need});
  }
  return plan;
}

bool plan_is_valid(const MemoryPlan& plan, std::string* why) {
  auto fail = [&](const std::string& msg) {
    if (why) *why = msg;
    return false;
  };
  const auto& bs = plan.buffers;
  for (const PlannedBuffer& b : bs) {
    if (b.offset % kArenaAlign != 0) return fail(b.label + " is at unaligned offset " + std::to_string(b.offset));
    if (b.bytes > 0 && b.offset + b.bytes > plan.arena_bytes)
      return fail(b.label + " ends at " + std::to_string(b.offset + b.bytes) + ", past the arena (" +
                  std::to_string(plan.arena_bytes) + " B)");
  }
  // In offset order, the buffers whose bytes meet a's are the ones after it that start before
  // a ends; of those, any live at the same time as a is a collision.
  std::vector<size_t> by_offset;
  by_offset.reserve(bs.size());
  for (size_t i = 0; i < bs.size(); ++i)
    if (bs[i].bytes > 0) by_offset.push_back(i);
  std::sort(by_offset.begin(), by_offset.end(), [&](size_t x, size_t y) { return bs[x].offset < bs[y].offset; });
  for (size_t i = 0; i < by_offset.size(); ++i) {
    const PlannedBuffer& a = bs[by_offset[i]];
    for (size_t j = i + 1; j < by_offset.size() && bs[by_offset[j]].offset < a.offset + a.bytes; ++j) {
      const PlannedBuffer& b = bs[by_offset[j]];
      if (times_overlap(a, b))
        return fail(a.label + " [" + std::to_string(a.offset) + ", +" + std::to_string(a.bytes) + ") and " + b.label +
                    " [" + std::to_string(b.offset) + ", +" + std::to_string(b.bytes) +
                    ") overlap in memory while both are live");
    }
  }
  return true;
}

BufferAssignment assign_buffers(const Graph& g, const Liveness& lv, const std::vector<size_t>& value_bytes) {
  UPDRAFT_CHECK(value_bytes.size() == g.num_values(), "plan",
                "assign_buffers needs one byte size per value (" + std::to_string(g.num_values()) + "), got " +
                    std::to_string(value_bytes.size()));
  BufferAssignment a;
  a.buffer_of_value.assign(g.num_values(), -1);
  a.output_host.assign(g.num_values(), -1);
  // Roots that host a graph output viewing them: the first such output of equal byte size.
  const auto& outs = g.outputs();
  for (size_t o = 0; o < outs.size(); ++o) {
    const int root = lv.of(outs[o]).root;
    const Value* r = g.value(root);
    if (root == outs[o]->id || a.output_host[root] >= 0 || g.is_output(r) || r->producer == nullptr) continue;
    if (value_bytes[root] == value_bytes[outs[o]->id] && dtype_size(r->type.dtype) == dtype_size(outs[o]->type.dtype))
      a.output_host[root] = static_cast<int>(o);
  }

  for (int step = 0; step < lv.at_end; ++step) {
    const Node* n = lv.order[step];
    for (size_t k = 0; k < n->outputs.size(); ++k) {
      const Value* out = n->outputs[k];
      const ValueLife& life = lv.of(out);
      if (life.root != out->id) {
        // A view lives in its root's memory (an arena buffer, or -1 for caller/graph memory).
        a.buffer_of_value[out->id] = a.buffer_of_value[life.root];
        continue;
      }
      // The producing kernel writes the caller's buffer (the output's, or a view's: output_host).
      if (g.is_output(out) || a.output_host[out->id] >= 0) continue;

      if (k == 0 && n->op->inplace && !n->inputs.empty()) {
        const Value* in0 = n->inputs[0];
        int b = a.buffer_of_value[lv.of(in0).root];
        bool ok = b >= 0 && a.requests[b].last == step && value_bytes[out->id] == value_bytes[in0->id] &&
                  dtype_size(out->type.dtype) == dtype_size(in0->type.dtype);
        for (size_t j = 1; ok && j < n->inputs.size(); ++j) {
          const Value* other = n->inputs[j];
          if (other != in0 && a.buffer_of_value[lv.of(other).root] == b) ok = false;
        }
        if (ok) {
          a.buffer_of_value[out->id] = b;
          a.requests[b].label.append(">").append(value_label(out));
          a.requests[b].last = std::max(a.requests[b].last, lv.buffer_last(out->id));
          a.inplace_steps.push_back(step);
          continue;
        }
      }
      a.buffer_of_value[out->id] = static_cast<int>(a.requests.size());
      a.requests.push_back({value_label(out), value_bytes[out->id], life.def, lv.buffer_last(out->id)});
    }
  }
  return a;
}

}  // namespace updraft
