// The compile-cache entry container (docs/format.md): writer, reader and the refit replay.
#include "cache/entry.h"

#include "cache/container.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <algorithm>
#include <map>
#include <set>
#include <string_view>
#include <thread>

#include "core/checked.h"
#include "core/error.h"
#include "core/hash.h"
#include "core/version.h"
#include "ir/op_table.h"
#include "ir/text.h"
#include "passes/constant_fold.h"

namespace updraft {

namespace {

const container::Kind kEntry{"UPDRAFTE", kEntryFormatVersion, "cache", "entry", "cache entry", ""};
// Above this much payload, the checksum runs on a second thread while the parameters'
// fingerprints are taken on this one (both are memory-bound passes over ~100 MB for ResNet-50).
constexpr size_t kParallelVerifyBytes = size_t{8} << 20;

using container::Buffer;
using container::Fields;
using container::Header;

// "p3", "d12": a reference to parameter / folded constant / stored blob number i.
std::string ref_name(char kind, size_t i) {
  std::string r(1, kind);
  r += std::to_string(i);
  return r;
}

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

std::string_view field(const Fields& c, const std::string& name) { return container::field(c, name, kEntry); }

EntryMeta meta_of(const Fields& c) {
  return {std::string(field(c, "key")), std::string(field(c, "note")), std::string(field(c, "engine")),
          std::string(field(c, "cpu"))};
}

std::string hex64(uint64_t x) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(x));
  return buf;
}

// A parameter's fingerprint: XXH3-64 of its bytes (its dtype and shape are checked apart).
uint64_t fingerprint(const Tensor& t) { return xxh3_64(t.data(), t.nbytes()); }

// Values read by nodes or graph outputs.
std::set<const Value*> used_values(const Graph& g) {
  std::set<const Value*> used;
  for (Node* n : g.nodes())
    for (Value* v : n->inputs) used.insert(v);
  for (Value* v : g.outputs()) used.insert(v);
  return used;
}

}  // namespace

