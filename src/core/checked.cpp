#include "core/checked.h"

#include <cstdio>
#include <limits>
#include <string>

#include "core/error.h"

namespace updraft {

void throw_overflow(const char* component, const char* what, const char* op, long double a, long double b) {
  char buf[160];
  std::snprintf(buf, sizeof buf, "%.0Lf %s %.0Lf", a, op, b);
  throw Error(component, std::string(what) + " overflows: " + buf + " does not fit in 64 bits");
}

int64_t checked_numel(const int64_t* sizes, size_t n, const char* component) {
  for (size_t i = 0; i < n; ++i) {
    if (sizes[i] < 0)
      throw Error(component, "size " + std::to_string(sizes[i]) + " of dim " + std::to_string(i) + " is negative");
    if (sizes[i] == 0) return 0;
  }
  int64_t r = 1;
  for (size_t i = 0; i < n; ++i) r = checked_mul<int64_t>(r, sizes[i], component, "element count");
  return r;
}

size_t shape_nbytes(const std::vector<int64_t>& shape, DType dtype, const char* component) {
  int64_t n = checked_numel(shape, component);
  return static_cast<size_t>(checked_mul<int64_t>(n, static_cast<int64_t>(dtype_size(dtype)), component, "byte count"));
}

}  // namespace updraft
