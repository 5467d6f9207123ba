// NumPy .npy reading and writing (what and why: npy.h).
#include "npy.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "updraft-run reads .npy data in place: a little-endian host");

namespace updraft_run {

namespace {

struct TypeRow {
  NpyType type;
  const char* name;
  const char* descr;  // as numpy writes it
  const char* numpy;
  size_t size;
  char kind;          // numpy's kind character
};

// One table: names, descrs and sizes for reading, writing and messages.
constexpr TypeRow kTypes[] = {
    {NpyType::f32, "f32", "<f4", "float32", 4, 'f'},    {NpyType::f64, "f64", "<f8", "float64", 8, 'f'},
    {NpyType::f16, "f16", "<f2", "float16", 2, 'f'},    {NpyType::i64, "i64", "<i8", "int64", 8, 'i'},
    {NpyType::i32, "i32", "<i4", "int32", 4, 'i'},      {NpyType::i16, "i16", "<i2", "int16", 2, 'i'},
    {NpyType::i8, "i8", "|i1", "int8", 1, 'i'},         {NpyType::u8, "u8", "|u1", "uint8", 1, 'u'},
    {NpyType::boolean, "bool", "|b1", "bool", 1, 'b'},
};

const TypeRow& row(NpyType t) {
  for (const auto& r : kTypes)
    if (r.type == t) return r;
  return kTypes[0];  // unreachable: every enumerator has a row
}

constexpr int kMaxDims = 64;  // numpy's NPY_MAXDIMS

[[noreturn]] void fail(const std::string& what, const std::string& msg) {
  throw NpyError("[npy] " + what + ": " + msg);
}

// A reader for the header: the repr of a Python dict, e.g.
// {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }
class HeaderParser {
 public:
  HeaderParser(const std::string& text, const std::string& what) : s_(text), what_(what) {}

  void parse(std::string& descr, bool& fortran, std::vector<int64_t>& shape) {
    bool has_descr = false, has_order = false, has_shape = false;
    expect('{');
    while (true) {
      skip_ws();
      if (peek() == '}') break;
      std::string key = string_lit();
      expect(':');
      skip_ws();
      if (key == "descr") {
        if (peek() == '[')
          fail(what_, "a structured array (a record dtype); save each field as its own array (np.save(path, arr[field]))");
        descr = string_lit();
        has_descr = true;
      } else if (key == "fortran_order") {
        fortran = bool_lit();
        has_order = true;
      } else if (key == "shape") {
        shape = tuple_lit();
        has_shape = true;
      } else {
        fail(what_, "the header has an unknown key '" + key + "'; write the file with numpy.save");
      }
      skip_ws();
      if (peek() == ',') {
        ++i_;
        continue;
      }
      skip_ws();
      if (peek() != '}') bad("',' or '}'");
    }
    if (!has_descr || !has_order || !has_shape)
      fail(what_, "the header lacks 'descr', 'fortran_order' or 'shape'; write the file with numpy.save");
  }

 private:
  char peek() const { return i_ < s_.size() ? s_[i_] : '\0'; }
  void skip_ws() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\t' || s_[i_] == '\n' || s_[i_] == '\r')) ++i_;
  }
  [[noreturn]] void bad(const char* wanted) {
    fail(what_, std::string("malformed header (expected ") + wanted + " at byte " + std::to_string(i_) +
                    "); write the file with numpy.save");
  }
  void expect(char c) {
    skip_ws();
    if (peek() != c) bad(std::string(1, c).c_str());
    ++i_;
  }
  std::string string_lit() {
    skip_ws();
    char q = peek();
    if (q != '\'' && q != '"') bad("a quoted string");
    size_t end = s_.find(q, i_ + 1);
    if (end == std::string::npos) bad("a closing quote");
    std::string out = s_.substr(i_ + 1, end - i_ - 1);
    i_ = end + 1;
    return out;
  }
  bool bool_lit() {
    if (s_.compare(i_, 4, "True") == 0) {
      i_ += 4;
      return true;
    }
    if (s_.compare(i_, 5, "False") == 0) {
      i_ += 5;
      return false;
    }
    bad("True or False");
  }
  std::vector<int64_t> tuple_lit() {
    if (peek() != '(') bad("a tuple");
    ++i_;
    std::vector<int64_t> out;
    while (true) {
      skip_ws();
      if (peek() == ')') {
        ++i_;
        return out;
      }
      if (peek() < '0' || peek() > '9') bad("a non-negative size");
      int64_t v = 0;
      while (peek() >= '0' && peek() <= '9') {
        if (__builtin_mul_overflow(v, 10, &v) || __builtin_add_overflow(v, peek() - '0', &v))
          fail(what_, "a size in the shape overflows 64 bits; the file is corrupt");
        ++i_;
      }
      if (peek() == 'L') ++i_;  // Python 2's long literal (old numpy)
      if (out.size() == static_cast<size_t>(kMaxDims))
        fail(what_, "more than " + std::to_string(kMaxDims) + " dimensions; the file is corrupt");
      out.push_back(v);
      skip_ws();
      if (peek() == ',') {
        ++i_;
      } else if (peek() != ')') {
        bad("',' or ')'");
      }
    }
  }