std::string save_entry(const Graph& g, const EntryMeta& meta, const SaveOptions& opts) {
  // Which fold record produced each value.
  std::map<int, size_t> made_by;
  const std::vector<FoldRecord>& folds = g.folds();
  for (size_t r = 0; r < folds.size(); ++r)
    for (int id : folds[r].outputs) made_by[id] = r;

  std::vector<const Tensor*> blobs;
  std::map<const Value*, std::string> refs;  // main-graph constant -> extern ref
  std::vector<const Value*> derived;          // init-graph outputs, in order
  std::set<size_t> needed;                    // fold records to replay
  std::vector<int> work;
  for (const Value* v : used_values(g)) {
    if (!v->is_constant()) continue;
    if (v->source >= 0) {
      refs[v] = "p" + std::to_string(v->source);
    } else if (made_by.count(v->id)) {
      refs[v] = "d" + std::to_string(derived.size());
      derived.push_back(v);
      work.push_back(v->id);
    } else {
      refs[v] = "b" + std::to_string(blobs.size());
      blobs.push_back(&*v->constant);
    }
  }
  while (!work.empty()) {
    int id = work.back();
    work.pop_back();
    size_t r = made_by.at(id);
    if (!needed.insert(r).second) continue;
    for (int in : folds[r].inputs)
      if (made_by.count(in)) work.push_back(in);
  }

  // The init graph: parameters in, recorded folds replayed in their original order, the
  // derived constants out.
  Graph init;
  std::map<int, Value*> init_val;  // original value id -> init graph value
  std::map<const Value*, std::string> init_refs;
  std::set<int> sources_used;
  for (size_t r : needed)
    for (int in : folds[r].inputs)
      if (g.value(in)->source >= 0) sources_used.insert(g.value(in)->source);
  std::map<int, Value*> source_input;
  for (int j : sources_used) source_input[j] = nullptr;
  for (size_t r : needed) {
    for (int in : folds[r].inputs) {
      const Value* v = g.value(in);
      if (init_val.count(in) || made_by.count(in)) continue;
      if (v->source >= 0) {
        Value*& si = source_input[v->source];
        if (!si) si = init.add_input("p" + std::to_string(v->source), v->type);
        init_val[in] = si;
      } else {
        Value* c = init.add_constant("", *v->constant);
        init_refs[c] = "b" + std::to_string(blobs.size());
        blobs.push_back(&*v->constant);
        init_val[in] = c;
      }
    }
  }
  for (size_t r : needed) {
    const FoldRecord& rec = folds[r];
    std::vector<Value*> ins;
    for (int in : rec.inputs) ins.push_back(init_val.at(in));
    Node* n = init.add_node(rec.op, std::move(ins), rec.attrs);
    UPDRAFT_CHECK(n->outputs.size() == rec.outputs.size(), "cache",
                  "fold record of " + rec.op + " has " + std::to_string(rec.outputs.size()) + " results, the op gives " +
                      std::to_string(n->outputs.size()));
    for (size_t k = 0; k < rec.outputs.size(); ++k) {
      UPDRAFT_CHECK(n->outputs[k]->type == g.value(rec.outputs[k])->type, "cache",
                    "fold record of " + rec.op + " replays to " + n->outputs[k]->type.str() + ", it recorded " +
                        g.value(rec.outputs[k])->type.str());
      init_val[rec.outputs[k]] = n->outputs[k];
    }
  }
  std::vector<Value*> init_outs;
  for (const Value* v : derived) init_outs.push_back(init_val.at(v->id));
  init.set_outputs(init_outs);

  PrintOptions main_opts, init_opts;
  main_opts.constant_ref = [&](const Value* v) { return refs.at(v); };
  init_opts.constant_ref = [&](const Value* v) { return init_refs.at(v); };

  // The parameters the init graph reads, with their fingerprints: a load whose parameters
  // match them all may use the stored folded values instead of replaying.
  std::map<int, const Tensor*> source_tensor;
  for (size_t r : needed)
    for (int in : folds[r].inputs)
      if (g.value(in)->source >= 0) source_tensor[g.value(in)->source] = &*g.value(in)->constant;
  std::string prints;
  for (const auto& [j, t] : source_tensor) {
    prints += ref_name('p', static_cast<size_t>(j));
    prints += ' ';
    prints += hex64(fingerprint(*t));
    prints += '\n';
  }
  // Stored values pay when replaying costs more than fingerprinting: a load that maps them
  // hashes the sources and the stored bytes, one that replays reads the sources and writes
  // (into fresh, page-faulting memory) the folded values. So they are stored when they are at
  // least half the size of their sources (conv weights scaled by batch norm: about equal),
  // not for a small gather from a large table (BERT's position embeddings: 0.4 of 1.5 MB).
  size_t folded_bytes = 0, source_bytes = 0;
  for (const Value* v : derived) folded_bytes += v->constant->nbytes();
  for (const auto& [j, t] : source_tensor) source_bytes += t->nbytes();
  const bool store_folded =
      !derived.empty() && folded_bytes <= opts.max_folded_bytes && 2 * folded_bytes >= source_bytes;

  // One allocation: the entry can be ~100 MB of folded weights.
  std::string graph_text = print_graph(g, main_opts), init_text = print_graph(init, init_opts);
  size_t reserve = 1024 + graph_text.size() + init_text.size() + prints.size() + meta.key.size() +
                   meta.note.size();
  for (const Tensor* t : blobs) reserve += t->nbytes() + container::kAlign + 64;
  if (store_folded)
    for (const Value* v : derived) reserve += v->constant->nbytes() + container::kAlign + 64;
  container::Writer out(kEntry, reserve);
  out.add("key", meta.key);
  out.add("note", meta.note);
  out.add("engine", kEngineVersion);
  out.add("cpu", cpu_features());
  out.add("graph", graph_text);
  out.add("init", init_text);
  out.add("fingerprints", prints);
  for (size_t i = 0; i < blobs.size(); ++i) out.add_tensor(ref_name('b', i), *blobs[i]);
  if (store_folded)
    for (size_t k = 0; k < derived.size(); ++k) out.add_tensor(ref_name('d', k), *derived[k]->constant);
  return out.finish();
}

EntryMeta read_entry_meta(const std::string& bytes) { return meta_of(container::read_verified(bytes, kEntry)); }

