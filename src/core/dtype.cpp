#include "core/dtype.h"

#include "core/error.h"

namespace updraft {

size_t dtype_size(DType t) {
  switch (t) {
    case DType::f64: case DType::i64: return 8;
    case DType::f32: case DType::i32: return 4;
    case DType::f16: case DType::bf16: case DType::i16: return 2;
    case DType::i8: case DType::u8: case DType::boolean: return 1;
  }
  return 0;
}

const char* dtype_name(DType t) {
  switch (t) {
    case DType::f32: return "f32";
    case DType::f64: return "f64";
    case DType::f16: return "f16";
    case DType::bf16: return "bf16";
    case DType::i64: return "i64";
    case DType::i32: return "i32";
    case DType::i16: return "i16";
    case DType::i8: return "i8";
    case DType::u8: return "u8";
    case DType::boolean: return "bool";
  }
  return "?";
}

DType dtype_from_name(const std::string& s) {
  for (int i = 0; i <= static_cast<int>(DType::boolean); ++i) {
    auto t = static_cast<DType>(i);
    if (s == dtype_name(t)) return t;
  }
  throw Error("ir", "unknown dtype '" + s + "' (expected one of f32 f64 f16 bf16 i64 i32 i16 i8 u8 bool)");
}

bool is_floating(DType t) {
  return t == DType::f32 || t == DType::f64 || t == DType::f16 || t == DType::bf16;
}
bool is_integral(DType t) { return !is_floating(t); }

}  // namespace updraft
