#include "kernels/onednn/packed_weights.h"

#include <mutex>
#include <unordered_map>

#include "core/hash.h"
#include "kernels/onednn/onednn_util.h"

namespace updraft::onednn {

namespace {

struct Entry {
  const void* data;
  size_t nbytes;
  dnnl::memory::desc user, packed;
  std::weak_ptr<void> storage;
};

struct Table {
  std::mutex mu;
  std::unordered_multimap<uint64_t, Entry> by_hash;  // source content hash -> entries
  size_t packs = 0, hits = 0;
};

Table& table() {
  static Table* t = new Table();  // never destroyed: kernels in static objects may outlive main
  return *t;
}

bool same_source(const Entry& e, const PackedWeights::Source& s) {
  return e.data == s.tensor->data() && e.nbytes == s.tensor->nbytes() && e.user == s.user;
}

// A live entry for this source in layout `packed`; null when none. Caller holds the lock.
std::shared_ptr<void> find_locked(Table& t, const PackedWeights::Source& s, const dnnl::memory::desc& packed) {
  auto [lo, hi] = t.by_hash.equal_range(s.hash);
  for (auto it = lo; it != hi; ++it) {
    if (!same_source(it->second, s) || !(it->second.packed == packed)) continue;
    if (auto p = it->second.storage.lock()) return p;
  }
  return nullptr;
}

void prune_locked(Table& t) {
  for (auto it = t.by_hash.begin(); it != t.by_hash.end();)
    it = it->second.storage.expired() ? t.by_hash.erase(it) : std::next(it);
}

}  // namespace

PackedWeights::Source PackedWeights::source(const Tensor& src, const dnnl::memory::desc& user) {
  return {&src, user, xxh3_64(src.data(), src.nbytes())};
}

std::shared_ptr<void> PackedWeights::get(const Source& s, const dnnl::memory::desc& packed, bool* hit,
                                         const PackFn& pack) {
  Table& t = table();
  {
    std::lock_guard<std::mutex> lock(t.mu);
    if (auto p = find_locked(t, s, packed)) {
      ++t.hits;
      if (hit) *hit = true;
      return p;
    }
  }
  // Packed outside the lock: a reorder of a large weight takes milliseconds, and other
  // compiles (other weights) need not wait for it.
  std::shared_ptr<void> storage;
  dnnl::memory dst = new_memory(packed, &storage);
  dnnl::memory src = wrap(s.user, s.tensor->data());
  if (pack) {
    pack(src, dst);
  } else {
    dnnl::stream st(engine());
    dnnl::reorder(src, dst).execute(st, src, dst);
    st.wait();
  }
  std::lock_guard<std::mutex> lock(t.mu);
  if (auto p = find_locked(t, s, packed)) {  // another thread packed the same meanwhile: one copy
    ++t.hits;
    if (hit) *hit = true;
    return p;
  }
  prune_locked(t);
  t.by_hash.emplace(s.hash, Entry{s.tensor->data(), s.tensor->nbytes(), s.user, packed, storage});
  ++t.packs;
  if (hit) *hit = false;
  return storage;
}

std::vector<dnnl::memory::desc> PackedWeights::layouts_of(const Source& s) {
  Table& t = table();
  std::lock_guard<std::mutex> lock(t.mu);
  std::vector<dnnl::memory::desc> r;
  auto [lo, hi] = t.by_hash.equal_range(s.hash);
  for (auto it = lo; it != hi; ++it)
    if (same_source(it->second, s) && !it->second.storage.expired()) r.push_back(it->second.packed);
  return r;
}

PackedWeightStats PackedWeights::stats() {
  Table& t = table();
  std::lock_guard<std::mutex> lock(t.mu);
  PackedWeightStats st;
  st.packs = t.packs;
  st.hits = t.hits;
  for (const auto& [h, e] : t.by_hash) {
    const long n = e.storage.use_count();
    if (n == 0) continue;
    const size_t bytes = e.packed.get_size();
    ++st.entries;
    st.bytes += bytes;
    st.holders += static_cast<size_t>(n);
    st.shared_bytes += bytes * static_cast<size_t>(n - 1);
  }
  return st;
}

}  // namespace updraft::onednn
