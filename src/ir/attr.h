// Node attributes: a small tagged value (int, float, bool, string, int list, float list).
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <variant>
#include <vector>

namespace updraft {

class Attr {
 public:
  enum class Kind : uint8_t { Int, Float, Bool, Str, Ints, Floats };
  Attr() : v_(int64_t{0}) {}
  Attr(int64_t v) : v_(v) {}        // NOLINT
  Attr(int v) : v_(int64_t{v}) {}   // NOLINT
  Attr(double v) : v_(v) {}         // NOLINT
  Attr(bool v) : v_(v) {}           // NOLINT
  Attr(std::string v) : v_(std::move(v)) {}  // NOLINT
  Attr(const char* v) : v_(std::string(v)) {}  // NOLINT
  Attr(std::vector<int64_t> v) : v_(std::move(v)) {}  // NOLINT
  Attr(std::vector<double> v) : v_(std::move(v)) {}   // NOLINT

  Kind kind() const { return static_cast<Kind>(v_.index()); }
  int64_t i() const;                       // Int (or Bool)
  double f() const;                        // Float (or Int)
  bool b() const;                          // Bool (or Int)
  const std::string& s() const;
  const std::vector<int64_t>& ints() const;
  const std::vector<double>& floats() const;
  std::string str() const;  // text-IR form: 3, 1.5, true, "gelu", [1, 2], [0.5, 1.0]
  bool operator==(const Attr& o) const { return v_ == o.v_; }

 private:
  std::variant<int64_t, double, bool, std::string, std::vector<int64_t>, std::vector<double>> v_;
};

using Attrs = std::map<std::string, Attr>;

}  // namespace updraft
