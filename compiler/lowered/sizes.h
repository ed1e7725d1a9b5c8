// Symbolic sizes of the IR (Dim) as the runtime's SizeExpr, over a growing symbol table.
#pragma once

#include <string>
#include <vector>

#include "compiler/ir/dim.h"
#include "runtime/base/program.h"

namespace modelc {

class SymbolTable {
 public:
  // The id of a symbol, added on first use.
  uint32_t id(const std::string& name);
  const std::vector<std::string>& names() const { return names_; }
  rt::SizeExpr size(const Dim& d);                 // throws InternalError on a power > 1 overflow
  std::vector<rt::SizeExpr> shape(const Shape& s);
  // Product of a shape's dims, and row-major strides, as sizes.
  rt::SizeExpr numel(const Shape& s);
  std::vector<rt::SizeExpr> strides(const Shape& s);

 private:
  std::vector<std::string> names_;
};


}  // namespace modelc
