// The scalar-expression language: the small fixed set of primitives code generation knows
// (tinygrad style), in which every elementwise op states its math (OpInfo::scalar) and its
// gradient (OpInfo::grad_exprs).
//
//   expr   := cmp
//   cmp    := sum [(< | <= | > | >= | == | !=) sum]
//   sum    := prod {(+ | -) prod}
//   prod   := unary {(* | /) unary}
//   unary  := - unary | number | inf | nan | name | fn(expr, ...) | (expr)
//   fn     := a primitive: exp log log1p expm1 sqrt tanh erf abs neg sin cos floor ceil
//             round (1 argument; round is half to even), max min pow (2), select(c, a, b);
//             or any elementwise op of the registry by name (sigmoid(x)), which stands for
//             that op's own definition
//
// Names are the op's inputs (x for one input; a b for two; c a b for three), and in a
// gradient y (the op's output) and g (the gradient reaching it); any other name is a
// numeric attribute of the node (leaky_relu's negative_slope), resolved when the expression
// is bound to a node (resolve_scalar). Comparisons give booleans; max/min propagate NaN.
// Values are typed by the inputs: f32 math for floats, i32 arithmetic for integers
// (+ - * neg abs max min and comparisons), bool for comparisons and select conditions.
//
// Three readers: code generation emits the resolved expression as LLVM IR
// (compiler/codegen/scalar.h), eval_scalar evaluates it in double (tests compare it with the
// op's reference), and the gradient builder turns a gradient expression into graph nodes
// (compiler/ir/grads/expr_grad.cc), a primitive becoming the op of the same name.
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "compiler/ir/attrs.h"

namespace modelc {

struct ScalarExpr {
  enum class Op {
    Const, Var, Call,
    Add, Sub, Mul, Div, Neg,
    Exp, Log, Log1p, Expm1, Sqrt, Tanh, Erf, Abs,
    Sin, Cos, Floor, Ceil, Round,
    Max, Min, Pow,
    Lt, Le, Gt, Ge, Eq, Ne,
    Select
  };
  Op op = Op::Const;
  double value = 0;              // Const
  std::string var;               // Var: the name; Call: the op's name
  std::vector<ScalarExpr> args;  // operands in order
};

// Parses a definition; throws InternalError (definitions are ours, not the user's).
ScalarExpr parse_scalar(std::string_view text);
// The expression printed back in the grammar above (fully parenthesised).
std::string scalar_str(const ScalarExpr& e);
// The primitive's name in the grammar ("log1p"), or "" for operators, constants and names.
std::string_view scalar_fn_name(ScalarExpr::Op op);

// Binds an op's definition to one node: every name outside `vars` becomes the constant value
// of the numeric attribute of that name in `attrs` (InternalError when there is none), and
// every call of a registry op is replaced by that op's own definition (with its default
// attributes) applied to the call's arguments, recursively. The result holds primitives,
// constants and the names in `vars` only.
ScalarExpr resolve_scalar(const ScalarExpr& e, const Attrs& attrs, const std::vector<std::string>& vars);

struct Node;
// The resolved definition of elementwise node `n` (its op's `scalar` under its attributes):
// InternalError for an op without one.
ScalarExpr node_scalar(const Node& n);

// Evaluates a resolved expression in double precision (booleans as 0/1). InternalError on an
// unbound name or an unresolved call.
double eval_scalar(const ScalarExpr& e, const std::map<std::string, double>& vars);

// The names bound to an elementwise op's inputs, by input count (x; a b; c a b).
const std::vector<std::string>& scalar_vars(size_t num_inputs);

}  // namespace modelc
