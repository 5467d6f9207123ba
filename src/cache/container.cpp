// The shared binary container (cache/container.h, docs/format.md).
#include "cache/container.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <vector>

#include "core/checked.h"
#include "core/error.h"
#include "core/hash.h"

namespace updraft::container {

namespace {

template <typename T>
void put(std::string& out, T x) {
  out.append(reinterpret_cast<const char*>(&x), sizeof x);
}

std::string noun(const Kind& k) { return k.noun; }

}  // namespace

Writer::Writer(const Kind& kind, size_t reserve) {
  out_.reserve(kHeaderBytes + reserve);
  out_.append(kind.magic, 8);
  put<uint32_t>(out_, kind.version);
  put<uint32_t>(out_, 0);  // field count, length and checksum: filled in by finish()
  put<uint64_t>(out_, 0);
  put<uint64_t>(out_, 0);
}

// A field is `u32 name length, name bytes, u64 data length, data bytes`.
void Writer::add(const std::string& name, std::string_view data) {
  put<uint32_t>(out_, static_cast<uint32_t>(name.size()));
  out_ += name;
  put<uint64_t>(out_, data.size());
  out_ += data;
  ++nfields_;
}

void Writer::add_tensor(const std::string& name, const Tensor& t) {
  std::string head = dtype_name(t.dtype());
  for (int64_t d : t.shape()) {
    head += ' ';
    head += std::to_string(d);
  }
  size_t data_at = out_.size() + 4 + name.size() + 8 + head.size() + 1;
  head.append((kAlign - data_at % kAlign) % kAlign, ' ');
  head += "\n";
  put<uint32_t>(out_, static_cast<uint32_t>(name.size()));
  out_ += name;
  put<uint64_t>(out_, head.size() + t.nbytes());
  out_ += head;
  out_.append(static_cast<const char*>(t.data()), t.nbytes());
  ++nfields_;
}

std::string Writer::finish() {
  uint64_t length = out_.size() - kHeaderBytes;
  std::memcpy(&out_[12], &nfields_, 4);
  std::memcpy(&out_[16], &length, 8);
  uint64_t sum = xxh3_64(out_.data() + kHeaderBytes, length);
  std::memcpy(&out_[24], &sum, 8);
  return std::move(out_);
}

Tensor blob_tensor(const std::string& name, std::string_view s, const Buffer& buf, const Kind& kind) {
  const std::string where = noun(kind) + " field " + name;
  size_t nl = s.find('\n');
  UPDRAFT_CHECK(nl != std::string_view::npos, kind.component, where + " has no tensor header");
  std::vector<std::string> words;
  size_t b = 0;
  std::string head(s.substr(0, nl));
  while (b <= head.size()) {
    size_t e = head.find(' ', b);
    if (e == std::string::npos) e = head.size();
    if (e > b) words.push_back(head.substr(b, e - b));
    b = e + 1;
  }
  UPDRAFT_CHECK(!words.empty(), kind.component, where + " has an empty tensor header");
  DType dt;
  try {
    dt = dtype_from_name(words[0]);
  } catch (const Error&) {
    throw Error(kind.component, where + " has an unknown dtype '" + words[0] + "'");
  }
  UPDRAFT_CHECK(words.size() - 1 <= static_cast<size_t>(kMaxDims), kind.component,
                where + " has rank " + std::to_string(words.size() - 1) + ", over the engine limit of 8");
  std::vector<int64_t> shape;
  for (size_t i = 1; i < words.size(); ++i) {
    int64_t d = -1;
    const std::string& w = words[i];
    auto [end, ec] = std::from_chars(w.data(), w.data() + w.size(), d);
    UPDRAFT_CHECK(ec == std::errc() && end == w.data() + w.size() && d >= 0, kind.component,
                  where + " has a bad size '" + w + "'");
    shape.push_back(d);
  }
  // Checked: a count whose byte size wraps to the bytes stored would pass the check below and
  // hand kernels a tensor far larger than its memory.
  size_t nbytes = 0;
  try {
    nbytes = shape_nbytes(shape, dt, kind.component);
  } catch (const Error& e) {
    throw Error(kind.component, where + " has a tensor header whose size does not fit: " + e.what());
  }
  UPDRAFT_CHECK(s.size() - nl - 1 == nbytes, kind.component,
                where + " holds " + std::to_string(s.size() - nl - 1) + " bytes, its header says " +
                    std::to_string(nbytes));
  const char* data = s.data() + nl + 1;
  if (nbytes == 0) return Tensor(dt, shape);
  if (reinterpret_cast<uintptr_t>(data) % kAlign != 0) {  // a hand-made file: copy, never misalign
    Tensor t(dt, shape);
    std::memcpy(t.data(), data, nbytes);
    return t;
  }
  // Kernels never write constants; the storage is non-const only because Tensor's is.
  return Tensor(dt, shape, std::shared_ptr<void>(buf.owner, const_cast<char*>(data)));
}

Header read_header(std::string_view bytes, const Kind& kind) { return read_header(bytes, bytes.size(), kind); }

Header read_header(std::string_view head, uint64_t file_size, const Kind& kind) {
  const uint64_t have = std::min<uint64_t>(head.size(), file_size);
  UPDRAFT_CHECK(have >= 8 && std::memcmp(head.data(), kind.magic, 8) == 0, kind.component,
                std::string("not an updraft ") + kind.what + " (bad magic)");
  UPDRAFT_CHECK(have >= kHeaderBytes, kind.component,
                noun(kind) + " is truncated (" + std::to_string(file_size) + " bytes, shorter than its header)");
  Header h;
  std::memcpy(&h.version, head.data() + 8, 4);
  std::memcpy(&h.nfields, head.data() + 12, 4);
  std::memcpy(&h.length, head.data() + 16, 8);
  std::memcpy(&h.checksum, head.data() + 24, 8);
  UPDRAFT_CHECK(h.version == kind.version, kind.component,
                noun(kind) + " has format version " + std::to_string(h.version) + ", this engine reads version " +
                    std::to_string(kind.version) + kind.fix);
  const uint64_t payload = file_size - kHeaderBytes;
  UPDRAFT_CHECK(payload >= h.length, kind.component,
                noun(kind) + " is truncated: " + std::to_string(payload) + " payload bytes of " +
                    std::to_string(h.length));
  UPDRAFT_CHECK(payload == h.length, kind.component,
                noun(kind) + " has " + std::to_string(payload - h.length) + " stray bytes after its payload");
  return h;
}

Fields read_fields(std::string_view bytes, const Header& h, const Kind& kind) {
  const char* p = bytes.data() + kHeaderBytes;
  const uint64_t length = h.length;
  Fields c;
  size_t at = 0;
  auto need = [&](size_t n) {
    UPDRAFT_CHECK(length - at >= n, kind.component, noun(kind) + " is corrupt (a field runs past the payload)");
  };
  for (uint32_t i = 0; i < h.nfields; ++i) {
    uint32_t nlen;
    uint64_t dlen;
    need(4);
    std::memcpy(&nlen, p + at, 4);
    at += 4;
    need(nlen);
    std::string name(p + at, nlen);
    at += nlen;
    need(8);
    std::memcpy(&dlen, p + at, 8);
    at += 8;
    need(dlen);
    // A second field of a name would be one the checks never saw: which one is used depends on
    // the reader.
    auto [it, fresh] = c.emplace(std::move(name), std::string_view(p + at, dlen));
    UPDRAFT_CHECK(fresh, kind.component, noun(kind) + " is corrupt (field '" + it->first + "' appears twice)");
    at += dlen;
  }
  UPDRAFT_CHECK(at == length, kind.component, noun(kind) + " is corrupt (payload longer than its fields)");
  return c;
}

void check_sum(const Header& h, uint64_t got, const Kind& kind) {
  UPDRAFT_CHECK(got == h.checksum, kind.component, noun(kind) + " is corrupt (checksum mismatch)");
}

uint64_t payload_sum(std::string_view bytes, const Header& h) {
  return xxh3_64(bytes.data() + kHeaderBytes, h.length);
}

Fields read_verified(std::string_view bytes, const Kind& kind) {
  Header h = read_header(bytes, kind);
  check_sum(h, payload_sum(bytes, h), kind);
  return read_fields(bytes, h, kind);
}

size_t read_fd(int fd, char* p, size_t want, const std::string& path, const Kind& kind) {
  size_t got = 0;
  while (got < want) {
    ssize_t n = ::read(fd, p + got, want - got);
    if (n < 0 && errno == EINTR) continue;
    UPDRAFT_CHECK(n >= 0, kind.component, "cannot read " + noun(kind) + " " + path + ": " + std::strerror(errno));
    if (n == 0) break;
    got += static_cast<size_t>(n);
  }
  return got;
}

std::string_view field(const Fields& c, const std::string& name, const Kind& kind) {
  auto it = c.find(name);
  UPDRAFT_CHECK(it != c.end(), kind.component, noun(kind) + " has no '" + name + "' field");
  return it->second;
}

}  // namespace updraft::container
