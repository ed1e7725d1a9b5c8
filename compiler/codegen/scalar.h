// Code generation of the scalar-expression language (compiler/ir/scalar_expr.h): a resolved
// expression becomes LLVM IR at a builder's insertion point.
#pragma once

#include <map>
#include <string>

#include "compiler/ir/scalar_expr.h"

namespace llvm {
class Value;
class IRBuilderBase;
}  // namespace llvm

namespace modelc {

// Emits the expression at the builder's insertion point. `vars` gives each variable's
// value: float (f32), i32, or i1 (a bool). The expression must be resolved
// (resolve_scalar: no calls, no attribute names). Throws InternalError on a type error (e.g.
// exp of an integer) or an unbound variable. Result: f32, i32 or i1.
//
// tanh is a polynomial and exp (vectorizable); erf, log1p and expm1 become calls to the C
// library's erff / log1pf / expm1f (the host JIT resolves them from the process); the NVPTX
// path maps them to libdevice's __nv_erff, ... (compiler/codegen/gpu_libdevice.cc).
llvm::Value* emit_scalar(const ScalarExpr& e, llvm::IRBuilderBase& b,
                         const std::map<std::string, llvm::Value*>& vars);

}  // namespace modelc
