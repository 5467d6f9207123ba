// Text IR parser: a character-level recursive-descent parser for the grammar in ir/text.h.
// Every error says where (line, col), what was expected and what was found instead.
#include <algorithm>
#include <cctype>
#include <charconv>
#include <cerrno>
#include <cstdint>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <string_view>
#include <unordered_map>

#include "core/checked.h"
#include "core/error.h"
#include "ir/op_table.h"
#include "ir/text.h"

namespace updraft {

namespace {

// ASCII classes, not <cctype>'s: those are locale calls (Python sets the locale), and the text
// IR's names are ASCII.
bool is_ascii_alpha(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
bool is_ascii_digit(char c) { return c >= '0' && c <= '9'; }
bool is_ident_start(char c) { return is_ascii_alpha(c) || c == '_'; }
bool is_ident_char(char c) { return is_ascii_alpha(c) || is_ascii_digit(c) || c == '_'; }
bool is_name_char(char c) { return is_ident_char(c) || c == '.'; }
bool is_numeric(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), is_ascii_digit);
}

// A number as written: ints stay exact (i64 constants and attributes), floats go via strtod.
struct Number {
  bool is_float = false;
  int64_t i = 0;
  double f = 0;
  double as_double() const { return is_float ? f : static_cast<double>(i); }
};

class Parser {
 public:
  explicit Parser(const std::string& src, const ParseOptions& opts = {}) : s_(src), opts_(opts) {}

  // One dimension expression and nothing else ("s0", "(s0*12)", "s0*s1+1").
  Dim parse_dim_only() {
    ws(false);
    Dim d = dim_top();
    ws(false);
    if (pos_ != s_.size()) fail("expected the end of the dimension expression");
    return d;
  }

  std::unique_ptr<Graph> parse() {
    g_ = std::make_unique<Graph>();
    values_.reserve(s_.size() / 48);  // about a line per value: no rehashing while parsing
    ws();
    expect_word("graph");
    expect("(");
    if (!eat(")")) {
      do parse_param();
      while (eat(","));
      expect(")");
    }
    expect("{");
    while (!peek_word("return")) parse_stmt();
    expect_word("return");
    expect("(");
    std::vector<Value*> outs;
    if (!eat(")")) {
      do outs.push_back(use_ref());
      while (eat(","));
      expect(")");
    }
    expect("}");
    ws();
    if (pos_ != s_.size()) fail("expected the end of input after the graph's '}'");
    g_->set_outputs(std::move(outs));
    return std::move(g_);
  }

 private:
  // ---- errors and positions ----
  [[noreturn]] void fail_at(size_t at, const std::string& msg) const {
    int line = 1, col = 1;
    for (size_t i = 0; i < at && i < s_.size(); ++i) {
      if (s_[i] == '\n') { ++line; col = 1; } else { ++col; }
    }
    throw Error("parse", "line " + std::to_string(line) + ", col " + std::to_string(col) + ": " + msg);
  }
  [[noreturn]] void fail(const std::string& msg) const { fail_at(pos_, msg + ", found " + found()); }

  // The next token, quoted, for "expected X, found Y".
  std::string found() const {
    if (pos_ >= s_.size()) return "the end of input";
    size_t e = pos_;
    if (is_name_char(s_[e]) || s_[e] == '%') {
      ++e;
      while (e < s_.size() && is_name_char(s_[e]) && e - pos_ < 24) ++e;
    } else {
      ++e;
    }
    return "'" + s_.substr(pos_, e - pos_) + "'";
  }

