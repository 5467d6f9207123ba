// Element types the IR knows. Not every op supports every type: the op table says which.
#pragma once
#include <cstdint>
#include <string>

namespace updraft {

enum class DType : uint8_t { f32, f64, f16, bf16, i64, i32, i16, i8, u8, boolean };

size_t dtype_size(DType t);
const char* dtype_name(DType t);            // "f32", "i64", "bool", ...
DType dtype_from_name(const std::string& s);  // throws Error("ir", ...) on an unknown name
bool is_floating(DType t);
bool is_integral(DType t);  // integers and bool

}  // namespace updraft
