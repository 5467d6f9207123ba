// Text IR printer. The format and grammar are in ir/text.h; parser.cpp reads it back.
#include <algorithm>
#include <cctype>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <set>
#include <unordered_map>

#include "ir/op_table.h"
#include "ir/text.h"

namespace updraft {

namespace {

// Shortest text that parses back to exactly `x` once narrowed to the constant's dtype.
std::string float_text(double x, int digits) {
  if (std::isnan(x)) return "nan";
  if (std::isinf(x)) return x > 0 ? "inf" : "-inf";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*g", digits, x);
  std::string s = buf;
  if (s.find_first_of(".e") == std::string::npos) s += ".0";
  return s;
}

// Attr::str() is the attribute syntax; strings are the one kind it does not escape, so a
// string holding a quote, backslash or newline is escaped here (the parser undoes it).
std::string attr_text(const Attr& a) {
  if (a.kind() != Attr::Kind::Str) return a.str();
  const std::string& s = a.s();
  if (s.find_first_of("\"\\\n") == std::string::npos) return a.str();
  std::string r = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') r += '\\';
    if (c == '\n') { r += "\\n"; continue; }
    r += c;
  }
  return r + "\"";
}

uint64_t fnv1a(const void* data, size_t n) {
  uint64_t h = 1469598103934665603ull;
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

std::string element_text(const Tensor& t, int64_t i) {
  const void* d = t.data();
  char buf[32];
  switch (t.dtype()) {
    case DType::f32: return float_text(static_cast<const float*>(d)[i], 9);
    case DType::f64: return float_text(static_cast<const double*>(d)[i], 17);
    case DType::f16:
    case DType::bf16:  // raw bits: exact without a half-float conversion
      std::snprintf(buf, sizeof buf, "0x%04x", static_cast<unsigned>(static_cast<const uint16_t*>(d)[i]));
      return buf;
    case DType::i64: return std::to_string(static_cast<const int64_t*>(d)[i]);
    case DType::i32: return std::to_string(static_cast<const int32_t*>(d)[i]);
    case DType::i16: return std::to_string(static_cast<const int16_t*>(d)[i]);
    case DType::i8: return std::to_string(static_cast<const int8_t*>(d)[i]);
    case DType::u8: return std::to_string(static_cast<const uint8_t*>(d)[i]);
    case DType::boolean: return static_cast<const bool*>(d)[i] ? "true" : "false";
  }
  return "?";
}

std::string constant_data(const Tensor& t, const PrintOptions& opts) {
  int64_t n = t.numel();
  if (opts.max_literal_numel >= 0 && n > opts.max_literal_numel) {
    char buf[96];
    std::snprintf(buf, sizeof buf, "elided(numel=%" PRId64 ", fnv1a=0x%016" PRIx64 ")", n,
                  fnv1a(t.data(), t.nbytes()));
    return buf;
  }
  bool half = t.dtype() == DType::f16 || t.dtype() == DType::bf16;
  std::string r = half ? "bits[" : "[";
  for (int64_t i = 0; i < n; ++i) r += (i ? ", " : "") + element_text(t, i);
  return r + "]";
}

bool is_name_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.'; }

// Names: a value keeps its own name when it is a valid, non-numeric identifier not taken
// yet; every other value gets the next free number. Numeric names are never kept, so a
// printed-then-parsed graph renumbers the same way after a pass inserts nodes.
class Namer {
 public:
  void reserve(const Value* v) {
    std::string s = v->name;
    if (s.empty()) return;
    for (char& c : s)
      if (!is_name_char(c)) c = '_';
    bool numeric = std::all_of(s.begin(), s.end(), [](char c) { return std::isdigit(static_cast<unsigned char>(c)); });
    if (numeric) return;
    std::string base = s;
    for (int k = 1; taken_.count(s); ++k) s = base + "_" + std::to_string(k);
    taken_.insert(s);
    names_[v] = s;
  }
  const std::string& name(const Value* v) {
    auto it = names_.find(v);
    if (it != names_.end()) return it->second;
    std::string s;
    do s = std::to_string(next_++);
    while (taken_.count(s));
    taken_.insert(s);
    return names_[v] = s;
  }
  std::string ref(const Value* v) { return "%" + name(v); }

 private:
  std::set<std::string> taken_;
  std::unordered_map<const Value*, std::string> names_;
  int next_ = 0;
};

}  // namespace

namespace {

// What print_graph and print_node_lines share: the constants worth printing and the names.
struct Printed {
  std::vector<Node*> nodes;
  std::vector<const Value*> consts;
  Namer names;