  // ---- lexing helpers ----
  // Skips blanks and, when `comments`, "//" comments. Shape expressions use "//" for floor
  // division, so the dim parser skips blanks only.
  void ws(bool comments = true) {
    while (pos_ < s_.size()) {
      char c = s_[pos_];
      if (c == ' ' || c == '\t' || c == '\n' || c == '\r') { ++pos_; continue; }
      if (comments && c == '/' && pos_ + 1 < s_.size() && s_[pos_ + 1] == '/') {
        while (pos_ < s_.size() && s_[pos_] != '\n') ++pos_;
        continue;
      }
      break;
    }
  }
  // Most tokens are one character: compared as a char, without strlen and compare.
  bool at(const char* tok) const {
    if (tok[0] != '\0' && tok[1] == '\0') return pos_ < s_.size() && s_[pos_] == tok[0];
    return s_.compare(pos_, std::strlen(tok), tok) == 0;
  }
  bool eat(const char* tok, bool comments = true) {
    if (!at(tok)) return false;
    pos_ += tok[1] == '\0' ? 1 : std::strlen(tok);
    ws(comments);
    return true;
  }
  void expect(const char* tok, bool comments = true) {
    if (!eat(tok, comments)) fail(std::string("expected '") + tok + "'");
  }
  bool peek_word(const char* w) const {
    size_t n = std::strlen(w);
    return at(w) && (pos_ + n >= s_.size() || !is_ident_char(s_[pos_ + n]));
  }
  void expect_word(const char* w) {
    if (!peek_word(w)) fail(std::string("expected '") + w + "'");
    pos_ += std::strlen(w);
    ws();
  }
  std::string ident(const char* what, bool comments = true) {
    if (pos_ >= s_.size() || !is_ident_start(s_[pos_])) fail(std::string("expected ") + what);
    size_t b = pos_;
    while (pos_ < s_.size() && is_ident_char(s_[pos_])) ++pos_;
    std::string r = s_.substr(b, pos_ - b);
    ws(comments);
    return r;
  }

  Number number(const char* what, bool comments = true) {
    size_t b = pos_, e = pos_;
    if (e < s_.size() && (s_[e] == '-' || s_[e] == '+')) ++e;
    Number n;
    if (s_.compare(e, 3, "inf") == 0 || s_.compare(e, 3, "nan") == 0) {
      n.is_float = true;
      bool neg = s_[b] == '-';
      n.f = s_[e] == 'i' ? (neg ? -INFINITY : INFINITY) : std::numeric_limits<double>::quiet_NaN();
      pos_ = e + 3;
      ws(comments);
      return n;
    }
    size_t digits = e;
    while (e < s_.size() && is_ascii_digit(s_[e])) ++e;
    if (e < s_.size() && s_[e] == '.') {
      n.is_float = true;
      ++e;
      while (e < s_.size() && is_ascii_digit(s_[e])) ++e;
    }
    if (e == digits || (e == digits + 1 && n.is_float)) fail(std::string("expected ") + what);
    if (e < s_.size() && (s_[e] == 'e' || s_[e] == 'E')) {
      size_t x = e + 1;
      if (x < s_.size() && (s_[x] == '-' || s_[x] == '+')) ++x;
      if (x < s_.size() && is_ascii_digit(s_[x])) {
        n.is_float = true;
        e = x;
        while (e < s_.size() && is_ascii_digit(s_[e])) ++e;
      }
    }
    // from_chars reads in place (no substring) and rounds as strtod does; it takes no '+'.
    const char* first = s_.data() + (s_[b] == '+' ? b + 1 : b);
    const char* last = s_.data() + e;
    if (n.is_float) {
      auto [end, ec] = std::from_chars(first, last, n.f);
      // Out of range (1e999, 1e-320): what strtod gives, an infinity or a denormal.
      if (ec != std::errc() || end != last) n.f = std::strtod(s_.substr(b, e - b).c_str(), nullptr);
    } else {
      auto [end, ec] = std::from_chars(first, last, n.i);
      if (ec == std::errc::result_out_of_range)
        fail_at(b, "integer " + s_.substr(b, e - b) + " does not fit in 64 bits");
    }
    pos_ = e;
    ws(comments);
    return n;
  }
  int64_t integer(const char* what, bool comments = true) {
    size_t b = pos_;
    Number n = number(what, comments);
    if (n.is_float) fail_at(b, std::string("expected ") + what + ", found a float");
    return n.i;
  }

  // ---- values ----
  // A value's name, as a view into the text (which outlives the parse).
  std::pair<std::string_view, size_t> ref_name() {
    size_t b = pos_;
    if (!at("%")) fail("expected a value name like %x");
    ++pos_;
    size_t nb = pos_;
    while (pos_ < s_.size() && is_name_char(s_[pos_])) ++pos_;
    if (pos_ == nb) fail_at(b, "expected a value name after '%'");
    std::string_view name(s_.data() + nb, pos_ - nb);
    ws();
    return {name, b};
  }
  Value* use_ref() {
    auto [name, where] = ref_name();
    auto it = values_.find(name);
    if (it == values_.end()) fail_at(where, "use of undefined value %" + std::string(name));
    return it->second;
  }
  void define(std::string_view name, size_t where, Value* v) {
    if (!values_.emplace(name, v).second) fail_at(where, "value %" + std::string(name) + " is defined twice");
    // Numeric names are positional: the printer renumbers them.
    if (is_numeric(name)) v->name.clear();
    else v->name.assign(name);
  }

