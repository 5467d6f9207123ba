// Helpers for the reference kernels of reductions, norms and data movement. Reference kernels
// favour obviousness over speed: they first gather a (possibly strided) input into a
// contiguous vector in logical row-major order, then index it with plain arithmetic.
#pragma once
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/tensor.h"

namespace updraft::ref {

// Storage offset (in elements) of the element at `linear` in logical row-major order.
inline int64_t offset_of(const TensorView& v, int64_t linear) {
  int64_t off = 0;
  for (int d = v.ndim - 1; d >= 0; --d) {
    int64_t n = v.sizes[d];
    off += (linear % n) * v.strides[d];
    linear /= n;
  }
  return off;
}

template <typename T>
std::vector<T> to_vector(const TensorView& v) {
  int64_t n = v.numel();
  std::vector<T> r(n);
  const T* p = v.ptr<const T>();
  for (int64_t i = 0; i < n; ++i) r[i] = p[offset_of(v, i)];
  return r;
}

// Any dtype, element by element as raw bytes.
inline std::vector<char> to_bytes(const TensorView& v) {
  int64_t n = v.numel();
  size_t es = dtype_size(v.dtype);
  std::vector<char> r(n * es);
  const char* p = static_cast<const char*>(v.data);
  for (int64_t i = 0; i < n; ++i) std::memcpy(&r[i * es], p + offset_of(v, i) * es, es);
  return r;
}

// Calls f(T{}) for the numeric dtypes the reductions and norms declare.
template <typename F>
void dispatch_numeric(DType t, const std::string& op, F&& f) {
  switch (t) {
    case DType::f32: f(float{}); break;
    case DType::f64: f(double{}); break;
    case DType::i64: f(int64_t{}); break;
    case DType::i32: f(int32_t{}); break;
    default: throw Error(op, std::string("the reference kernel does not handle ") + dtype_name(t));
  }
}

// Calls f(idx, linear) for every multi-index of `shape` in row-major order.
template <typename F>
void for_each_index(const std::vector<int64_t>& shape, F&& f) {
  int64_t n = numel_of(shape);
  std::vector<int64_t> idx(shape.size(), 0);
  for (int64_t i = 0; i < n; ++i) {
    f(idx, i);
    for (int d = static_cast<int>(shape.size()) - 1; d >= 0; --d) {
      if (++idx[d] < shape[d]) break;
      idx[d] = 0;
    }
  }
}

// Row-major linear position of multi-index idx within shape.
inline int64_t offset_in_logical(const std::vector<int64_t>& shape, const std::vector<int64_t>& idx) {
  int64_t lin = 0;
  for (size_t d = 0; d < shape.size(); ++d) lin = lin * shape[d] + idx[d];
  return lin;
}

// Address of the element at multi-index `idx` of v.
inline const char* element_at(const TensorView& v, const std::vector<int64_t>& idx) {
  int64_t off = 0;
  for (int d = 0; d < v.ndim; ++d) off += idx[d] * v.strides[d];
  return static_cast<const char*>(v.data) + off * static_cast<int64_t>(dtype_size(v.dtype));
}

// Integer element `linear` (logical order) of an i64 or i32 index tensor.
inline int64_t index_at(const TensorView& v, int64_t linear) {
  int64_t off = offset_of(v, linear);
  if (v.dtype == DType::i64) return v.ptr<const int64_t>()[off];
  if (v.dtype == DType::i32) return v.ptr<const int32_t>()[off];
  throw Error("kernels", std::string("index tensor is ") + dtype_name(v.dtype) + "; expected i64 or i32");
}

// One element of dtype t holding `value` (pad's fill), as raw bytes. Also used by the CPU pad.
inline std::vector<char> scalar_bytes(DType t, double value, const std::string& op) {
  std::vector<char> b(dtype_size(t), 0);
  auto put = [&](auto v) { std::memcpy(b.data(), &v, sizeof(v)); };
  switch (t) {
    case DType::f32: put(static_cast<float>(value)); break;
    case DType::f64: put(value); break;
    case DType::i64: put(static_cast<int64_t>(value)); break;
    case DType::i32: put(static_cast<int32_t>(value)); break;
    case DType::i16: put(static_cast<int16_t>(value)); break;
    case DType::i8: put(static_cast<int8_t>(value)); break;
    case DType::u8: put(static_cast<uint8_t>(value)); break;
    case DType::boolean: put(static_cast<bool>(value != 0)); break;
    default:
      if (value != 0) throw Error(op, std::string("a non-zero fill value for ") + dtype_name(t) + " is not supported; cast to f32 first");
  }
  return b;
}

// Row-major strides of a shape (size-0 dims count as 1 so strides stay meaningful).
inline std::vector<int64_t> strides_of(const std::vector<int64_t>& shape) { return contiguous_strides(shape); }

}  // namespace updraft::ref