namespace {

bool checked_ref(std::string_view ref, char kind) {
  bool ok = ref.size() >= 2 && ref[0] == kind;
  for (size_t i = 1; ok && i < ref.size(); ++i) ok = ref[i] >= '0' && ref[i] <= '9';
  return ok;
}

// The number of a checked reference ("p12" -> 12); a number past size_t is a defect, reported
// as one (std::stoul's out_of_range is no updraft Error).
size_t ref_number(std::string_view ref) {
  size_t j = 0;
  auto [end, ec] = std::from_chars(ref.data() + 1, ref.data() + ref.size(), j);
  UPDRAFT_CHECK(ec == std::errc() && end == ref.data() + ref.size(), "cache",
                "entry refers to '" + std::string(ref) + "', whose number is out of range");
  return j;
}

// "pJ <hex>" lines -> (J, fingerprint); malformed lines are a defect.
std::vector<std::pair<size_t, uint64_t>> parse_fingerprints(std::string_view text) {
  std::vector<std::pair<size_t, uint64_t>> out;
  while (!text.empty()) {
    size_t nl = text.find('\n');
    std::string line(text.substr(0, nl));
    text = nl == std::string_view::npos ? std::string_view() : text.substr(nl + 1);
    size_t sp = line.find(' ');
    UPDRAFT_CHECK(sp != std::string::npos && checked_ref(std::string_view(line).substr(0, sp), 'p') &&
                      line.size() == sp + 17,
                  "cache", "entry has a bad fingerprint line '" + line + "'");
    char* end = nullptr;
    uint64_t fp = std::strtoull(line.c_str() + sp + 1, &end, 16);
    UPDRAFT_CHECK(end && *end == '\0', "cache", "entry has a bad fingerprint line '" + line + "'");
    out.push_back({ref_number(std::string_view(line).substr(0, sp)), fp});
  }
  return out;
}

std::unique_ptr<Graph> load_buffer(const Buffer& buf, const std::string& key,
                                   const std::vector<std::optional<Tensor>>& sources, LoadInfo* info) {
  LoadInfo local;
  LoadInfo& li = info ? *info : local;
  auto t0 = std::chrono::steady_clock::now();
  std::string_view bytes = buf.view();
  Header h = container::read_header(bytes, kEntry);

  // The checksum runs beside the fingerprints when the entry is large. Nothing read from the
  // fields is trusted (or reported) before it has matched.
  uint64_t sum = 0;
  std::thread summer;
  const bool parallel = h.length >= kParallelVerifyBytes;
  // Nothing here throws; if it did, the exception must not leave the thread (std::terminate):
  // the sum then stays 0 and the entry is reported corrupt.
  auto checksum = [&]() noexcept {
    try {
      auto ts = std::chrono::steady_clock::now();
      sum = container::payload_sum(bytes, h);
      li.checksum_ms = ms_since(ts);
    } catch (...) {
      sum = ~h.checksum;
    }
  };
  if (parallel) summer = std::thread(checksum);
  else checksum();
  auto join = [&] {
    if (summer.joinable()) summer.join();
  };
  // Joins on every way out of this function, whatever is thrown: a joinable std::thread's
  // destructor calls std::terminate.
  struct Joiner {
    std::thread& t;
    ~Joiner() {
      if (t.joinable()) t.join();
    }
  } joiner{summer};
  Fields c;
  bool prints_match = false;
  try {
    c = container::read_fields(bytes, h, kEntry);
    // Whether the caller's parameters are the ones the stored folded values came from.
    auto d0 = c.find("d0");
    if (d0 != c.end()) {
      auto tf = std::chrono::steady_clock::now();
      auto fp = c.find("fingerprints");
      prints_match = fp != c.end();
      if (prints_match)
        for (const auto& [j, want] : parse_fingerprints(fp->second)) {
          if (j >= sources.size() || !sources[j] || fingerprint(*sources[j]) != want) {
            prints_match = false;
            break;
          }
        }
      li.fingerprint_ms = ms_since(tf);
    }
  } catch (...) {
    join();
    container::check_sum(h, sum, kEntry);  // a corrupt entry is reported as corrupt, not by its symptom
    throw;
  }
  join();
  container::check_sum(h, sum, kEntry);
  li.verify_ms = ms_since(t0);

  EntryMeta m = meta_of(c);
  UPDRAFT_CHECK(m.engine == kEngineVersion, "cache",
                "entry was written by engine " + m.engine + ", this is engine " + kEngineVersion);
  std::string cpu = cpu_features();
  UPDRAFT_CHECK(m.cpu == cpu, "cache", "entry was written on a CPU with {" + m.cpu + "}, this one has {" + cpu + "}");
  UPDRAFT_CHECK(m.key == key, "cache", "entry holds key " + m.key + ", expected " + key);

  auto blob = [&](const std::string& ref) { return container::blob_tensor(ref, field(c, ref), buf, kEntry); };
  // Parameter J of "pJ" (a checked reference), with the dtype and shape the entry was compiled for.
  auto source = [&](const std::string& ref, const TensorType& type) {
    size_t j = ref_number(ref);
    UPDRAFT_CHECK(j < sources.size() && sources[j].has_value(), "cache",
                  "entry needs parameter " + ref.substr(1) + ", which the caller did not give");
    const Tensor& t = *sources[j];
    bool same_shape = t.shape().size() == type.shape.size();
    for (size_t i = 0; same_shape && i < type.shape.size(); ++i)
      same_shape = type.shape[i].is_static() && type.shape[i].value() == t.shape()[i];
    UPDRAFT_CHECK(t.dtype() == type.dtype && same_shape, "cache",
                  "parameter " + std::to_string(j) + " is " + dtype_name(t.dtype()) + shape_str(shape_from(t.shape())) +
                      ", the entry was compiled for " + type.str());
    return t;
  };

  // The folded constants: the stored ones when the parameters match their fingerprints, else
  // the recipes replayed over the parameters.
  std::vector<Tensor> derived;
  if (prints_match) {
    for (size_t k = 0;; ++k) {
      auto it = c.find(ref_name('d', k));
      if (it == c.end()) break;
      derived.push_back(container::blob_tensor(it->first, it->second, buf, kEntry));
    }
    li.mapped = true;
  } else {
    auto t1 = std::chrono::steady_clock::now();
    ExternResolver init_res = [&](const std::string& ref, const TensorType&) {
      UPDRAFT_CHECK(checked_ref(ref, 'b'), "cache", "init graph refers to '" + ref + "'");
      return blob(ref);
    };
    ParseOptions init_opts;
    init_opts.externs = &init_res;
    init_opts.max_generated_bytes = 0;  // constants by reference only: every byte is in the entry
    std::unique_ptr<Graph> init = parse_graph(std::string(field(c, "init")), init_opts);
    // What the replay reads: the parameters and stored blobs. A recorded fold grew its result
    // to at most 2x its inputs unless the result was tiny (passes/constant_fold.cpp; the
    // always-folds of fold_conv_bn and fuse_epilogue scale or reshape a weight), so a node
    // that would grow past that, or past 2x all the replay reads, was not written by save_entry
    // and is refused before its result is allocated.
    size_t read_bytes = 0;
    for (Value* cv : init->constants()) read_bytes = checked_add(read_bytes, cv->constant->nbytes(), "cache", "init graph bytes");
    std::vector<std::optional<Tensor>> val(init->num_values());
    for (Value* in : init->inputs()) {
      UPDRAFT_CHECK(checked_ref(in->name, 'p'), "cache", "init graph input '" + in->name + "' is not a parameter");
      val[in->id] = source(in->name, in->type);
      read_bytes = checked_add(read_bytes, val[in->id]->nbytes(), "cache", "init graph bytes");
    }
    constexpr size_t kTinyFold = 4096;
    auto fold_bound = [&](const Node& n, const std::vector<TensorView>& views) {
      size_t in_bytes = 0, out_bytes = 0;
      for (const TensorView& v : views) in_bytes = checked_add(in_bytes, v.nbytes(), "cache", "fold input bytes");
      for (const Value* o : n.outputs) {
        UPDRAFT_CHECK(shape_is_static(o->type.shape), "cache", "init graph node " + n.op_name() + " has a symbolic result");
        out_bytes = checked_add(out_bytes, shape_nbytes(shape_values(o->type.shape), o->type.dtype, "cache"), "cache",
                                "fold result bytes");
      }
      const size_t limit = std::max(kTinyFold, 2 * std::min(in_bytes, read_bytes));
      UPDRAFT_CHECK(out_bytes <= limit, "cache",
                    "init graph node " + n.op_name() + " would make " + std::to_string(out_bytes) + " bytes from " +
                        std::to_string(in_bytes) + ", more than a recorded fold makes (at most " +
                        std::to_string(limit) + "); the entry was not written by save_entry");
    };
    for (Value* cv : init->constants()) val[cv->id] = *cv->constant;
    std::vector<const Node*> last_use(init->num_values(), nullptr);
    for (Node* n : init->nodes())
      for (Value* v : n->inputs) last_use[v->id] = n;
    for (Node* n : init->nodes()) {
      std::vector<TensorView> views;
      for (Value* v : n->inputs) views.push_back(val.at(v->id)->view());
      fold_bound(*n, views);
      std::vector<Tensor> outs = evaluate_constant_node(*n, views);
      for (size_t k = 0; k < outs.size(); ++k) val[n->outputs[k]->id] = std::move(outs[k]);
      for (Value* v : n->inputs)  // intermediates die at their last use: the peak stays small
        if (v->producer && last_use[v->id] == n && !init->is_output(v)) val[v->id].reset();
    }
    for (Value* o : init->outputs()) derived.push_back(*val.at(o->id));
    li.replay_ms = ms_since(t1);
  }
  li.folded = derived.size();

  ExternResolver main_res = [&](const std::string& ref, const TensorType& type) -> Tensor {
    if (checked_ref(ref, 'p')) return source(ref, type);
    if (checked_ref(ref, 'b')) return blob(ref);
    UPDRAFT_CHECK(checked_ref(ref, 'd'), "cache", "graph refers to '" + ref + "'");
    size_t k = ref_number(ref);
    UPDRAFT_CHECK(k < derived.size(), "cache", "graph refers to folded constant " + ref + ", the entry has " +
                                                   std::to_string(derived.size()));
    return derived[k];
  };
  ParseOptions main_opts;
  main_opts.externs = &main_res;
  main_opts.max_generated_bytes = 0;
  return parse_graph(std::string(field(c, "graph")), main_opts);
}

// The bytes of the entry file at `path`, read into private memory once the file has passed the
// trust checks of docs/format.md ("Trust"): a regular file (never through a symbolic link, and
// a FIFO is refused without waiting for a writer), owned by this process's effective user and
// writable by nobody else. Read, not mapped: a mapping shares the page cache, so a write to the
// file in place would change a running model's constants (even through a private mapping, until
// a page is copied), and a truncation would kill the process with SIGBUS when they are next
// read. The checksum then runs over the very bytes that are used. A file that changes while it
// is read gives a short or inconsistent copy, which the length and checksum reject.
Buffer read_trusted_entry(const std::string& path) {
  // O_NONBLOCK: opening a FIFO for reading otherwise waits for a writer; it changes nothing for
  // a regular file.
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
  if (fd < 0) {
    int e = errno;
    UPDRAFT_CHECK(e != ELOOP, "cache",
                  "entry " + path + " is a symbolic link; entries are never read through links, remove it");
    throw Error("cache", "cannot open entry " + path + ": " + std::strerror(e));
  }
  std::unique_ptr<int, void (*)(int*)> closer(&fd, [](int* f) { ::close(*f); });
  struct stat st;
  UPDRAFT_CHECK(::fstat(fd, &st) == 0, "cache", "cannot stat entry " + path + ": " + std::strerror(errno));
  UPDRAFT_CHECK(S_ISREG(st.st_mode), "cache",
                "entry " + path + " is not a regular file (" +
                    (S_ISFIFO(st.st_mode) ? "a FIFO" : S_ISDIR(st.st_mode) ? "a directory" : "a device or socket") +
                    "); remove it");
  UPDRAFT_CHECK(st.st_uid == ::geteuid(), "cache",
                "entry " + path + " is owned by user " + std::to_string(st.st_uid) + ", not by this user (" +
                    std::to_string(::geteuid()) + "); an entry someone else wrote is never loaded, remove it");
  char mode[8];
  std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st.st_mode & 07777));
  UPDRAFT_CHECK((st.st_mode & (S_IWGRP | S_IWOTH)) == 0, "cache",
                "entry " + path + " is writable by other users (mode " + mode +
                    "); an entry others could have changed is never loaded, remove it");
  const size_t size = static_cast<size_t>(st.st_size);
  // 64-byte aligned (2 MB and huge-page backed when large), so stored tensors are used in place.
  std::shared_ptr<void> mem = aligned_alloc_shared(size);
  char* p = static_cast<char*>(mem.get());
  const size_t got = container::read_fd(fd, p, size, path, kEntry);
  return Buffer{std::shared_ptr<const char>(mem, p), got};
}

}  // namespace

std::unique_ptr<Graph> load_entry(const std::string& bytes, const std::string& key,
                                  const std::vector<std::optional<Tensor>>& sources, LoadInfo* info) {
  // A 64-byte aligned copy, so stored tensors are used in place, as in a file's.
  std::shared_ptr<void> mem = aligned_alloc_shared(bytes.size());
  if (!bytes.empty()) std::memcpy(mem.get(), bytes.data(), bytes.size());
  Buffer buf{std::shared_ptr<const char>(mem, static_cast<const char*>(mem.get())), bytes.size()};
  return load_buffer(buf, key, sources, info);
}

std::unique_ptr<Graph> load_entry_file(const std::string& path, const std::string& key,
                                       const std::vector<std::optional<Tensor>>& sources, LoadInfo* info) {
  return load_buffer(read_trusted_entry(path), key, sources, info);
}

}  // namespace updraft
