// Symbolic dimensions.
//
// A Dim is a polynomial with integer coefficients over named symbols (the model's unbound
// dimensions, e.g. B): 4*C, B*T, B+1. Equality is exact: two dims are the same when their
// polynomials are. Arithmetic that leaves the polynomials (a division that does not come
// out even) fails with a message instead of guessing.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace modelc {

// Thrown when dimension arithmetic leaves int64 (only hostile inputs get there).
class DimOverflow : public std::overflow_error {
 public:
  DimOverflow() : std::overflow_error("integer overflow in dimension arithmetic") {}
};

class Dim {
 public:
  // A monomial: symbols with exponents, sorted by name.
  using Monomial = std::vector<std::pair<std::string, int>>;

  Dim() = default;                       // 0
  Dim(int64_t c);                        // NOLINT: a constant converts implicitly
  static Dim symbol(const std::string& name);

  bool is_const() const;
  std::optional<int64_t> as_const() const;
  int64_t const_value() const;  // requires is_const()
  bool is_symbolic() const { return !is_const(); }

  friend Dim operator+(const Dim& a, const Dim& b);
  friend Dim operator-(const Dim& a, const Dim& b);
  friend Dim operator*(const Dim& a, const Dim& b);
  Dim operator-() const;
  // Exact division; nullopt when b does not divide a as polynomials (or b == 0).
  static std::optional<Dim> divide(const Dim& a, const Dim& b);

  friend bool operator==(const Dim& a, const Dim& b) { return a.terms_ == b.terms_; }
  friend bool operator!=(const Dim& a, const Dim& b) { return !(a == b); }
  friend bool operator<(const Dim& a, const Dim& b) { return a.terms_ < b.terms_; }

  // Substitutes values for symbols; nullopt if a symbol has no value.
  std::optional<int64_t> evaluate(const std::map<std::string, int64_t>& values) const;
  // Substitutes dims for symbols (symbols without a binding stay).
  Dim substitute(const std::map<std::string, Dim>& values) const;
  std::vector<std::string> symbols() const;

  std::string str() const;  // "B", "4*C", "B*T+1", "0"
  const std::map<Monomial, int64_t>& terms() const { return terms_; }

 private:
  std::map<Monomial, int64_t> terms_;  // no zero coefficients
  void normalize();
};

using Shape = std::vector<Dim>;
std::string shape_str(const Shape& s);  // "[B,128,192]"

}  // namespace modelc
