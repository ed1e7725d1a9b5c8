// What an op's gradient rule sees and produces.
//
// A rule is registered with its op (OpRegistry::Builder::grad) and builds the vector-Jacobian
// product of the op from other ops: given the gradients flowing into the node's outputs, it
// appends nodes to the graph that compute the gradient of each tensor input. The autodiff
// pass (compiler/passes/autodiff.h) calls the rules in reverse topological order.
#pragma once

#include <vector>

#include "compiler/ir/graph.h"
#include "compiler/ir/op_registry.h"

namespace modelc {

struct GradCtx {
  Graph& g;
  NodeId id;                     // the node being differentiated
  Node node;                     // a copy of it (the graph grows while the rule runs)
  std::vector<Value> out_grads;  // d loss / d output i; invalid when no gradient reaches it
  std::vector<Value> in_grads;   // to fill: d loss / d input i; invalid = no gradient
  // Which inputs the caller needs a gradient for (empty: all). A rule may skip the others
  // (and must still give every input it is asked for).
  std::vector<bool> needed;

  Value input(int i) const { return node.inputs.at(static_cast<size_t>(i)); }
  Value output(int i = 0) const { return Value{id, static_cast<uint32_t>(i)}; }
  const TensorType& type(Value v) const { return g.type(v); }
  bool needs(int i) const {
    return needed.empty() || (static_cast<size_t>(i) < needed.size() && needed[static_cast<size_t>(i)]);
  }
  // Appends an op (defaults applied, shape rule run) at the node's source location and
  // scope; throws InternalError when the shape rule refuses (a bug in a rule).
  Value emit(OpKind op, std::vector<Value> inputs, Attrs attrs = {});
  // A scalar constant of `dtype` broadcast to `shape`.
  Value constant(double value, DType dtype, const Shape& shape = {});
};

// The rule of an elementwise op whose gradient is given as scalar expressions
// (OpInfo::grad_exprs, compiler/ir/scalar_expr.h): one per input over the inputs (x; a b;
// c a b), y and g, "" for none. Each becomes graph nodes at the node's place, a primitive
// becoming the op of the same name (select: where; max: maximum), a call the op it names
// (with its default attributes), a constant a rank-0 constant of the output's dtype, and any
// other name the node's numeric attribute of that name; equal subexpressions of one rule are
// built once. The input's gradient is then summed over what broadcasting stretched and cast
// to the input's dtype (grads::to_input).
GradFn expression_grad(std::vector<std::string> exprs);

}  // namespace modelc