  // ---- types and symbolic dims ----
  TensorType type() {
    size_t b = pos_;
    std::string dt = ident("a dtype like f32", false);
    TensorType t;
    try {
      t.dtype = dtype_from_name(dt);
    } catch (const Error&) {
      fail_at(b, "unknown dtype '" + dt + "' (f32, f64, f16, bf16, i64, i32, i16, i8, u8, bool)");
    }
    expect("[", false);
    if (!eat("]")) {
      t.shape.reserve(4);
      do {
        size_t p = pos_;
        t.shape.push_back(type_dim());
        if (t.shape.back().is_static() && t.shape.back().value() < 0)
          fail_at(p, "size " + std::to_string(t.shape.back().value()) + " is negative");
      } while (eat(",", false));
      expect("]");
    }
    return t;
  }
  // One size in a type. A plain integer followed by ',' or ']' (nearly every size a graph
  // prints) is read here directly; anything else takes the expression grammar, which reads
  // the same integer to the same Dim, or reports the same error.
  Dim type_dim() {
    if (pos_ < s_.size() && is_ascii_digit(s_[pos_])) {
      int64_t v = 0;
      auto [end, ec] = std::from_chars(s_.data() + pos_, s_.data() + s_.size(), v);
      size_t k = static_cast<size_t>(end - s_.data());
      while (k < s_.size() && (s_[k] == ' ' || s_[k] == '\t' || s_[k] == '\n' || s_[k] == '\r')) ++k;
      if (ec == std::errc() && k < s_.size() && (s_[k] == ',' || s_[k] == ']')) {
        pos_ = k;
        return Dim(v);
      }
    }
    return dim_top();
  }
  // One whole expression. Its operators and parentheses are counted: the parser and every Dim
  // walk (eval, str, ==) recurse over them, so their number, not the stack, bounds the depth.
  Dim dim_top() {
    dim_ops_ = 0;
    return dim_expr();
  }
  void count_dim_op(size_t at) {
    if (++dim_ops_ > opts_.max_dim_expr_ops)
      fail_at(at, "dimension expression has more than " + std::to_string(opts_.max_dim_expr_ops) +
                      " operators and parentheses (nested too deep or too long)");
  }
  // Constant sub-expressions fold as they are built; an overflow there is reported here.
  template <typename F>
  Dim dim_op(size_t at, F&& f) {
    count_dim_op(at);
    try {
      return f();
    } catch (const Error& e) {
      fail_at(at, e.what());
    }
  }
  Dim dim_expr() {
    Dim d = dim_term();
    for (;;) {
      size_t at = pos_;
      if (eat("+", false)) { Dim r = dim_term(); d = dim_op(at, [&] { return d + r; }); }
      else if (eat("-", false)) { Dim r = dim_term(); d = dim_op(at, [&] { return d - r; }); }
      else return d;
    }
  }
  Dim dim_term() {
    Dim d = dim_atom();
    for (;;) {
      size_t at = pos_;
      if (eat("*", false)) { Dim r = dim_atom(); d = dim_op(at, [&] { return d * r; }); }
      else if (eat("//", false)) { Dim r = dim_atom(); d = dim_op(at, [&] { return floordiv(d, r); }); }
      else if (eat("%", false)) { Dim r = dim_atom(); d = dim_op(at, [&] { return mod(d, r); }); }
      else return d;
    }
  }
  Dim dim_atom() {
    size_t at = pos_;
    if (eat("(", false)) {
      count_dim_op(at);
      Dim d = dim_expr();
      expect(")", false);
      return d;
    }
    if (pos_ < s_.size() && (is_ascii_digit(s_[pos_]) || s_[pos_] == '-'))
      return Dim(integer("a dimension", false));
    std::string name = ident("a dimension (an integer, a symbol like s0, or an expression)", false);
    if (name == "max" || name == "min") {
      expect("(", false);
      count_dim_op(at);
      Dim a = dim_expr();
      expect(",", false);
      Dim b = dim_expr();
      expect(")", false);
      return dim_op(at, [&] { return name == "max" ? max(a, b) : min(a, b); });
    }
    return Dim::sym(name);
  }

