// Node attributes: a small ordered list of name -> value.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "compiler/ir/dim.h"
#include "compiler/ir/dtype.h"

namespace modelc {

using Ints = std::vector<int64_t>;
using AttrValue = std::variant<int64_t, double, bool, std::string, Ints, Shape, DType>;

std::string attr_str(const AttrValue& v);  // how the IR printer shows it

class Attrs {
 public:
  bool has(std::string_view name) const { return find(name) != nullptr; }
  const AttrValue* find(std::string_view name) const {
    for (const auto& [k, v] : items_)
      if (k == name) return &v;
    return nullptr;
  }
  template <class T>
  const T& get(std::string_view name) const;  // throws InternalError if absent or wrong type
  int64_t i(std::string_view name) const { return get<int64_t>(name); }
  double f(std::string_view name) const;  // accepts an int too
  bool b(std::string_view name) const { return get<bool>(name); }
  const Ints& ints(std::string_view name) const { return get<Ints>(name); }
  const Shape& shape(std::string_view name) const { return get<Shape>(name); }
  const std::string& s(std::string_view name) const { return get<std::string>(name); }
  DType dtype(std::string_view name) const { return get<DType>(name); }

  void set(std::string_view name, AttrValue v) {
    for (auto& [k, old] : items_)
      if (k == name) { old = std::move(v); return; }
    items_.emplace_back(std::string(name), std::move(v));
  }
  void erase(std::string_view name) {
    std::erase_if(items_, [&](const auto& kv) { return kv.first == name; });
  }
  const std::vector<std::pair<std::string, AttrValue>>& items() const { return items_; }
  bool empty() const { return items_.empty(); }
  friend bool operator==(const Attrs&, const Attrs&) = default;

 private:
  std::vector<std::pair<std::string, AttrValue>> items_;
};

[[noreturn]] void attr_missing(std::string_view name);

template <class T>
const T& Attrs::get(std::string_view name) const {
  const AttrValue* v = find(name);
  if (!v || !std::holds_alternative<T>(*v)) attr_missing(name);
  return std::get<T>(*v);
}

}  // namespace modelc
