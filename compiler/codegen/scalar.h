// The scalar-expression language of code generation: the small fixed set of primitives
// codegen knows (tinygrad style), in which every elementwise op states its definition
// (the registry's `scalar` slot; compiler/ir/ops/scalar_defs.cc).
//
//   expr   := cmp
//   cmp    := sum [(< | <= | > | >= | == | !=) sum]
//   sum    := prod {(+ | -) prod}
//   prod   := unary {(* | /) unary}
//   unary  := - unary | number | inf | nan | variable | fn(expr, ...) | (expr)
//   fn     := exp log sqrt tanh erf abs neg (1 arg), max min pow (2), select(c, a, b)
//
// Variables are the op's inputs: x (unary), a b (binary), c a b (where). Comparisons give
// booleans; max/min propagate NaN like the reference (compiler/ir/ops/elementwise.cc).
// Values are typed by the inputs: f32 math for floats, i32 arithmetic for integers
// (+ - * neg abs max min and comparisons), bool for comparisons and select conditions.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace llvm {
class Value;
class IRBuilderBase;
}  // namespace llvm

namespace modelc {

struct ScalarExpr {
  enum class Op {
    Const, Var,
    Add, Sub, Mul, Div, Neg,
    Exp, Log, Sqrt, Tanh, Erf, Abs,
    Max, Min, Pow,
    Lt, Le, Gt, Ge, Eq, Ne,
    Select
  };
  Op op = Op::Const;
  double value = 0;              // Const
  std::string var;               // Var
  std::vector<ScalarExpr> args;  // operands in order
};

// Parses a definition; throws InternalError (definitions are ours, not the user's).
ScalarExpr parse_scalar(std::string_view text);
// The definition printed back in the grammar above (fully parenthesised).
std::string scalar_str(const ScalarExpr& e);
// Evaluates in double precision (booleans as 0/1): tests compare this with the reference.
double eval_scalar(const ScalarExpr& e, const std::map<std::string, double>& vars);
// Emits the expression at the builder's insertion point. `vars` gives each variable's
// value: float (f32), i32, or i1 (a bool). Throws InternalError on a type error (e.g. exp
// of an integer) or an unbound variable. Result: f32, i32 or i1.
//
// tanh and erf become calls to the C library's tanhf / erff (the host JIT resolves them
// from the process); the NVPTX path must map them to libdevice's __nv_tanhf / __nv_erff.
llvm::Value* emit_scalar(const ScalarExpr& e, llvm::IRBuilderBase& b,
                         const std::map<std::string, llvm::Value*>& vars);

// The variable names bound to an elementwise op's inputs, by input count (x; a b; c a b).
const std::vector<std::string>& scalar_vars(size_t num_inputs);

}  // namespace modelc
