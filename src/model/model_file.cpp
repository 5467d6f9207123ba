// Compiled model files (model/model_file.h, docs/format.md): writer, mapper, reader.
#include "model/model_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstring>
#include <map>
#include <set>

#include "cache/container.h"
#include "core/checked.h"
#include "core/error.h"
#include "core/version.h"
#include "ir/text.h"

namespace updraft {

namespace {

const container::Kind kModel{"UPDRAFTM", kModelFormatVersion, "model", "model file", "model file",
                             ": export the model again with this updraft (updraft.export), or load it with the "
                             "updraft version that wrote it"};

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

std::vector<std::string> split(std::string_view s, char sep) {
  std::vector<std::string> out;
  size_t b = 0;
  while (b <= s.size()) {
    size_t e = s.find(sep, b);
    if (e == std::string_view::npos) e = s.size();
    if (e > b) out.emplace_back(s.substr(b, e - b));
    b = e + 1;
  }
  return out;
}

int64_t parse_i64(const std::string& w, const std::string& line) {
  int64_t v = 0;
  auto [end, ec] = std::from_chars(w.data(), w.data() + w.size(), v);
  UPDRAFT_CHECK(ec == std::errc() && end == w.data() + w.size(), "model",
                "model file has a bad signature line '" + line + "' ('" + w + "' is not a 64-bit integer)");
  return v;
}

// Output names become file names (updraft-run writes NAME.npy under --output-dir), so a file
// cannot name one that leaves the directory or hides: ASCII letters, digits, '_', '-' and '.',
// not first '.'. Checked when saved and when loaded.
void check_output_name(const std::string& name) {
  bool ok = !name.empty() && name[0] != '.';
  for (char c : name)
    ok = ok && ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-' ||
                c == '.');
  UPDRAFT_CHECK(ok, "model",
                "output name '" + name +
                    "' is not a plain file name: use ASCII letters, digits, '_', '-' and '.' (not first)");
}

// The symbols the graph's inputs carry (tensor dims and size inputs), each once.
std::set<std::string> input_symbols(const Graph& g) {
  std::set<std::string> out;
  for (const Value* in : g.inputs()) {
    std::vector<std::string> syms;
    for (const Dim& d : in->type.shape) d.collect_symbols(syms);
    if (!in->binds.empty()) syms.push_back(in->binds);
    out.insert(syms.begin(), syms.end());
  }
  return out;
}

// The "signature" field: `output NAME` per graph output, `range SYMBOL MIN MAX` per symbol.
std::string signature_text(const Graph& g, const ModelMeta& meta) {
  const size_t nout = g.outputs().size();
  UPDRAFT_CHECK(meta.output_names.empty() || meta.output_names.size() == nout, "model",
                "save_model got " + std::to_string(meta.output_names.size()) + " output names for a graph with " +
                    std::to_string(nout) + " outputs");
  const std::set<std::string> syms = input_symbols(g);
  std::string s;
  for (size_t k = 0; k < nout; ++k) {
    std::string name = meta.output_names.empty() ? "out" + std::to_string(k) : meta.output_names[k];
    check_output_name(name);
    s += "output " + name + "\n";
  }
  for (const SymbolRange& r : meta.ranges) {
    UPDRAFT_CHECK(syms.count(r.symbol), "model", "save_model got a range for " + r.symbol + ", which no input has");
    UPDRAFT_CHECK(r.min <= r.max, "model",
                  "range of " + r.symbol + " is empty (" + std::to_string(r.min) + " > " + std::to_string(r.max) + ")");
    s += "range " + r.symbol + " " + std::to_string(r.min) + " " + std::to_string(r.max) + "\n";
  }
  return s;
}

// The signature of a parsed graph with its "signature" field (output names, symbol ranges).
ModelSignature parse_signature(const Graph& g, std::string_view text, ModelMeta& meta) {
  ModelSignature sig;
  for (const Value* in : g.inputs()) sig.inputs.push_back({in->name, in->type, in->binds});
  const std::set<std::string> syms = input_symbols(g);
  std::set<std::string> ranged, named;
  for (const std::string& line : split(text, '\n')) {
    std::vector<std::string> w = split(line, ' ');
    if (w.size() == 2 && w[0] == "output") {
      check_output_name(w[1]);
      UPDRAFT_CHECK(named.insert(w[1]).second, "model", "model file's output name '" + w[1] + "' is given twice");
      meta.output_names.push_back(w[1]);
    } else if (w.size() == 4 && w[0] == "range") {
      UPDRAFT_CHECK(syms.count(w[1]) && ranged.insert(w[1]).second, "model",
                    "model file has a range for '" + w[1] + "', which no input has or which is given twice");
      SymbolRange r{w[1], parse_i64(w[2], line), parse_i64(w[3], line)};
      UPDRAFT_CHECK(r.min >= 0 && r.min <= r.max, "model", "model file has an empty or negative range: '" + line + "'");
      meta.ranges.push_back(r);
    } else {
      throw Error("model", "model file has a bad signature line '" + line + "'");
    }
  }
  UPDRAFT_CHECK(meta.output_names.size() == g.outputs().size(), "model",
                "model file names " + std::to_string(meta.output_names.size()) + " outputs, its graph has " +
                    std::to_string(g.outputs().size()));
  for (size_t k = 0; k < g.outputs().size(); ++k) sig.outputs.push_back({meta.output_names[k], g.outputs()[k]->type, ""});
  for (const std::string& s : syms)
    if (!ranged.count(s)) sig.ranges.push_back({s, 0, INT64_MAX});
  sig.ranges.insert(sig.ranges.end(), meta.ranges.begin(), meta.ranges.end());
  return sig;
}

// The file's bytes, mapped (shared with the page cache and other processes) or read.
container::Buffer map_or_read(const std::string& path, bool map) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  UPDRAFT_CHECK(fd >= 0, "model", "cannot open model file " + path + ": " + std::strerror(errno));
  std::unique_ptr<int, void (*)(int*)> closer(&fd, [](int* f) { ::close(*f); });
  struct stat st;
  UPDRAFT_CHECK(::fstat(fd, &st) == 0, "model", "cannot stat model file " + path + ": " + std::strerror(errno));
  UPDRAFT_CHECK(S_ISREG(st.st_mode), "model",
                "model file " + path + " is not a regular file (" +
                    (S_ISFIFO(st.st_mode)  ? "a FIFO"
                     : S_ISDIR(st.st_mode) ? "a directory"
                                           : "a device or socket") +
                    "); give the path of a model file");
  const size_t size = static_cast<size_t>(st.st_size);
  if (map && size >= container::kHeaderBytes) {
    // PROT_WRITE with MAP_PRIVATE: kernels never write constants, but if anything did, it would
    // get a private copy of the page instead of a fault. Untouched pages stay shared.
    void* p = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
    UPDRAFT_CHECK(p != MAP_FAILED, "model", "cannot map model file " + path + ": " + std::strerror(errno));
    std::shared_ptr<const char> owner(static_cast<const char*>(p), [size](const char* q) {
      ::munmap(const_cast<char*>(q), size);
    });
    return {owner, size};
  }
  auto read_into = [&](char* p, size_t want) { return container::read_fd(fd, p, want, path, kModel); };
  // The header first: a file that is not a model file, or whose header does not account for its
  // size (a large file given by mistake, a sparse one), is refused before its size is allocated.
  char head[container::kHeaderBytes];
  const size_t head_got = read_into(head, std::min(size, container::kHeaderBytes));
  container::read_header(std::string_view(head, head_got), size, kModel);
  std::shared_ptr<void> mem;
  try {
    mem = aligned_alloc_shared(size);
  } catch (const Error& e) {
    throw Error("model", "cannot read model file " + path + " into memory (" + e.what() + "); load it mapped");
  }
  char* p = static_cast<char*>(mem.get());
  std::memcpy(p, head, head_got);
  const size_t got = head_got + read_into(p + head_got, size - head_got);
  return {std::shared_ptr<const char>(mem, p), got};
}

