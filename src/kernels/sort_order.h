// The order the sort kernels (ref and cpu) share: ascending or descending, NaN above every
// number (so ascending puts NaNs last and descending first, as torch.sort does), ties kept in
// input order (a stable sort with this comparator).
#pragma once
#include <cmath>
#include <type_traits>

namespace updraft {

template <typename T> bool sort_is_nan(T v) {
  if constexpr (std::is_floating_point_v<T>) return std::isnan(v);
  return false;
}

// True when a goes strictly before b.
template <typename T> bool sort_before(T a, T b, bool descending) {
  bool an = sort_is_nan(a), bn = sort_is_nan(b);
  if (an || bn) return descending ? (an && !bn) : (!an && bn);
  return descending ? a > b : a < b;
}

}  // namespace updraft
