// Helpers shared by the C++ tests: random tensors, strided views, closeness checks.
#pragma once
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace updraft::testing {

// A file name under the test temp folder that no other test can use at the same time: ctest runs
// tests in parallel (one process each), so a fixed name lets one test remove another's file.
inline std::string test_temp_path(const std::string& name) {
  const ::testing::TestInfo* t = ::testing::UnitTest::GetInstance()->current_test_info();
  std::string who = t ? std::string(t->test_suite_name()) + "." + t->name() : "global";
  for (char& c : who) if (c == '/') c = '_';  // parameterised names hold '/'
  return ::testing::TempDir() + "updraft_" + who + "_" + std::to_string(::getpid()) + "_" + name;
}

// Uniform in [lo, hi) for floats; integers in [lo, hi); bools 50/50. Deterministic per seed.
inline Tensor random_tensor(DType dt, const std::vector<int64_t>& shape, uint32_t seed = 0,
                            double lo = -2.0, double hi = 2.0) {
  Tensor t(dt, shape);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> u(lo, hi);
  int64_t n = t.numel();
  for (int64_t i = 0; i < n; ++i) {
    double x = u(rng);
    switch (dt) {
      case DType::f32: t.ptr<float>()[i] = static_cast<float>(x); break;
      case DType::f64: t.ptr<double>()[i] = x; break;
      case DType::i64: t.ptr<int64_t>()[i] = static_cast<int64_t>(std::floor(x)); break;
      case DType::i32: t.ptr<int32_t>()[i] = static_cast<int32_t>(std::floor(x)); break;
      case DType::i8: t.ptr<int8_t>()[i] = static_cast<int8_t>(std::floor(x)); break;
      case DType::u8: t.ptr<uint8_t>()[i] = static_cast<uint8_t>(std::floor(x)); break;
      case DType::boolean: t.ptr<bool>()[i] = x > (lo + hi) / 2; break;
      default: ADD_FAILURE() << "random_tensor: dtype not handled"; return t;
    }
  }
  return t;
}

// A non-contiguous view of `base` (which must hold at least the strided extent): the same
// logical shape with the last two dims swapped in memory. Returns a view plus its storage.
inline std::pair<TensorView, Tensor> transposed_copy(const Tensor& src) {
  // Storage holds src^T (last two dims swapped); the view strides read it back as src.
  auto shape = src.shape();
  int r = static_cast<int>(shape.size());
  EXPECT_GE(r, 2);
  auto tshape = shape;
  std::swap(tshape[r - 1], tshape[r - 2]);
  Tensor store(src.dtype(), tshape);
  size_t es = dtype_size(src.dtype());
  int64_t rows = shape[r - 2], cols = shape[r - 1], batch = src.numel() / std::max<int64_t>(rows * cols, 1);
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < cols; ++j)
        std::memcpy(static_cast<char*>(store.data()) + ((b * cols + j) * rows + i) * es,
                    static_cast<char*>(src.data()) + ((b * rows + i) * cols + j) * es, es);
  TensorView v = TensorView::contiguous(store.data(), src.dtype(), shape);
  v.strides[r - 1] = rows;
  v.strides[r - 2] = 1;
  return {v, store};
}

inline double element_as_double(const TensorView& v, int64_t linear) {
  // linear index in logical (row-major) order, honouring strides
  int64_t off = 0, rem = linear;
  for (int d = v.ndim - 1; d >= 0; --d) {
    int64_t s = v.sizes[d] ? rem % v.sizes[d] : 0;
    rem = v.sizes[d] ? rem / v.sizes[d] : 0;
    off += s * v.strides[d];
  }
  switch (v.dtype) {
    case DType::f32: return static_cast<const float*>(v.data)[off];
    case DType::f64: return static_cast<const double*>(v.data)[off];
    case DType::i64: return static_cast<double>(static_cast<const int64_t*>(v.data)[off]);
    case DType::i32: return static_cast<const int32_t*>(v.data)[off];
    case DType::boolean: return static_cast<const bool*>(v.data)[off];
    default: return NAN;
  }
}

// Elementwise |a-b| <= atol + rtol*|b| (NaNs and infinities must match). Reports the worst element.
inline ::testing::AssertionResult all_close(const TensorView& a, const TensorView& b, double rtol, double atol) {
  if (a.shape() != b.shape()) return ::testing::AssertionFailure() << "shape mismatch";
  if (a.dtype != b.dtype) return ::testing::AssertionFailure() << "dtype mismatch";
  int64_t n = a.numel();
  double worst = 0;
  int64_t worst_i = -1;
  for (int64_t i = 0; i < n; ++i) {
    double x = element_as_double(a, i), y = element_as_double(b, i);
    if (std::isnan(x) || std::isnan(y)) {
      if (std::isnan(x) != std::isnan(y)) return ::testing::AssertionFailure() << "NaN mismatch at " << i;
      continue;
    }
    // An infinity must be matched exactly: the tolerance below is infinite when b is, so
    // 5 vs inf (or -inf vs inf) would pass it.
    if (std::isinf(x) || std::isinf(y)) {
      if (x != y) return ::testing::AssertionFailure() << "element " << i << ": " << x << " vs " << y;
      continue;
    }
    double excess = std::fabs(x - y) - (atol + rtol * std::fabs(y));
    if (excess > worst) { worst = excess; worst_i = i; }
  }
  if (worst_i >= 0)
    return ::testing::AssertionFailure() << "element " << worst_i << ": " << element_as_double(a, worst_i)
                                         << " vs " << element_as_double(b, worst_i);
  return ::testing::AssertionSuccess();
}

inline ::testing::AssertionResult all_close(const Tensor& a, const Tensor& b, double rtol, double atol) {
  return all_close(a.view(), b.view(), rtol, atol);
}

// Same shape and the same bytes (bit-identical results, e.g. a cache load against a compile).
inline bool same_bits(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && std::memcmp(a.data(), b.data(), a.nbytes()) == 0;
}

}  // namespace updraft::testing
