#include "ir/attr.h"

#include <cmath>
#include <cstdio>

#include "core/error.h"

namespace updraft {

static const char* kind_name(Attr::Kind k) {
  static const char* names[] = {"int", "float", "bool", "string", "int list", "float list",
                                "symbolic size list", "symbolic size"};
  return names[static_cast<int>(k)];
}

#define ATTR_EXPECT(cond, want) \
  UPDRAFT_CHECK(cond, "ir", std::string("attribute is a ") + kind_name(kind()) + ", expected " + want)

int64_t Attr::i() const {
  if (auto* b = std::get_if<bool>(&v_)) return *b;
  ATTR_EXPECT(kind() == Kind::Int, "int");
  return std::get<int64_t>(v_);
}
double Attr::f() const {
  if (auto* x = std::get_if<int64_t>(&v_)) return static_cast<double>(*x);
  ATTR_EXPECT(kind() == Kind::Float, "float");
  return std::get<double>(v_);
}
bool Attr::b() const {
  if (auto* x = std::get_if<int64_t>(&v_)) return *x != 0;
  ATTR_EXPECT(kind() == Kind::Bool, "bool");
  return std::get<bool>(v_);
}
const std::string& Attr::s() const {
  ATTR_EXPECT(kind() == Kind::Str, "string");
  return std::get<std::string>(v_);
}
const std::vector<int64_t>& Attr::ints() const {
  ATTR_EXPECT(kind() == Kind::Ints, "int list");
  return std::get<std::vector<int64_t>>(v_);
}
const std::vector<double>& Attr::floats() const {
  ATTR_EXPECT(kind() == Kind::Floats, "float list");
  return std::get<std::vector<double>>(v_);
}

Attr Attr::from_dims(const Shape& dims) {
  Attr a;
  if (shape_is_static(dims)) a.v_ = shape_values(dims);
  else a.v_ = dims;
  return a;
}
Attr Attr::from_dim(const Dim& d) {
  Attr a;
  if (d.is_static()) a.v_ = d.value();
  else a.v_ = d;
  return a;
}
Shape Attr::dims() const {
  if (kind() == Kind::Ints) return shape_from(std::get<std::vector<int64_t>>(v_));
  ATTR_EXPECT(kind() == Kind::Dims, "int list or symbolic size list");
  return std::get<Shape>(v_);
}
Dim Attr::dim() const {
  if (kind() == Kind::Int) return Dim(std::get<int64_t>(v_));
  ATTR_EXPECT(kind() == Kind::Sym, "int or symbolic size");
  return std::get<Dim>(v_);
}

bool attrs_symbolic(const Attrs& attrs) {
  for (const auto& kv : attrs)
    if (kv.second.is_symbolic()) return true;
  return false;
}

Attrs bind_attrs(const Attrs& attrs, const SymBindings& b) {
  Attrs out = attrs;
  for (auto& [name, a] : out) {
    if (!a.is_symbolic()) continue;
    try {
      if (a.kind() == Attr::Kind::Dims) a = Attr(shape_eval(a.dims(), b));
      else a = Attr(a.dim().eval(b));
    } catch (const Error& e) {
      throw Error("ir", "attribute '" + name + "' = " + a.str() + " cannot be evaluated: " + e.what());
    }
  }
  return out;
}

// Floats print with enough digits to round-trip exactly, and always with a '.', 'e', "inf"
// or "nan" so the parser can tell them from ints.
static std::string float_str(double x) {
  if (std::isnan(x)) return "nan";
  if (std::isinf(x)) return x > 0 ? "inf" : "-inf";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.17g", x);
  std::string s = buf;
  if (s.find_first_of(".e") == std::string::npos) s += ".0";
  return s;
}

std::string Attr::str() const {
  switch (kind()) {
    case Kind::Int: return std::to_string(std::get<int64_t>(v_));
    case Kind::Float: return float_str(std::get<double>(v_));
    case Kind::Bool: return std::get<bool>(v_) ? "true" : "false";
    case Kind::Str: return "\"" + std::get<std::string>(v_) + "\"";
    case Kind::Ints: {
      std::string r = "[";
      const auto& v = std::get<std::vector<int64_t>>(v_);
      for (size_t k = 0; k < v.size(); ++k) r += (k ? ", " : "") + std::to_string(v[k]);
      return r + "]";
    }
    case Kind::Floats: {
      std::string r = "f[";
      const auto& v = std::get<std::vector<double>>(v_);
      for (size_t k = 0; k < v.size(); ++k) r += (k ? ", " : "") + float_str(v[k]);
      return r + "]";
    }
    case Kind::Dims: return shape_str(std::get<Shape>(v_));
    case Kind::Sym: return std::get<Dim>(v_).str();
  }
  return "?";
}

}  // namespace updraft