LoadedModel load_buffer(const container::Buffer& buf, bool mapped) {
  auto t0 = std::chrono::steady_clock::now();
  LoadedModel m;
  m.file_bytes = buf.size;
  m.mapped = mapped;
  container::Header h = container::read_header(buf.view(), kModel);
  auto tv = std::chrono::steady_clock::now();
  container::check_sum(h, container::payload_sum(buf.view(), h), kModel);
  m.verify_ms = ms_since(tv);
  container::Fields c = container::read_fields(buf.view(), h, kModel);
  auto field = [&](const std::string& name) { return std::string(container::field(c, name, kModel)); };
  m.meta.engine = field("engine");
  m.meta.requires_cpu = field("requires");
  m.meta.note = field("note");
  std::string missing;
  UPDRAFT_CHECK(cpu_has_features(m.meta.requires_cpu, &missing), "model",
                "model file needs CPU features {" + m.meta.requires_cpu + "}; this CPU lacks {" + missing +
                    "} (it has {" + cpu_features() + "}): run it on a CPU that has them");

  ExternResolver res = [&](const std::string& ref, const TensorType& type) -> Tensor {
    UPDRAFT_CHECK(ref.size() >= 2 && ref[0] == 'b' && ref.find_first_not_of("0123456789", 1) == std::string::npos,
                  "model", "model file graph refers to '" + ref + "', not a stored constant bN");
    Tensor t = container::blob_tensor(ref, container::field(c, ref, kModel), buf, kModel);
    m.constant_bytes = checked_add(m.constant_bytes, t.nbytes(), "model", "constant bytes");
    return t;
  };
  ParseOptions opts;
  opts.externs = &res;
  opts.max_generated_bytes = 0;  // every constant byte is in the file
  // Every defect of the file is a model error: the parser's (line, column, what) is kept.
  try {
    m.graph = parse_graph(field("graph"), opts);
  } catch (const Error& e) {
    if (e.component() == "model") throw;
    throw Error("model", std::string("model file has a bad graph: ") + e.what());
  }
  m.signature = parse_signature(*m.graph, container::field(c, "signature", kModel), m.meta);
  m.load_ms = ms_since(t0);
  return m;
}

}  // namespace