  // ---- statements ----
  void parse_param() {
    auto [name, where] = ref_name();
    expect(":");
    size_t tpos = pos_;
    TensorType t = type();
    if (t.shape.size() > static_cast<size_t>(kMaxDims)) fail_at(tpos, "rank exceeds the engine limit of 8");
    std::string vname = is_numeric(name) ? "" : std::string(name);
    if (eat("=")) {  // a size input: `%n: i64[] = s1`, its value binds s1
      size_t spos = pos_;
      std::string sym = ident("the symbol a size input binds", false);
      if (t.dtype != DType::i64 || !t.shape.empty()) fail_at(tpos, "a size input has type i64[]");
      try {
        define(name, where, g_->add_size_input(vname, sym));
      } catch (const Error& e) {
        fail_at(spos, e.what());
      }
      return;
    }
    define(name, where, g_->add_input(vname, std::move(t)));
  }

  void parse_stmt() {
    if (!at("%")) fail("expected a statement (%name = ...) or 'return'");
    std::vector<std::pair<std::string_view, size_t>> defs;
    do defs.push_back(ref_name());
    while (eat(","));
    expect("=");
    size_t op_pos = pos_;
    std::string op = ident("an op name or 'constant'");
    if (op == "constant") {
      if (defs.size() != 1) fail_at(defs[1].second, "a constant defines exactly one value");
      parse_constant(defs[0].first, defs[0].second);
      return;
    }
    const OpDef* def = OpTable::get().find(op);
    if (!def) fail_at(op_pos, "unknown op '" + op + "' (see docs/ops.md for the op table)");
    expect("(");
    std::vector<Value*> ins;
    if (!eat(")")) {
      do ins.push_back(use_ref());
      while (eat(","));
      expect(")");
    }
    Attrs attrs;
    if (eat("{")) {
      do parse_attr(*def, attrs);
      while (eat(","));
      expect("}");
    }
    std::vector<std::pair<TensorType, size_t>> declared;
    if (eat(":")) {
      do {
        size_t p = pos_;
        declared.push_back({type(), p});
      } while (eat(","));
    }
    Node* n = nullptr;
    try {
      n = g_->add_node(*def, std::move(ins), std::move(attrs));
    } catch (const Error& e) {
      fail_at(op_pos, e.what());
    }
    if (n->outputs.size() != defs.size())
      fail_at(defs[0].second, op + " has " + std::to_string(n->outputs.size()) + " outputs but " +
                                  std::to_string(defs.size()) + " names are given");
    if (!declared.empty() && declared.size() != n->outputs.size())
      fail_at(declared[0].second, std::to_string(declared.size()) + " types are declared for " +
                                      std::to_string(n->outputs.size()) + " outputs of " + op);
    for (size_t k = 0; k < declared.size(); ++k)
      if (!(declared[k].first == n->outputs[k]->type))
        fail_at(declared[k].second, "declared type " + declared[k].first.str() + " but " + op + " infers " +
                                        n->outputs[k]->type.str() + " for output " + std::to_string(k));
    for (size_t k = 0; k < defs.size(); ++k) define(defs[k].first, defs[k].second, n->outputs[k]);
  }

  void parse_attr(const OpDef& def, Attrs& attrs) {
    size_t b = pos_;
    std::string key = ident("an attribute name");
    expect("=");
    Attr a = attr_value();
    // Ints written for a float attribute ("min=0") become floats, so nodes compare equal
    // however the number was written.
    for (const AttrSpec& spec : def.attrs) {
      if (spec.name != key) continue;
      if (spec.kind == Attr::Kind::Float && a.kind() == Attr::Kind::Int) a = Attr(static_cast<double>(a.i()));
      if (spec.kind == Attr::Kind::Floats && a.kind() == Attr::Kind::Ints)
        a = Attr(std::vector<double>(a.ints().begin(), a.ints().end()));
    }
    if (!attrs.emplace(key, std::move(a)).second) fail_at(b, "attribute '" + key + "' is given twice");
  }