  const std::string& s_;
  const std::string& what_;
  size_t i_ = 0;
};

NpyType type_of_descr(const std::string& descr, const std::string& what) {
  if (descr.empty()) fail(what, "an empty dtype in the header; write the file with numpy.save");
  char order = descr[0];
  std::string body = descr;
  if (order == '<' || order == '>' || order == '|' || order == '=') body = descr.substr(1);
  else order = '=';
  if (body.size() < 1) fail(what, "dtype '" + descr + "' is not a dtype; write the file with numpy.save");
  char kind = body[0];
  if (kind == 'O')
    fail(what, "an object array (dtype 'O'); convert it to a numeric array first (np.asarray(arr, dtype=np.float32))");
  size_t size = 0;
  for (size_t k = 1; k < body.size(); ++k) {
    if (body[k] < '0' || body[k] > '9' || size > 1000) { size = 0; break; }
    size = size * 10 + static_cast<size_t>(body[k] - '0');
  }
  const TypeRow* found = nullptr;
  for (const auto& r : kTypes)
    if (r.kind == kind && r.size == size) found = &r;
  if (!found) {
    std::string names;
    for (const auto& r : kTypes) names += std::string(names.empty() ? "" : " ") + r.numpy;
    fail(what, "dtype '" + descr + "' is not one updraft-run reads (" + names +
                   "); convert it (e.g. arr.astype(np.float32))");
  }
  if (order == '>' && size > 1)
    fail(what, "big-endian data (dtype '" + descr + "'); convert it with arr.astype(arr.dtype.newbyteorder('<'))");
  return found->type;
}

// A Fortran-order array has the C layout when at most one of its dims is larger than 1.
bool same_layout_in_both_orders(const std::vector<int64_t>& shape) {
  int big = 0;
  for (int64_t d : shape) big += d > 1;
  return big <= 1;
}

uint32_t read_le(const std::string& b, size_t at, size_t n) {
  uint32_t v = 0;
  for (size_t k = 0; k < n; ++k) v |= static_cast<uint32_t>(static_cast<unsigned char>(b[at + k])) << (8 * k);
  return v;
}

}  // namespace

const char* npy_type_name(NpyType t) { return row(t).name; }
size_t npy_type_size(NpyType t) { return row(t).size; }
const char* npy_type_descr(NpyType t) { return row(t).descr; }
const char* npy_type_numpy(NpyType t) { return row(t).numpy; }

void NpyArray::Free::operator()(void* p) const { std::free(p); }

NpyArray::NpyArray(NpyType type, std::vector<int64_t> shape) : type_(type), shape_(std::move(shape)) {
  int64_t n = 1;
  for (int64_t d : shape_) {
    if (d < 0 || __builtin_mul_overflow(n, d, &n))
      throw NpyError("[npy] shape " + shape_str(shape_) + " is not a valid array shape; use sizes >= 0");
  }
  numel_ = n;
  size_t bytes = 0;
  if (__builtin_mul_overflow(static_cast<size_t>(n), npy_type_size(type), &bytes))
    throw NpyError("[npy] shape " + shape_str(shape_) + " is too large to hold; use a smaller shape");
  // 64-byte aligned, rounded up to a whole line (aligned_alloc wants a multiple of the alignment).
  size_t alloc = (bytes + 63) / 64 * 64;
  if (alloc < bytes) throw NpyError("[npy] shape " + shape_str(shape_) + " is too large to hold; use a smaller shape");
  void* p = std::aligned_alloc(64, alloc == 0 ? 64 : alloc);
  if (!p)
    throw NpyError("[npy] out of memory for an array of " + std::to_string(bytes) + " bytes; use a smaller shape");
  std::memset(p, 0, alloc == 0 ? 64 : alloc);
  data_.reset(p);
}

std::string shape_str(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t k = 0; k < shape.size(); ++k) {
    if (k) s += ", ";
    s += std::to_string(shape[k]);
  }
  return s + "]";
}