void ModelSignature::check_shapes(const std::vector<std::vector<int64_t>>& shapes) const {
  UPDRAFT_CHECK(shapes.size() == inputs.size(), "model",
                "the model takes " + std::to_string(inputs.size()) + " inputs, got " + std::to_string(shapes.size()));
  std::map<std::string, std::pair<int64_t, std::string>> bound;  // symbol -> value, where it was bound
  std::map<std::string, const SymbolRange*> range_of;
  for (const SymbolRange& r : ranges) range_of[r.symbol] = &r;
  auto bind = [&](const std::string& sym, int64_t v, const std::string& where) {
    auto [it, fresh] = bound.insert({sym, {v, where}});
    UPDRAFT_CHECK(fresh || it->second.first == v, "model",
                  where + " is " + std::to_string(v) + " but " + it->second.second + " is " +
                      std::to_string(it->second.first) + ", and the model needs both equal (" + sym + ")");
    auto r = range_of.find(sym);
    if (r != range_of.end())
      UPDRAFT_CHECK(v >= r->second->min && v <= r->second->max, "model",
                    where + " is " + std::to_string(v) + ", outside the range [" + std::to_string(r->second->min) +
                        ", " + std::to_string(r->second->max) + "] of " + sym + " the model was exported for");
  };
  for (size_t i = 0; i < inputs.size(); ++i) {
    const ModelIO& in = inputs[i];
    const std::vector<int64_t>& s = shapes[i];
    if (!in.binds.empty()) {
      UPDRAFT_CHECK(s.size() == 1, "model", "size input " + in.name + " takes one value");
      bind(in.binds, s[0], "size input " + in.name);
      continue;
    }
    UPDRAFT_CHECK(s.size() == in.type.shape.size(), "model",
                  "input " + in.name + " has rank " + std::to_string(s.size()) + ", the model takes " + in.type.str());
    for (size_t d = 0; d < s.size(); ++d) {
      const Dim& dim = in.type.shape[d];
      std::string where = "input " + in.name + " dim " + std::to_string(d);
      if (dim.is_static())
        UPDRAFT_CHECK(dim.value() == s[d], "model",
                      where + " is " + std::to_string(s[d]) + ", the model takes " + in.type.str());
      else if (dim.kind() == Dim::Kind::Sym)
        bind(dim.str(), s[d], where);
      // Expressions (s0 + 1) are checked by the engine once every symbol is bound.
    }
  }
}

std::string ModelSignature::str() const {
  std::string s = "inputs:\n";
  for (const ModelIO& in : inputs)
    s += "  " + in.name + " " + (in.binds.empty() ? in.type.str() : "size " + in.binds) + "\n";
  s += "outputs:\n";
  for (const ModelIO& o : outputs) s += "  " + o.name + " " + o.type.str() + "\n";
  if (!ranges.empty()) {
    s += "symbols:\n";
    for (const SymbolRange& r : ranges)
      s += "  " + r.symbol + " in [" + std::to_string(r.min) + ", " +
           (r.max == INT64_MAX ? std::string("inf") : std::to_string(r.max)) + "]\n";
  }
  return s;
}

std::string save_model(const Graph& g, const ModelMeta& meta) {
  std::vector<const Tensor*> blobs;
  std::map<const Value*, std::string> refs;
  size_t reserve = 4096;
  auto refer = [&](const Value* v) {
    if (!v->is_constant() || refs.count(v)) return;
    refs[v] = "b" + std::to_string(blobs.size());
    blobs.push_back(&*v->constant);
    reserve += v->constant->nbytes() + container::kAlign + 64;
  };
  for (const Node* n : g.nodes())
    for (const Value* v : n->inputs) refer(v);
  for (const Value* v : g.outputs()) refer(v);
  PrintOptions popts;
  popts.constant_ref = [&](const Value* v) { return refs.at(v); };
  std::string graph_text = print_graph(g, popts);
  std::string sig = signature_text(g, meta);
  container::Writer out(kModel, reserve + graph_text.size() + sig.size() + meta.note.size());
  out.add("engine", kEngineVersion);
  out.add("requires", engine_required_cpu_features());
  out.add("note", meta.note);
  out.add("signature", sig);
  out.add("graph", graph_text);
  for (size_t i = 0; i < blobs.size(); ++i) out.add_tensor("b" + std::to_string(i), *blobs[i]);
  return out.finish();
}

LoadedModel load_model(const std::string& bytes) {
  std::shared_ptr<void> mem = aligned_alloc_shared(bytes.size());
  if (!bytes.empty()) std::memcpy(mem.get(), bytes.data(), bytes.size());
  return load_buffer({std::shared_ptr<const char>(mem, static_cast<const char*>(mem.get())), bytes.size()}, false);
}

LoadedModel load_model_file(const std::string& path, bool map) {
  container::Buffer buf = map_or_read(path, map);
  return load_buffer(buf, map && buf.size >= container::kHeaderBytes);
}

}  // namespace updraft
