// The compile-cache entry container (docs/format.md): writer, reader and the refit replay.
#include "cache/entry.h"

#include <cctype>
#include <cstring>
#include <map>
#include <set>

#include "core/error.h"
#include "core/version.h"
#include "ir/op_table.h"
#include "ir/text.h"
#include "passes/constant_fold.h"

namespace updraft {

namespace {

constexpr char kMagic[8] = {'U', 'P', 'D', 'R', 'A', 'F', 'T', 'E'};
constexpr size_t kHeaderBytes = 32;  // magic, u32 version, u32 field count, u64 length, u64 checksum

uint64_t fnv1a64(const char* p, size_t n) {
  uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a 64 offset basis
  for (size_t i = 0; i < n; ++i) {
    h ^= static_cast<unsigned char>(p[i]);
    h *= 0x100000001b3ull;  // FNV prime
  }
  return h;
}

template <typename T>
void put(std::string& out, T x) {
  out.append(reinterpret_cast<const char*>(&x), sizeof x);
}

void put_field(std::string& out, const std::string& name, const std::string& data) {
  put<uint32_t>(out, static_cast<uint32_t>(name.size()));
  out += name;
  put<uint64_t>(out, data.size());
  out += data;
}

// A stored tensor: "<dtype> <d0> <d1> ...\n" then the raw bytes (row-major, little-endian).
std::string blob_bytes(const Tensor& t) {
  std::string s = dtype_name(t.dtype());
  for (int64_t d : t.shape()) s += " " + std::to_string(d);
  s += "\n";
  s.append(static_cast<const char*>(t.data()), t.nbytes());
  return s;
}

Tensor blob_tensor(const std::string& name, const std::string& s) {
  size_t nl = s.find('\n');
  UPDRAFT_CHECK(nl != std::string::npos, "cache", "entry field " + name + " has no tensor header");
  std::vector<std::string> words;
  size_t b = 0;
  std::string head = s.substr(0, nl);
  while (b <= head.size()) {
    size_t e = head.find(' ', b);
    if (e == std::string::npos) e = head.size();
    if (e > b) words.push_back(head.substr(b, e - b));
    b = e + 1;
  }
  UPDRAFT_CHECK(!words.empty(), "cache", "entry field " + name + " has an empty tensor header");
  DType dt;
  try {
    dt = dtype_from_name(words[0]);
  } catch (const Error&) {
    throw Error("cache", "entry field " + name + " has an unknown dtype '" + words[0] + "'");
  }
  std::vector<int64_t> shape;
  for (size_t i = 1; i < words.size(); ++i) {
    char* end = nullptr;
    long long d = std::strtoll(words[i].c_str(), &end, 10);
    UPDRAFT_CHECK(end && *end == '\0' && d >= 0, "cache", "entry field " + name + " has a bad size '" + words[i] + "'");
    shape.push_back(d);
  }
  Tensor t(dt, shape);
  UPDRAFT_CHECK(s.size() - nl - 1 == t.nbytes(), "cache",
                "entry field " + name + " holds " + std::to_string(s.size() - nl - 1) + " bytes, its header says " +
                    std::to_string(t.nbytes()));
  if (t.nbytes()) std::memcpy(t.data(), s.data() + nl + 1, t.nbytes());
  return t;
}

struct Container {
  std::map<std::string, std::string> fields;
};

Container read_container(const std::string& bytes) {
  UPDRAFT_CHECK(bytes.size() >= sizeof kMagic && std::memcmp(bytes.data(), kMagic, sizeof kMagic) == 0, "cache",
                "not an updraft cache entry (bad magic)");
  UPDRAFT_CHECK(bytes.size() >= kHeaderBytes, "cache", "entry is truncated (" + std::to_string(bytes.size()) +
                                                           " bytes, shorter than its header)");
  uint32_t version, nfields;
  uint64_t length, checksum;
  std::memcpy(&version, bytes.data() + 8, 4);
  std::memcpy(&nfields, bytes.data() + 12, 4);
  std::memcpy(&length, bytes.data() + 16, 8);
  std::memcpy(&checksum, bytes.data() + 24, 8);
  UPDRAFT_CHECK(version == kEntryFormatVersion, "cache",
                "entry has format version " + std::to_string(version) + ", this engine reads version " +
                    std::to_string(kEntryFormatVersion));
  UPDRAFT_CHECK(bytes.size() - kHeaderBytes >= length, "cache",
                "entry is truncated: " + std::to_string(bytes.size() - kHeaderBytes) + " payload bytes of " +
                    std::to_string(length));
  UPDRAFT_CHECK(bytes.size() - kHeaderBytes == length, "cache",
                "entry has " + std::to_string(bytes.size() - kHeaderBytes - length) + " stray bytes after its payload");
  const char* p = bytes.data() + kHeaderBytes;
  UPDRAFT_CHECK(fnv1a64(p, length) == checksum, "cache", "entry is corrupt (checksum mismatch)");
  Container c;
  size_t at = 0;
  auto need = [&](size_t n) {
    UPDRAFT_CHECK(length - at >= n, "cache", "entry is corrupt (a field runs past the payload)");
  };
  for (uint32_t i = 0; i < nfields; ++i) {
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
    c.fields[name] = std::string(p + at, dlen);
    at += dlen;
  }
  UPDRAFT_CHECK(at == length, "cache", "entry is corrupt (payload longer than its fields)");
  return c;
}

const std::string& field(const Container& c, const std::string& name) {
  auto it = c.fields.find(name);
  UPDRAFT_CHECK(it != c.fields.end(), "cache", "entry has no '" + name + "' field");
  return it->second;
}

EntryMeta meta_of(const Container& c) {
  return {field(c, "key"), field(c, "note"), field(c, "engine"), field(c, "cpu")};
}

// Values read by nodes or graph outputs.
std::set<const Value*> used_values(const Graph& g) {
  std::set<const Value*> used;
  for (Node* n : g.nodes())
    for (Value* v : n->inputs) used.insert(v);
  for (Value* v : g.outputs()) used.insert(v);
  return used;
}

}  // namespace

std::string cpu_features() {
  std::string r;
  auto add = [&](bool has, const char* name) {
    if (has) r += (r.empty() ? "" : ",") + std::string(name);
  };
  __builtin_cpu_init();
  add(__builtin_cpu_supports("sse4.2"), "sse4.2");
  add(__builtin_cpu_supports("avx"), "avx");
  add(__builtin_cpu_supports("avx2"), "avx2");
  add(__builtin_cpu_supports("fma"), "fma");
  add(__builtin_cpu_supports("avx512f"), "avx512f");
  add(__builtin_cpu_supports("avx512bw"), "avx512bw");
  add(__builtin_cpu_supports("avx512vl"), "avx512vl");
  add(__builtin_cpu_supports("avx512vnni"), "avx512vnni");
  add(__builtin_cpu_supports("avx512bf16"), "avx512bf16");
  return r;
}

std::string save_entry(const Graph& g, const EntryMeta& meta) {
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

  std::string payload;
  uint32_t nfields = 0;
  auto add = [&](const std::string& name, const std::string& data) {
    put_field(payload, name, data);
    ++nfields;
  };
  add("key", meta.key);
  add("note", meta.note);
  add("engine", kEngineVersion);
  add("cpu", cpu_features());
  add("graph", print_graph(g, main_opts));
  add("init", print_graph(init, init_opts));
  for (size_t i = 0; i < blobs.size(); ++i) add("b" + std::to_string(i), blob_bytes(*blobs[i]));

  std::string out(kMagic, sizeof kMagic);
  put<uint32_t>(out, kEntryFormatVersion);
  put<uint32_t>(out, nfields);
  put<uint64_t>(out, payload.size());
  put<uint64_t>(out, fnv1a64(payload.data(), payload.size()));
  out += payload;
  return out;
}

EntryMeta read_entry_meta(const std::string& bytes) { return meta_of(read_container(bytes)); }

std::unique_ptr<Graph> load_entry(const std::string& bytes, const std::string& key,
                                  const std::vector<std::optional<Tensor>>& sources) {
  Container c = read_container(bytes);
  EntryMeta m = meta_of(c);
  UPDRAFT_CHECK(m.engine == kEngineVersion, "cache",
                "entry was written by engine " + m.engine + ", this is engine " + kEngineVersion);
  std::string cpu = cpu_features();
  UPDRAFT_CHECK(m.cpu == cpu, "cache", "entry was written on a CPU with {" + m.cpu + "}, this one has {" + cpu + "}");
  UPDRAFT_CHECK(m.key == key, "cache", "entry holds key " + m.key + ", expected " + key);

  auto blob = [&](const std::string& ref) { return blob_tensor(ref, field(c, ref)); };
  auto source = [&](const std::string& ref, const TensorType& type) {
    size_t j = std::stoul(ref.substr(1));
    UPDRAFT_CHECK(j < sources.size() && sources[j].has_value(), "cache",
                  "entry needs parameter " + std::to_string(j) + ", which the caller did not give");
    const Tensor& t = *sources[j];
    UPDRAFT_CHECK(t.dtype() == type.dtype && shape_from(t.shape()) == type.shape, "cache",
                  "parameter " + std::to_string(j) + " is " + dtype_name(t.dtype()) + shape_str(shape_from(t.shape())) +
                      ", the entry was compiled for " + type.str());
    return t;
  };
  auto checked_ref = [](const std::string& ref, char kind) {
    bool ok = ref.size() >= 2 && ref[0] == kind;
    for (size_t i = 1; ok && i < ref.size(); ++i) ok = std::isdigit(static_cast<unsigned char>(ref[i]));
    return ok;
  };

  // Replay the folds over the parameters.
  ExternResolver init_res = [&](const std::string& ref, const TensorType&) {
    UPDRAFT_CHECK(checked_ref(ref, 'b'), "cache", "init graph refers to '" + ref + "'");
    return blob(ref);
  };
  std::unique_ptr<Graph> init = parse_graph(field(c, "init"), &init_res);
  std::vector<std::optional<Tensor>> val(init->num_values());
  for (Value* in : init->inputs()) {
    UPDRAFT_CHECK(checked_ref(in->name, 'p'), "cache", "init graph input '" + in->name + "' is not a parameter");
    val[in->id] = source(in->name, in->type);
  }
  for (Value* cv : init->constants()) val[cv->id] = *cv->constant;
  for (Node* n : init->nodes()) {
    std::vector<TensorView> views;
    for (Value* v : n->inputs) views.push_back(val.at(v->id)->view());
    std::vector<Tensor> outs = evaluate_constant_node(*n, views);
    for (size_t k = 0; k < outs.size(); ++k) val[n->outputs[k]->id] = std::move(outs[k]);
  }
  std::vector<Tensor> derived;
  for (Value* o : init->outputs()) derived.push_back(*val.at(o->id));

  ExternResolver main_res = [&](const std::string& ref, const TensorType& type) -> Tensor {
    if (checked_ref(ref, 'p')) return source(ref, type);
    if (checked_ref(ref, 'b')) return blob(ref);
    UPDRAFT_CHECK(checked_ref(ref, 'd'), "cache", "graph refers to '" + ref + "'");
    size_t k = std::stoul(ref.substr(1));
    UPDRAFT_CHECK(k < derived.size(), "cache", "graph refers to folded constant " + ref + ", the init graph has " +
                                                   std::to_string(derived.size()));
    return derived[k];
  };
  return parse_graph(field(c, "graph"), &main_res);
}

}  // namespace updraft
