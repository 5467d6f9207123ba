// The binary container both updraft file kinds share (docs/format.md): compile-cache entries
// (cache/entry.h) and compiled model files (model/model_file.h). A 32-byte header (8-byte magic,
// u32 format version, u32 field count, u64 payload length, u64 XXH3-64 of the payload), then
// named fields back to back; a tensor field's raw bytes start at a multiple of 64 from the start
// of the file, so a loaded file's tensors are used in place.
//
// What it does: write fields, check the header (magic, version, length) and the checksum, split
// the payload into fields with every length bounds-checked, and turn a tensor field into a
// Tensor sharing the file's memory. What it does not: decide what the fields mean, or where the
// bytes come from (the entry reads a trusted file into private memory; a model file is mapped).
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>

#include "core/tensor.h"

namespace updraft::container {

inline constexpr size_t kHeaderBytes = 32;
inline constexpr size_t kAlign = 64;

// Which file kind a container is: its magic and the one format version this engine reads, and
// the words its errors use ("[cache] entry is truncated", "[model] model file is truncated").
struct Kind {
  const char* magic;      // 8 bytes
  uint32_t version;
  const char* component;  // the error's component
  const char* noun;       // "entry", "model file"
  const char* what;       // for a bad magic: "not an updraft <what>"
  const char* fix;        // appended to a version mismatch: what the user does about it
};

class Writer {
 public:
  Writer(const Kind& kind, size_t reserve);
  void add(const std::string& name, std::string_view data);
  // "<dtype> <d0> <d1> ...", padded so that the raw bytes after its '\n' are 64-byte aligned.
  void add_tensor(const std::string& name, const Tensor& t);
  // The finished bytes: field count, length and checksum filled in.
  std::string finish();

 private:
  std::string out_;
  uint32_t nfields_ = 0;
};

// The bytes of a file and what keeps them alive (private memory or a mapping).
struct Buffer {
  std::shared_ptr<const char> owner;
  size_t size = 0;
  std::string_view view() const { return {owner.get(), size}; }
};

struct Header {
  uint32_t version = 0, nfields = 0;
  uint64_t length = 0, checksum = 0;
};

using Fields = std::map<std::string, std::string_view, std::less<>>;

// Magic, version, and the length against the bytes (truncated, stray bytes).
Header read_header(std::string_view bytes, const Kind& kind);
// The same checks from the first bytes of a file of `file_size` bytes (`head`: at least its first
// min(file_size, kHeaderBytes)), so a reader can refuse a file before allocating its size.
Header read_header(std::string_view head, uint64_t file_size, const Kind& kind);
// The field table, bounds-checked but not checksummed: trusted only once check_sum has passed.
Fields read_fields(std::string_view bytes, const Header& h, const Kind& kind);
uint64_t payload_sum(std::string_view bytes, const Header& h);
void check_sum(const Header& h, uint64_t got, const Kind& kind);
// All three, in order: the fields of a verified container.
Fields read_verified(std::string_view bytes, const Kind& kind);
// Reads up to `want` bytes of the open file `fd` into `p`, retrying on EINTR; fewer when the file
// was truncated meanwhile (the header or length check then reports it). A read error is an Error
// naming `path`.
size_t read_fd(int fd, char* p, size_t want, const std::string& path, const Kind& kind);
// A field that must be there.
std::string_view field(const Fields& c, const std::string& name, const Kind& kind);
// A tensor over stored bytes `s` of field `name` (see Writer::add_tensor), sharing `buf`'s memory
// when aligned (copied otherwise). Header sizes are checked against the bytes stored.
Tensor blob_tensor(const std::string& name, std::string_view s, const Buffer& buf, const Kind& kind);

}  // namespace updraft::container