  Attr attr_value() {
    if (at("\"")) return Attr(string_literal());
    if (eat("f[")) {
      std::vector<double> v;
      if (!eat("]")) {
        do v.push_back(number("a float").as_double());
        while (eat(","));
        expect("]");
      }
      return Attr(std::move(v));
    }
    if (eat("[")) {
      // An int list, or a symbolic size list when an entry is a symbol or an expression
      // ([s0, (s1*12), 64]); Attr::from_dims stores an all-static list as Ints.
      Shape v;
      if (!eat("]")) {
        do {
          size_t b = pos_;
          if (starts_dim_expr()) {
            v.push_back(dim_top());
            ws();
            continue;
          }
          Number n = number("an integer or a symbolic size (s0, (s1*12))");
          if (n.is_float) fail_at(b, "an int list holds a float; write float lists as f[0.5, 1.0]");
          v.push_back(Dim(n.i));
        } while (eat(","));
        expect("]");
      }
      return Attr::from_dims(v);
    }
    if (peek_word("true")) { expect_word("true"); return Attr(true); }
    if (peek_word("false")) { expect_word("false"); return Attr(false); }
    if (starts_dim_expr()) {  // one symbolic size: s1, (s1*2), max(s0, 1)
      Dim d = dim_top();
      ws();
      return Attr::from_dim(d);
    }
    Number n = number("an attribute value (3, 1.5, true, \"s\", [1, 2] or f[0.5])");
    return n.is_float ? Attr(n.f) : Attr(n.i);
  }

  // A symbol, a parenthesised expression or max/min(...) starts a symbolic size; "inf" and
  // "nan" are float literals, not symbols.
  bool starts_dim_expr() const {
    if (pos_ >= s_.size()) return false;
    if (s_[pos_] == '(') return true;
    return is_ident_start(s_[pos_]) && !peek_word("inf") && !peek_word("nan");
  }

  std::string string_literal() {
    size_t b = pos_;
    ++pos_;  // opening quote
    std::string r;
    while (pos_ < s_.size() && s_[pos_] != '"') {
      char c = s_[pos_++];
      if (c == '\n') fail_at(b, "string is not closed before the end of the line");
      if (c == '\\' && pos_ < s_.size()) {
        char e = s_[pos_++];
        r += e == 'n' ? '\n' : e;
        continue;
      }
      r += c;
    }
    if (pos_ >= s_.size()) fail_at(b, "string is not closed");
    ++pos_;
    ws();
    return r;
  }

  // ---- constants ----
  void parse_constant(std::string_view name, size_t where) {
    size_t tpos = pos_;
    TensorType t = type();
    if (!shape_is_static(t.shape)) fail_at(tpos, "a constant's shape must be static, got " + t.str());
    if (t.shape.size() > static_cast<size_t>(kMaxDims)) fail_at(tpos, "rank exceeds the engine limit of 8");
    const std::vector<int64_t> sizes = shape_values(t.shape);
    // Checked before anything is allocated: a count that wraps would allocate a few bytes and
    // fill 2^62 elements.
    size_t nbytes = 0;
    try {
      nbytes = shape_nbytes(sizes, t.dtype, "tensor");
    } catch (const Error& e) {
      fail_at(tpos, "constant " + t.str() + ": " + e.what());
    }
    const int64_t numel = numel_of(sizes);
    if (peek_word("extern")) {
      expect_word("extern");
      expect("(");
      size_t rpos = pos_;
      std::string ref = ident("an extern reference");
      expect(")");
      if (!opts_.externs) fail_at(rpos, "extern(" + ref + ") data needs a resolver (only cache entries use it)");
      Tensor data;
      try {
        data = (*opts_.externs)(ref, t);
      } catch (const Error& e) {
        fail_at(rpos, std::string("extern(") + ref + "): " + e.what());
      }
      if (data.dtype() != t.dtype || !same_sizes(data.shape(), t.shape))
        fail_at(rpos, "extern(" + ref + ") resolved to a tensor that is not " + t.str());
      define(name, where, g_->add_constant(is_numeric(name) ? "" : std::string(name), std::move(data)));
      return;
    }
    size_t dpos = pos_;
    const bool generated = peek_word("random") || peek_word("full");
    if (peek_word("elided")) {
      fail("constant data was elided by the printer (PrintOptions::max_literal_numel); print with "
           "max_literal_numel = -1 to get text that parses");
    } else if (generated) {
      if (opts_.max_generated_bytes == 0)
        fail("generated constant data (full, random) is not accepted here: a cache entry holds its constants "
             "as extern(REF)");
      if (nbytes > opts_.max_generated_bytes)
        fail_at(dpos, "constant " + t.str() + " is " + std::to_string(nbytes) + " bytes of generated data, over "
                          "the limit of " + std::to_string(opts_.max_generated_bytes) +
                          " (ParseOptions::max_generated_bytes)");
    } else if (at("[") || at("bits[")) {
      // A value and a separator per element: text that cannot hold them all is rejected
      // before the tensor is allocated.
      if (numel > 0 && static_cast<uint64_t>(numel - 1) > (s_.size() - pos_) / 2)
        fail_at(dpos, "constant " + t.str() + " needs more values than the rest of the text holds (" +
                          std::to_string(numel) + ")");
    } else {
      fail("expected constant data: [values], random(seed=N), full(X) or bits[...]");
    }
    Tensor data;
    try {
      data = Tensor(t.dtype, sizes);
    } catch (const Error& e) {
      fail_at(tpos, "constant " + t.str() + ": " + e.what());
    }
    if (peek_word("random")) {
      fill_random(data);
    } else if (peek_word("full")) {
      expect_word("full");
      expect("(");
      size_t b = pos_;
      Number v = parse_element_number(data.dtype());
      for (int64_t i = 0; i < numel; ++i) store(data, i, v, b);
      expect(")");
    } else if (at("bits[")) {
      if (t.dtype != DType::f16 && t.dtype != DType::bf16) fail("bits[...] data is for f16/bf16 constants only");
      expect("bits[");
      int64_t i = 0;
      if (!eat("]")) {
        do {
          size_t b = pos_;
          int64_t x = hex_or_int();
          if (x < 0 || x > 0xffff) fail_at(b, "a 16-bit pattern must be in [0, 0xffff]");
          if (i < numel) data.ptr<uint16_t>()[i] = static_cast<uint16_t>(x);
          ++i;
        } while (eat(","));
        expect("]");
      }
      check_count(i, numel, dpos);
    } else {
      if (t.dtype == DType::f16 || t.dtype == DType::bf16) fail("write f16/bf16 constant data as bits[0x3c00, ...]");
      expect("[");
      int64_t i = 0;
      if (!eat("]")) {
        do {
          size_t b = pos_;
          Number v = parse_element_number(data.dtype());
          if (i < numel) store(data, i, v, b);
          ++i;
        } while (eat(","));
        expect("]");
      }
      check_count(i, numel, dpos);
    }
    define(name, where, g_->add_constant(is_numeric(name) ? "" : std::string(name), std::move(data)));
  }

