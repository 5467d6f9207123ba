// Dim: one dimension of a shape, either a known integer or a symbolic expression over named
// symbols ("s0", "s0*2", "(s1+1)//2"). Shape functions compute with Dims, so one graph serves
// every binding of its symbols; a memory plan is built per concrete binding (SymBindings).
//
//   Dim b = Dim::sym("s0");
//   Dim n = b * 128;          // symbolic
//   n.eval({{"s0", 4}});      // 512
//   (Dim(3) + 4).value();     // 7, folded at construction
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace updraft {

using SymBindings = std::map<std::string, int64_t>;

class Dim {
 public:
  enum class Kind : uint8_t { Const, Sym, Add, Sub, Mul, FloorDiv, Mod, Max, Min };

  Dim(int64_t v = 0) : kind_(Kind::Const), value_(v) {}  // NOLINT: implicit from int is the point
  static Dim sym(const std::string& name);

  bool is_static() const { return kind_ == Kind::Const; }
  int64_t value() const;  // throws Error("ir", ...) when symbolic
  int64_t eval(const SymBindings& b) const;  // throws when a symbol is unbound
  std::string str() const;
  void collect_symbols(std::vector<std::string>& out) const;
  // Structure, for shape functions that simplify (e.g. reshape cancelling factors).
  Kind kind() const { return kind_; }
  std::pair<Dim, Dim> operands() const;  // the two sides of Add..Min; throws for Const/Sym

  bool operator==(const Dim& o) const;  // structural equality
  bool operator!=(const Dim& o) const { return !(*this == o); }

  friend Dim operator+(const Dim& a, const Dim& b);
  friend Dim operator-(const Dim& a, const Dim& b);
  friend Dim operator*(const Dim& a, const Dim& b);
  friend Dim floordiv(const Dim& a, const Dim& b);
  friend Dim mod(const Dim& a, const Dim& b);
  friend Dim max(const Dim& a, const Dim& b);
  friend Dim min(const Dim& a, const Dim& b);

 private:
  struct Node;
  static Dim make(Kind k, const Dim& a, const Dim& b);
  Kind kind_;
  int64_t value_ = 0;
  std::shared_ptr<const Node> node_;  // Sym: name; binary kinds: operands
};

using Shape = std::vector<Dim>;

std::string shape_str(const Shape& s);  // "[2, s0, 64]"
bool shape_is_static(const Shape& s);
std::vector<int64_t> shape_values(const Shape& s);  // throws if symbolic
std::vector<int64_t> shape_eval(const Shape& s, const SymBindings& b);
Shape shape_from(const std::vector<int64_t>& v);
Dim shape_numel(const Shape& s);

}  // namespace updraft
