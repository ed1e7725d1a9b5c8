#include "compiler/lowered/sizes.h"

#include <algorithm>

#include "compiler/support/diagnostics.h"

namespace modelc {

uint32_t SymbolTable::id(const std::string& name) {
  for (size_t i = 0; i < names_.size(); ++i)
    if (names_[i] == name) return static_cast<uint32_t>(i);
  names_.push_back(name);
  return static_cast<uint32_t>(names_.size() - 1);
}

rt::SizeExpr SymbolTable::size(const Dim& d) {
  rt::SizeExpr e;
  for (const auto& [mono, coef] : d.terms()) {
    rt::SizeExpr::Term t;
    t.coef = coef;
    for (const auto& [sym, power] : mono)
      for (int p = 0; p < power; ++p) t.symbols.push_back(id(sym));
    e.terms.push_back(std::move(t));
  }
  return e;
}

std::vector<rt::SizeExpr> SymbolTable::shape(const Shape& s) {
  std::vector<rt::SizeExpr> out;
  for (const Dim& d : s) out.push_back(size(d));
  return out;
}

rt::SizeExpr SymbolTable::numel(const Shape& s) {
  Dim n = 1;
  for (const Dim& d : s) n = n * d;
  return size(n);
}

std::vector<rt::SizeExpr> SymbolTable::strides(const Shape& s) {
  std::vector<rt::SizeExpr> out(s.size());
  Dim st = 1;
  for (size_t i = s.size(); i-- > 0;) {
    out[i] = size(st);
    st = st * s[i];
  }
  return out;
}

}  // namespace modelc
