#include "compiler/ir/dim.h"

#include <algorithm>

#include "compiler/ir/types.h"

namespace modelc {

namespace {

int64_t checked_add(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_add_overflow(a, b, &r)) throw DimOverflow();
  return r;
}

int64_t checked_mul(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_mul_overflow(a, b, &r)) throw DimOverflow();
  return r;
}

}  // namespace

Dim::Dim(int64_t c) {
  if (c != 0) terms_[{}] = c;
}

Dim Dim::symbol(const std::string& name) {
  Dim d;
  d.terms_[{{name, 1}}] = 1;
  return d;
}

void Dim::normalize() {
  std::erase_if(terms_, [](const auto& t) { return t.second == 0; });
}

bool Dim::is_const() const { return terms_.empty() || (terms_.size() == 1 && terms_.begin()->first.empty()); }

std::optional<int64_t> Dim::as_const() const {
  if (!is_const()) return std::nullopt;
  return const_value();
}

int64_t Dim::const_value() const { return terms_.empty() ? 0 : terms_.begin()->second; }

Dim operator+(const Dim& a, const Dim& b) {
  Dim r = a;
  for (const auto& [m, c] : b.terms_) r.terms_[m] = checked_add(r.terms_[m], c);
  r.normalize();
  return r;
}

Dim Dim::operator-() const {
  Dim r = *this;
  for (auto& t : r.terms_) t.second = checked_mul(t.second, -1);
  return r;
}

Dim operator-(const Dim& a, const Dim& b) { return a + (-b); }

static Dim::Monomial mul_monomial(const Dim::Monomial& a, const Dim::Monomial& b) {
  std::map<std::string, int> e;
  for (const auto* m : {&a, &b}) {
    for (const auto& [s, k] : *m) {
      int64_t sum = static_cast<int64_t>(e[s]) + k;
      if (sum > 1000000) throw DimOverflow();  // no real shape has B**1000000
      e[s] = static_cast<int>(sum);
    }
  }
  Dim::Monomial r;
  for (const auto& [s, k] : e)
    if (k != 0) r.emplace_back(s, k);
  return r;
}

Dim operator*(const Dim& a, const Dim& b) {
  Dim r;
  for (const auto& [ma, ca] : a.terms_)
    for (const auto& [mb, cb] : b.terms_) {
      int64_t& slot = r.terms_[mul_monomial(ma, mb)];
      slot = checked_add(slot, checked_mul(ca, cb));
    }
  r.normalize();
  return r;
}

std::optional<Dim> Dim::divide(const Dim& a, const Dim& b) {
  if (b.terms_.empty()) return std::nullopt;
  if (a == b) return Dim(1);
  if (b.terms_.size() != 1) return std::nullopt;
  const auto& [bm, bc] = *b.terms_.begin();
  Dim r;
  for (const auto& [am, ac] : a.terms_) {
    if ((bc == -1 && ac == INT64_MIN) || ac % bc != 0) return std::nullopt;  // INT64_MIN / -1 overflows
    std::map<std::string, int> e;
    for (const auto& [s, k] : am) e[s] += k;
    for (const auto& [s, k] : bm) e[s] -= k;
    Monomial m;
    for (const auto& [s, k] : e) {
      if (k < 0) return std::nullopt;
      if (k > 0) m.emplace_back(s, k);
    }
    r.terms_[m] = checked_add(r.terms_[m], ac / bc);
  }
  r.normalize();
  return r;
}

std::optional<int64_t> Dim::evaluate(const std::map<std::string, int64_t>& values) const {
  int64_t total = 0;
  for (const auto& [m, c] : terms_) {
    int64_t v = c;
    for (const auto& [s, k] : m) {
      auto it = values.find(s);
      if (it == values.end()) return std::nullopt;
      for (int i = 0; i < k; ++i) v = checked_mul(v, it->second);
    }
    total = checked_add(total, v);
  }
  return total;
}

Dim Dim::substitute(const std::map<std::string, Dim>& values) const {
  Dim r;
  for (const auto& [m, c] : terms_) {
    Dim t(c);
    for (const auto& [s, k] : m) {
      auto it = values.find(s);
      Dim base = it == values.end() ? Dim::symbol(s) : it->second;
      for (int i = 0; i < k; ++i) t = t * base;
    }
    r = r + t;
  }
  return r;
}

std::vector<std::string> Dim::symbols() const {
  std::vector<std::string> r;
  for (const auto& [m, c] : terms_)
    for (const auto& [s, k] : m)
      if (std::find(r.begin(), r.end(), s) == r.end()) r.push_back(s);
  return r;
}

std::string Dim::str() const {
  if (terms_.empty()) return "0";
  // Highest degree first, the constant last: "B*T+2*B+1".
  std::vector<std::pair<Monomial, int64_t>> ts(terms_.begin(), terms_.end());
  auto degree = [](const Monomial& m) {
    int d = 0;
    for (const auto& p : m) d += p.second;
    return d;
  };
  std::stable_sort(ts.begin(), ts.end(),
                   [&](const auto& x, const auto& y) { return degree(x.first) > degree(y.first); });
  std::string out;
  bool first = true;
  for (const auto& [m, c] : ts) {
    uint64_t mag = c < 0 ? 0 - static_cast<uint64_t>(c) : static_cast<uint64_t>(c);
    if (c < 0) out += first ? "-" : "-";
    else if (!first) out += "+";
    first = false;
    std::string mono;
    for (const auto& [s, k] : m) {
      for (int i = 0; i < k; ++i) {
        if (!mono.empty()) mono += "*";
        mono += s;
      }
    }
    if (mono.empty()) out += std::to_string(mag);
    else if (mag == 1) out += mono;
    else out += std::to_string(mag) + "*" + mono;
  }
  return out;
}

std::string shape_str(const Shape& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) {
    if (i) out += ",";
    out += s[i].str();
  }
  return out + "]";
}

std::string TensorType::str() const { return std::string(dtype_name(dtype)) + shape_str(shape); }

}  // namespace modelc
