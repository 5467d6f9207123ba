// The selection the topk kernels (ref and cpu) share, chosen to give ATen's CPU topk's answer,
// ties included (docs/decisions.md, "topk among equal values"). ATen fills a buffer with
// (value, position) pairs in input order and then, with the order of kernels/sort_order.h
// (NaN above every number) as a strict comparator:
//   - when k * 64 <= n: std::partial_sort of the first k;
//   - otherwise: std::nth_element at k - 1, then (sorted only) std::sort of the first k - 1.
// None of these is stable, so which of several equal values comes first is whatever those
// algorithms do with that input order; running the same standard-library algorithms on the
// same buffer with the same comparator reproduces it. (With sorted=false the first branch
// still returns the k in order, and the second returns nth_element's arrangement.)
#pragma once
#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

#include "kernels/sort_order.h"

namespace updraft {

// `row` holds (value, input position) in input order; on return its first k entries are the
// result.
template <typename T>
void topk_select(std::vector<std::pair<T, int64_t>>& row, int64_t k, bool largest, bool sorted) {
  if (k <= 0) return;
  auto before = [largest](const std::pair<T, int64_t>& a, const std::pair<T, int64_t>& b) {
    return sort_before(a.first, b.first, /*descending=*/largest);
  };
  int64_t n = static_cast<int64_t>(row.size());
  if (k * 64 <= n) {
    std::partial_sort(row.begin(), row.begin() + k, row.end(), before);
  } else {
    std::nth_element(row.begin(), row.begin() + (k - 1), row.end(), before);
    if (sorted) std::sort(row.begin(), row.begin() + (k - 1), before);
  }
}

}  // namespace updraft