  // A tensor's sizes against a static shape, without building a vector of them.
  static bool same_sizes(const std::vector<int64_t>& sizes, const Shape& shape) {
    if (sizes.size() != shape.size()) return false;
    for (size_t i = 0; i < sizes.size(); ++i)
      if (!shape[i].is_static() || shape[i].value() != sizes[i]) return false;
    return true;
  }

  void check_count(int64_t got, int64_t want, size_t where) const {
    if (got != want)
      fail_at(where, "constant data has " + std::to_string(got) + " values, its type needs " + std::to_string(want));
  }

  int64_t hex_or_int() {
    if (at("0x") || at("0X")) {
      size_t b = pos_;
      pos_ += 2;
      size_t d = pos_;
      while (pos_ < s_.size() && std::isxdigit(static_cast<unsigned char>(s_[pos_]))) ++pos_;
      if (pos_ == d) fail_at(b, "expected hex digits after 0x");
      int64_t v = std::strtoll(s_.substr(d, pos_ - d).c_str(), nullptr, 16);
      ws();
      return v;
    }
    return integer("a 16-bit pattern like 0x3c00");
  }

  Number parse_element_number(DType dt) {
    if (peek_word("true")) { expect_word("true"); return Number{false, 1, 1}; }
    if (peek_word("false")) { expect_word("false"); return Number{false, 0, 0}; }
    return number(dt == DType::boolean ? "true or false" : "a number");
  }

