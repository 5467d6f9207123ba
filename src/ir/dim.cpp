#include "ir/dim.h"

#include <algorithm>
#include <cstdint>

#include "core/checked.h"
#include "core/error.h"

namespace updraft {

struct Dim::Node {
  std::string name;
  Dim a, b;
};

Dim Dim::sym(const std::string& name) {
  UPDRAFT_CHECK(!name.empty(), "ir", "symbol name must not be empty");
  Dim d;
  d.kind_ = Kind::Sym;
  d.node_ = std::make_shared<const Node>(Node{name, Dim(), Dim()});
  return d;
}

int64_t Dim::value() const {
  UPDRAFT_CHECK(is_static(), "ir", "dimension " + str() + " is symbolic; bind its symbols first");
  return value_;
}

// Shape arithmetic is checked: expressions come from text (cache entries, the bindings'
// strings) and from sizes the caller binds, and INT64_MIN // -1 traps (SIGFPE) on x86.
static int64_t floordiv_int(int64_t a, int64_t b) {
  UPDRAFT_CHECK(b != 0, "ir", "division by zero in a shape expression");
  if (b == -1 && a == INT64_MIN) throw_overflow("ir", "shape expression", "//", a, b);
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}

// Python's %: the result has the divisor's sign. Computed from the remainder, not as
// a - floordiv(a, b) * b, whose product overflows (1 % INT64_MIN: -1 * INT64_MIN).
static int64_t floormod_int(int64_t a, int64_t b) {
  UPDRAFT_CHECK(b != 0, "ir", "division by zero in a shape expression");
  if (b == -1) return 0;  // a % -1 traps for INT64_MIN on x86
  int64_t r = a % b;
  if (r != 0 && ((r < 0) != (b < 0))) r += b;  // opposite signs: no overflow
  return r;
}

static int64_t apply(Dim::Kind k, int64_t a, int64_t b) {
  switch (k) {
    case Dim::Kind::Add: return checked_add(a, b, "ir", "shape expression");
    case Dim::Kind::Sub: return checked_sub(a, b, "ir", "shape expression");
    case Dim::Kind::Mul: return checked_mul(a, b, "ir", "shape expression");
    case Dim::Kind::FloorDiv: return floordiv_int(a, b);
    case Dim::Kind::Mod: return floormod_int(a, b);
    case Dim::Kind::Max: return std::max(a, b);
    case Dim::Kind::Min: return std::min(a, b);
    default: return 0;
  }
}

int64_t Dim::eval(const SymBindings& b) const {
  switch (kind_) {
    case Kind::Const: return value_;
    case Kind::Sym: {
      auto it = b.find(node_->name);
      UPDRAFT_CHECK(it != b.end(), "ir", "symbol '" + node_->name + "' has no binding");
      return it->second;
    }
    default: return apply(kind_, node_->a.eval(b), node_->b.eval(b));
  }
}

Dim Dim::make(Kind k, const Dim& a, const Dim& b) {
  if (a.is_static() && b.is_static()) return Dim(apply(k, a.value_, b.value_));
  // Identities keep expressions short: x+0, x*1, x*0, x//1.
  if (k == Kind::Add && b.is_static() && b.value_ == 0) return a;
  if (k == Kind::Add && a.is_static() && a.value_ == 0) return b;
  if (k == Kind::Sub && b.is_static() && b.value_ == 0) return a;
  if (k == Kind::Mul && b.is_static() && b.value_ == 1) return a;
  if (k == Kind::Mul && a.is_static() && a.value_ == 1) return b;
  if (k == Kind::Mul && ((a.is_static() && a.value_ == 0) || (b.is_static() && b.value_ == 0))) return Dim(0);
  if (k == Kind::FloorDiv && b.is_static() && b.value_ == 1) return a;
  if ((k == Kind::Max || k == Kind::Min) && a == b) return a;
  // Constant offsets gather into one: ((x+2)-3)+1 -> x, (x-1)+4 -> x+3, 5+x -> x+5. Window
  // shapes (pad, kernel, stride) build such chains, and equal sizes must compare equal.
  if (k == Kind::Add && a.is_static()) return make(Kind::Add, b, a);
  if ((k == Kind::Add || k == Kind::Sub) && b.is_static()) {
    Dim base = a;
    int64_t off = k == Kind::Add ? b.value_ : checked_sub<int64_t>(0, b.value_, "ir", "shape expression");
    if ((a.kind_ == Kind::Add || a.kind_ == Kind::Sub) && a.node_->b.is_static()) {
      base = a.node_->a;
      const int64_t inner = a.node_->b.value_;
      off = a.kind_ == Kind::Add ? checked_add(off, inner, "ir", "shape expression")
                                 : checked_sub(off, inner, "ir", "shape expression");
    }
    if (off == 0) return base;
    Dim d;
    d.kind_ = off > 0 ? Kind::Add : Kind::Sub;
    const int64_t mag = off > 0 ? off : checked_sub<int64_t>(0, off, "ir", "shape expression");
    d.node_ = std::make_shared<const Node>(Node{"", base, Dim(mag)});
    return d;
  }
  Dim d;
  d.kind_ = k;
  d.node_ = std::make_shared<const Node>(Node{"", a, b});
  return d;
}

Dim operator+(const Dim& a, const Dim& b) { return Dim::make(Dim::Kind::Add, a, b); }
Dim operator-(const Dim& a, const Dim& b) { return Dim::make(Dim::Kind::Sub, a, b); }
Dim operator*(const Dim& a, const Dim& b) { return Dim::make(Dim::Kind::Mul, a, b); }
Dim floordiv(const Dim& a, const Dim& b) { return Dim::make(Dim::Kind::FloorDiv, a, b); }
Dim mod(const Dim& a, const Dim& b) { return Dim::make(Dim::Kind::Mod, a, b); }
Dim max(const Dim& a, const Dim& b) { return Dim::make(Dim::Kind::Max, a, b); }
Dim min(const Dim& a, const Dim& b) { return Dim::make(Dim::Kind::Min, a, b); }

bool Dim::operator==(const Dim& o) const {
  if (kind_ != o.kind_) return false;
  if (kind_ == Kind::Const) return value_ == o.value_;
  if (node_ == o.node_) return true;
  if (kind_ == Kind::Sym) return node_->name == o.node_->name;
  return node_->a == o.node_->a && node_->b == o.node_->b;
}

std::string Dim::str() const {
  switch (kind_) {
    case Kind::Const: return std::to_string(value_);
    case Kind::Sym: return node_->name;
    case Kind::Add: return "(" + node_->a.str() + "+" + node_->b.str() + ")";
    case Kind::Sub: return "(" + node_->a.str() + "-" + node_->b.str() + ")";
    case Kind::Mul: return "(" + node_->a.str() + "*" + node_->b.str() + ")";
    case Kind::FloorDiv: return "(" + node_->a.str() + "//" + node_->b.str() + ")";
    case Kind::Mod: return "(" + node_->a.str() + "%" + node_->b.str() + ")";
    case Kind::Max: return "max(" + node_->a.str() + "," + node_->b.str() + ")";
    case Kind::Min: return "min(" + node_->a.str() + "," + node_->b.str() + ")";
  }
  return "?";
}

std::pair<Dim, Dim> Dim::operands() const {
  UPDRAFT_CHECK(kind_ != Kind::Const && kind_ != Kind::Sym, "ir", "dimension " + str() + " has no operands");
  return {node_->a, node_->b};
}

void Dim::collect_symbols(std::vector<std::string>& out) const {
  if (kind_ == Kind::Const) return;
  if (kind_ == Kind::Sym) {
    if (std::find(out.begin(), out.end(), node_->name) == out.end()) out.push_back(node_->name);
    return;
  }
  node_->a.collect_symbols(out);
  node_->b.collect_symbols(out);
}

std::string shape_str(const Shape& s) {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + s[i].str();
  return r + "]";
}

bool shape_is_static(const Shape& s) {
  return std::all_of(s.begin(), s.end(), [](const Dim& d) { return d.is_static(); });
}

std::vector<int64_t> shape_values(const Shape& s) {
  std::vector<int64_t> v;
  v.reserve(s.size());
  for (const Dim& d : s) v.push_back(d.value());
  return v;
}

std::vector<int64_t> shape_eval(const Shape& s, const SymBindings& b) {
  std::vector<int64_t> v;
  v.reserve(s.size());
  for (const Dim& d : s) v.push_back(d.eval(b));
  return v;
}

Shape shape_from(const std::vector<int64_t>& v) { return Shape(v.begin(), v.end()); }

Dim shape_numel(const Shape& s) {
  Dim n(1);
  for (const Dim& d : s) n = n * d;
  return n;
}

}  // namespace updraft
