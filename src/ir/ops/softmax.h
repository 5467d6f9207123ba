// softmax's zero_masked_rows attribute (src/ir/ops/norm.cpp), as every softmax kernel reads it
// (reference, CPU f32 and f64): one reading, so they cannot disagree on a node without it.
#pragma once
#include "ir/graph.h"

namespace updraft {

// True when a line of all -inf gives 0s rather than NaN (torch's _safe_softmax). log_softmax
// has no such attribute: false.
inline bool zero_masked_rows(const Node& n) {
  return n.has_attr("zero_masked_rows") && n.attr("zero_masked_rows").b();
}

}  // namespace updraft
