// NumPy .npy files for updraft-run: reading the inputs and expected outputs a user hands in,
// writing the outputs a model gives. Format: numpy.lib.format, versions 1.0, 2.0 and 3.0 (a
// magic, a header length, a Python dict literal with 'descr', 'fortran_order' and 'shape', then
// the raw elements).
//
// What it reads: little-endian (or one-byte) f32 f64 f16 i64 i32 i16 i8 u8 bool, C order (and a
// Fortran-order flag on an array whose layout is the same in both orders, e.g. 1-d). What it
// refuses, with an error that says why and how to convert: big-endian, Fortran order, object and
// structured arrays, any other dtype, a truncated or over-long file, a malformed header. A file
// is input from outside: every length is checked against the bytes actually present before
// anything is allocated.
//
// It does not depend on the runtime library (its own dtype list; main.cpp maps it onto
// updraft::runtime::DType), so its unit test links nothing else.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace updraft_run {

// The element types .npy files carry here (numpy's kind and size in the comment).
enum class NpyType { f32, f64, f16, i64, i32, i16, i8, u8, boolean };

const char* npy_type_name(NpyType t);   // "f32", ... "bool"
size_t npy_type_size(NpyType t);
const char* npy_type_descr(NpyType t);  // numpy's descr: "<f4", ... "|b1"
const char* npy_type_numpy(NpyType t);  // numpy's name: "float32", ... "bool"

// what() is one line: "[npy] FILE: what is wrong; how to fix it".
class NpyError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// An array with its own storage (64-byte aligned, as the engine's kernels like their inputs).
class NpyArray {
 public:
  NpyArray() = default;
  NpyArray(NpyType type, std::vector<int64_t> shape);  // zero-filled
  NpyType type() const { return type_; }
  const std::vector<int64_t>& shape() const { return shape_; }
  int64_t numel() const { return numel_; }
  size_t nbytes() const { return static_cast<size_t>(numel_) * npy_type_size(type_); }
  void* data() { return data_.get(); }
  const void* data() const { return data_.get(); }

 private:
  struct Free {
    void operator()(void* p) const;
  };
  NpyType type_ = NpyType::f32;
  std::vector<int64_t> shape_;
  int64_t numel_ = 0;
  std::unique_ptr<void, Free> data_;
};

// Parses the bytes of a .npy file; `what` names it in errors (a path).
NpyArray parse_npy(const std::string& bytes, const std::string& what);
// Reads a .npy file. Throws NpyError for a missing or unreadable file too.
NpyArray read_npy(const std::string& path);

// The bytes of a .npy file (version 1.0, or 2.0 when the header needs more than 64 KiB), header
// padded so the data starts at a multiple of 64 bytes as numpy writes it.
std::string npy_bytes(NpyType type, const std::vector<int64_t>& shape, const void* data);
// Writes a .npy file (to a temporary name, then renamed: a reader never sees half a file).
void write_npy(const std::string& path, NpyType type, const std::vector<int64_t>& shape, const void* data);

// "[2, 3]" for messages.
std::string shape_str(const std::vector<int64_t>& shape);

}  // namespace updraft_run