  explicit Printed(const Graph& g) : nodes(g.nodes()) {
    // Constants that nodes or outputs use, in creation order (unused ones are dead weight that
    // the graph cannot delete; printing them would only add noise).
    std::set<const Value*> used;
    for (Node* n : nodes)
      for (Value* v : n->inputs) used.insert(v);
    for (Value* v : g.outputs()) used.insert(v);
    for (Value* v : g.constants())
      if (used.count(v)) consts.push_back(v);
    for (Value* v : g.inputs()) names.reserve(v);
    for (const Value* v : consts) names.reserve(v);
    for (Node* n : nodes)
      for (Value* v : n->outputs) names.reserve(v);
  }

  std::string node_line(const Node* n, const PrintOptions& opts) {
    std::string out;
    for (size_t k = 0; k < n->outputs.size(); ++k) out += (k ? ", " : "") + names.ref(n->outputs[k]);
    out += " = " + n->op_name() + "(";
    for (size_t k = 0; k < n->inputs.size(); ++k) out += (k ? ", " : "") + names.ref(n->inputs[k]);
    out += ")";
    if (!n->attrs.empty()) {
      out += " {";
      bool first = true;
      for (const auto& [key, a] : n->attrs) {  // std::map: sorted, so prints are stable
        out += (first ? "" : ", ") + key + "=" + attr_text(a);
        first = false;
      }
      out += "}";
    }
    out += " : ";
    for (size_t k = 0; k < n->outputs.size(); ++k) out += (k ? ", " : "") + n->outputs[k]->type.str();
    if (opts.origins && !n->origin.empty()) {
      out += "  // from: ";
      for (size_t k = 0; k < n->origin.size(); ++k) out += (k ? ", " : "") + n->origin[k];
    }
    return out;
  }
};

}  // namespace

std::string print_graph(const Graph& g, const PrintOptions& opts) {
  Printed p(g);
  std::string out = "graph(";
  for (size_t i = 0; i < g.inputs().size(); ++i) {
    const Value* v = g.inputs()[i];
    out += (i ? ", " : "") + p.names.ref(v) + ": " + v->type.str();
    if (!v->binds.empty()) out += " = " + v->binds;  // a size input
  }
  out += ") {\n";
  for (const Value* v : p.consts) {
    std::string ref = opts.constant_ref ? opts.constant_ref(v) : std::string();
    std::string data = ref.empty() ? constant_data(*v->constant, opts) : "extern(" + ref + ")";
    out += "  " + p.names.ref(v) + " = constant " + v->type.str() + " " + data + "\n";
  }
  for (Node* n : p.nodes) out += "  " + p.node_line(n, opts) + "\n";
  out += "  return (";
  for (size_t i = 0; i < g.outputs().size(); ++i) out += (i ? ", " : "") + p.names.ref(g.outputs()[i]);
  out += ")\n}\n";
  return out;
}

std::vector<std::string> print_node_lines(const Graph& g, const PrintOptions& opts) {
  Printed p(g);
  std::vector<std::string> lines;
  lines.reserve(p.nodes.size());
  for (Node* n : p.nodes) lines.push_back(p.node_line(n, opts));
  return lines;
}

}  // namespace updraft