  void store(Tensor& t, int64_t i, const Number& v, size_t where) {
    auto int_in = [&](int64_t lo, int64_t hi) {
      if (v.is_float) fail_at(where, std::string("a ") + dtype_name(t.dtype()) + " constant holds integers, found a float");
      if (v.i < lo || v.i > hi) fail_at(where, std::to_string(v.i) + " is out of range for " + dtype_name(t.dtype()));
      return v.i;
    };
    void* d = t.data();
    switch (t.dtype()) {
      case DType::f32: static_cast<float*>(d)[i] = static_cast<float>(v.as_double()); break;
      case DType::f64: static_cast<double*>(d)[i] = v.as_double(); break;
      case DType::i64: static_cast<int64_t*>(d)[i] = int_in(INT64_MIN, INT64_MAX); break;
      case DType::i32: static_cast<int32_t*>(d)[i] = static_cast<int32_t>(int_in(INT32_MIN, INT32_MAX)); break;
      case DType::i16: static_cast<int16_t*>(d)[i] = static_cast<int16_t>(int_in(INT16_MIN, INT16_MAX)); break;
      case DType::i8: static_cast<int8_t*>(d)[i] = static_cast<int8_t>(int_in(INT8_MIN, INT8_MAX)); break;
      case DType::u8: static_cast<uint8_t*>(d)[i] = static_cast<uint8_t>(int_in(0, 255)); break;
      case DType::boolean: static_cast<bool*>(d)[i] = int_in(0, 1) != 0; break;
      case DType::f16:
      case DType::bf16: fail_at(where, "f16/bf16 constants take bits[...] data; full() and literal numbers are not supported");
    }
  }

  // random(seed=N, lo=X, hi=X): uniform in [lo, hi) from a 64-bit Mersenne Twister, mapped by
  // hand (not std::uniform_real_distribution) so every standard library yields the same data.
  void fill_random(Tensor& t) {
    expect_word("random");
    expect("(");
    int64_t seed = -1;
    double lo = -1.0, hi = 1.0;
    do {
      size_t b = pos_;
      std::string k = ident("seed=, lo= or hi=");
      expect("=");
      if (k == "seed") seed = integer("an integer seed");
      else if (k == "lo") lo = number("a number").as_double();
      else if (k == "hi") hi = number("a number").as_double();
      else fail_at(b, "random() takes seed=, lo= and hi=, not '" + k + "'");
    } while (eat(","));
    expect(")");
    if (seed < 0) fail("random() needs seed=N (N >= 0)");
    if (t.dtype() == DType::f16 || t.dtype() == DType::bf16) fail("random() does not fill f16/bf16 constants; use bits[...]");
    // Integers are floor(x) through int64: lo and hi must keep that in range (a double outside
    // int64 has no defined conversion). Each bound is checked both ways: lo may exceed hi (x
    // then runs from lo down), so lo <= 2^62 is not implied. Narrower types keep the low bits.
    if (is_integral(t.dtype()) && !(std::fabs(lo) <= 0x1p62 && std::fabs(hi) <= 0x1p62))
      fail("random() bounds for an integer constant must be finite and within +-2^62");
    std::mt19937_64 rng(static_cast<uint64_t>(seed));
    for (int64_t i = 0; i < t.numel(); ++i) {
      double u = static_cast<double>(rng() >> 11) * 0x1.0p-53;
      double x = lo + u * (hi - lo);
      void* d = t.data();
      switch (t.dtype()) {
        case DType::f32: static_cast<float*>(d)[i] = static_cast<float>(x); break;
        case DType::f64: static_cast<double*>(d)[i] = x; break;
        case DType::i64: static_cast<int64_t*>(d)[i] = static_cast<int64_t>(std::floor(x)); break;
        case DType::i32: static_cast<int32_t*>(d)[i] = static_cast<int32_t>(static_cast<int64_t>(std::floor(x))); break;
        case DType::i16: static_cast<int16_t*>(d)[i] = static_cast<int16_t>(static_cast<int64_t>(std::floor(x))); break;
        case DType::i8: static_cast<int8_t*>(d)[i] = static_cast<int8_t>(static_cast<int64_t>(std::floor(x))); break;
        case DType::u8: static_cast<uint8_t*>(d)[i] = static_cast<uint8_t>(static_cast<int64_t>(std::floor(x))); break;
        case DType::boolean: static_cast<bool*>(d)[i] = u >= 0.5; break;
        default: break;
      }
    }
  }

  const std::string& s_;
  const ParseOptions opts_;
  size_t pos_ = 0;
  int dim_ops_ = 0;
  std::unique_ptr<Graph> g_;
  std::unordered_map<std::string_view, Value*> values_;  // names are views into s_
};

}  // namespace

std::unique_ptr<Graph> parse_graph(const std::string& text, const ParseOptions& opts) {
  return Parser(text, opts).parse();
}

std::unique_ptr<Graph> parse_graph(const std::string& text, const ExternResolver* externs) {
  ParseOptions opts;
  opts.externs = externs;
  return Parser(text, opts).parse();
}

Dim parse_dim(const std::string& text) { return Parser(text).parse_dim_only(); }

}  // namespace updraft
