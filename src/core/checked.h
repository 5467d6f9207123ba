// Checked size arithmetic. Every size, count, byte count and offset the engine computes from
// input it does not control (text IR, a cache entry, a shape or expression from Python) goes
// through these helpers, so an overflow or a negative size is an Error naming the component
// rather than a wrapped value that later reads or writes out of bounds.
//
//   int64_t n = checked_mul<int64_t>(rows, cols, "tensor", "element count");
//   size_t b = shape_nbytes(shape, DType::f32, "cache");   // rejects negative sizes too
//
// What it does not do: clamp, saturate or guess. A result that does not fit is an error.
#pragma once
#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "core/dtype.h"

namespace updraft {

// Throws Error(component, "<what> overflows: <a> <op> <b> does not fit in 64 bits").
[[noreturn]] void throw_overflow(const char* component, const char* what, const char* op, long double a,
                                 long double b);

template <typename T>
T checked_add(T a, T b, const char* component, const char* what) {
  static_assert(std::is_integral_v<T>);
  T r;
  if (__builtin_add_overflow(a, b, &r)) throw_overflow(component, what, "+", a, b);
  return r;
}

template <typename T>
T checked_sub(T a, T b, const char* component, const char* what) {
  static_assert(std::is_integral_v<T>);
  T r;
  if (__builtin_sub_overflow(a, b, &r)) throw_overflow(component, what, "-", a, b);
  return r;
}

template <typename T>
T checked_mul(T a, T b, const char* component, const char* what) {
  static_assert(std::is_integral_v<T>);
  T r;
  if (__builtin_mul_overflow(a, b, &r)) throw_overflow(component, what, "*", a, b);
  return r;
}

// The element count of `n` sizes: an error when a size is negative or the product does not fit
// in int64 (a zero size makes the count 0 whatever the others are, as in torch).
int64_t checked_numel(const int64_t* sizes, size_t n, const char* component);
inline int64_t checked_numel(const std::vector<int64_t>& s, const char* component) {
  return checked_numel(s.data(), s.size(), component);
}

// The bytes of a contiguous tensor of `shape` and `dtype`, checked as checked_numel, and at
// most INT64_MAX so byte offsets fit in int64 too.
size_t shape_nbytes(const std::vector<int64_t>& shape, DType dtype, const char* component);

}  // namespace updraft