NpyArray parse_npy(const std::string& b, const std::string& what) {
  static const char kMagic[] = "\x93NUMPY";
  if (b.size() < 10 || b.compare(0, 6, kMagic, 6) != 0)
    fail(what, "not a .npy file (no \\x93NUMPY magic); save arrays with numpy.save (not np.savez or text)");
  unsigned major = static_cast<unsigned char>(b[6]);
  size_t start = 0, hlen = 0;
  if (major == 1) {
    hlen = read_le(b, 8, 2);
    start = 10;
  } else if (major == 2 || major == 3) {
    if (b.size() < 12) fail(what, "truncated header; the file is incomplete, write it again with numpy.save");
    hlen = read_le(b, 8, 4);
    start = 12;
  } else {
    fail(what, ".npy format version " + std::to_string(major) + "." + std::to_string(static_cast<unsigned char>(b[7])) +
                   " is newer than this reader (1.0 to 3.0); save with numpy.save(..., allow_pickle=False) from a numpy that writes 1.0/2.0");
  }
  if (hlen > b.size() - start)
    fail(what, "truncated header (" + std::to_string(hlen) + " bytes announced, " + std::to_string(b.size() - start) +
                   " present); the file is incomplete, write it again with numpy.save");
  std::string header = b.substr(start, hlen);
  std::string descr;
  bool fortran = false;
  std::vector<int64_t> shape;
  HeaderParser(header, what).parse(descr, fortran, shape);
  NpyType type = type_of_descr(descr, what);
  if (fortran && !same_layout_in_both_orders(shape))
    fail(what, "Fortran-order data; save a C-order copy (np.save(path, np.ascontiguousarray(arr)))");
  // Sizes are checked against the bytes present before the array is allocated.
  size_t data_start = start + hlen;
  size_t present = b.size() - data_start;
  int64_t numel = 1;
  for (int64_t d : shape)
    if (__builtin_mul_overflow(numel, d, &numel)) fail(what, "shape " + shape_str(shape) + " overflows; the file is corrupt");
  size_t want = 0;
  if (__builtin_mul_overflow(static_cast<size_t>(numel), npy_type_size(type), &want))
    fail(what, "shape " + shape_str(shape) + " overflows; the file is corrupt");
  if (present < want)
    fail(what, "truncated data (" + std::string(npy_type_name(type)) + shape_str(shape) + " needs " + std::to_string(want) +
                   " bytes, the file has " + std::to_string(present) + "); the file is incomplete, write it again");
  if (present > want)
    fail(what, std::to_string(present - want) + " bytes after the array's data (" + npy_type_name(type) + shape_str(shape) +
                   "); not a single .npy array (np.savez archives and appended files are not read)");
  NpyArray arr(type, std::move(shape));
  if (want) std::memcpy(arr.data(), b.data() + data_start, want);
  return arr;
}

NpyArray read_npy(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) fail(path, "is a directory; give a .npy file");
  std::ifstream f(path, std::ios::binary);
  if (!f)
    fail(path, std::string("cannot open (") + std::strerror(errno) + "); check the path");
  std::ostringstream ss;
  ss << f.rdbuf();
  if (f.bad()) fail(path, "read error; check the file");
  return parse_npy(ss.str(), path);
}

std::string npy_bytes(NpyType type, const std::vector<int64_t>& shape, const void* data) {
  std::string dict = std::string("{'descr': '") + npy_type_descr(type) + "', 'fortran_order': False, 'shape': (";
  int64_t numel = 1;
  for (size_t k = 0; k < shape.size(); ++k) {
    if (k) dict += ", ";
    dict += std::to_string(shape[k]);
    numel *= shape[k];
  }
  dict += shape.size() == 1 ? ",), }" : "), }";
  // Version 1.0 holds a header up to 65535 bytes; longer ones (thousands of dims) need 2.0.
  bool v2 = dict.size() + 1 + 10 + 64 > 65535;
  size_t prefix = v2 ? 12 : 10;
  size_t total = (prefix + dict.size() + 1 + 63) / 64 * 64;
  dict.append(total - prefix - dict.size() - 1, ' ');
  dict += '\n';
  std::string out("\x93NUMPY", 6);
  out += static_cast<char>(v2 ? 2 : 1);
  out += '\0';
  size_t hlen = dict.size();
  for (size_t k = 0; k < (v2 ? 4u : 2u); ++k) out += static_cast<char>((hlen >> (8 * k)) & 0xff);
  out += dict;
  out.append(static_cast<const char*>(data), static_cast<size_t>(numel) * npy_type_size(type));
  return out;
}

void write_npy(const std::string& path, NpyType type, const std::vector<int64_t>& shape, const void* data) {
  std::string bytes = npy_bytes(type, shape, data);
  std::string tmp = path + ".tmp" + std::to_string(::getpid());
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    if (!f) fail(path, std::string("cannot write (") + std::strerror(errno) + "); check the directory exists and is writable");
    f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    f.close();
    if (!f) {
      std::remove(tmp.c_str());
      fail(path, "write failed (disk full?); free space and run again");
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    int e = errno;
    std::remove(tmp.c_str());
    fail(path, std::string("cannot write (") + std::strerror(e) + "); check the directory is writable");
  }
}

}  // namespace updraft_run
