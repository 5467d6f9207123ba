// Node attributes: a small tagged value (int, float, bool, string, int list, float list), plus
// two symbolic kinds for sizes that depend on the graph's dynamic dims:
//   Dims: a list of Dims, e.g. a reshape target [s0, (s1*12), 64]
//   Sym:  one Dim, e.g. a slice end s1
// A symbolic attribute whose entries are all static is stored as Ints / Int (from_dims and
// from_dim normalise), so equal sizes compare equal however they were built and the text form
// round-trips: the parser reads [1, 2] back as Ints and [s0, 2] as Dims.
//
//   Attr a = Attr::from_dims({Dim::sym("s0"), Dim::sym("s1") * 12, 64});
//   a.str();                              // "[s0, (s1*12), 64]"
//   bind_attrs({{"shape", a}}, {{"s0", 2}, {"s1", 5}})  // {"shape": [2, 60, 64]} (Ints)
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <variant>
#include <vector>

#include "ir/dim.h"

namespace updraft {

class Attr {
 public:
  enum class Kind : uint8_t { Int, Float, Bool, Str, Ints, Floats, Dims, Sym };
  Attr() : v_(int64_t{0}) {}
  Attr(int64_t v) : v_(v) {}        // NOLINT
  Attr(int v) : v_(int64_t{v}) {}   // NOLINT
  Attr(double v) : v_(v) {}         // NOLINT
  Attr(bool v) : v_(v) {}           // NOLINT
  Attr(std::string v) : v_(std::move(v)) {}  // NOLINT
  Attr(const char* v) : v_(std::string(v)) {}  // NOLINT
  Attr(std::vector<int64_t> v) : v_(std::move(v)) {}  // NOLINT
  Attr(std::vector<double> v) : v_(std::move(v)) {}   // NOLINT
  // Named factories rather than constructors: an int braced list would otherwise be ambiguous
  // between std::vector<int64_t> and std::vector<Dim>.
  static Attr from_dims(const Shape& dims);  // Ints when every dim is static
  static Attr from_dim(const Dim& d);        // Int when static

  Kind kind() const { return static_cast<Kind>(v_.index()); }
  int64_t i() const;                       // Int (or Bool)
  double f() const;                        // Float (or Int)
  bool b() const;                          // Bool (or Int)
  const std::string& s() const;
  const std::vector<int64_t>& ints() const;
  const std::vector<double>& floats() const;
  Shape dims() const;  // Dims, or Ints as static dims
  Dim dim() const;     // Sym, or Int as a static dim
  bool is_symbolic() const { return kind() == Kind::Dims || kind() == Kind::Sym; }
  std::string str() const;  // text-IR form: 3, 1.5, true, "gelu", [1, 2], [0.5, 1.0]
  bool operator==(const Attr& o) const { return v_ == o.v_; }

 private:
  std::variant<int64_t, double, bool, std::string, std::vector<int64_t>, std::vector<double>, Shape, Dim> v_;
};

using Attrs = std::map<std::string, Attr>;

bool attrs_symbolic(const Attrs& attrs);  // any Dims or Sym attribute
// `attrs` with every Dims/Sym attribute evaluated under `b` (to Ints/Int); throws
// Error("ir", ...) naming the attribute when a symbol is unbound.
Attrs bind_attrs(const Attrs& attrs, const SymBindings& b);

}  // namespace updraft
