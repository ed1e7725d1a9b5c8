// Gradients written as scalar expressions (OpInfo::grad_exprs): compiler/ir/grad.h.
#include <fmt/format.h>

#include <map>

#include "compiler/ir/grads/grad_util.h"
#include "compiler/ir/scalar_expr.h"

namespace modelc {
namespace {

using Op = ScalarExpr::Op;

// The op each primitive of the scalar language stands for.
OpKind primitive_op(Op op) {
  switch (op) {
    case Op::Add: return OpKind::Add;
    case Op::Sub: return OpKind::Sub;
    case Op::Mul: return OpKind::Mul;
    case Op::Div: return OpKind::Div;
    case Op::Neg: return OpKind::Neg;
    case Op::Exp: return OpKind::Exp;
    case Op::Log: return OpKind::Log;
    case Op::Log1p: return OpKind::Log1p;
    case Op::Expm1: return OpKind::Expm1;
    case Op::Sqrt: return OpKind::Sqrt;
    case Op::Tanh: return OpKind::Tanh;
    case Op::Erf: return OpKind::Erf;
    case Op::Abs: return OpKind::Abs;
    case Op::Sin: return OpKind::Sin;
    case Op::Cos: return OpKind::Cos;
    case Op::Floor: return OpKind::Floor;
    case Op::Ceil: return OpKind::Ceil;
    case Op::Round: return OpKind::Round;
    case Op::Max: return OpKind::Maximum;
    case Op::Min: return OpKind::Minimum;
    case Op::Pow: return OpKind::Pow;
    case Op::Lt: return OpKind::Lt;
    case Op::Le: return OpKind::Le;
    case Op::Gt: return OpKind::Gt;
    case Op::Ge: return OpKind::Ge;
    case Op::Eq: return OpKind::Eq;
    case Op::Ne: return OpKind::Ne;
    case Op::Select: return OpKind::Where;
    case Op::Const: case Op::Var: case Op::Call: break;
  }
  throw InternalError("gradient expression: not a primitive");
}

// Builds one rule's expressions into nodes, sharing equal subexpressions.
class NodeBuilder {
 public:
  NodeBuilder(GradCtx& c, std::map<std::string, Value> vars, DType dtype)
      : c_(c), vars_(std::move(vars)), dtype_(dtype) {}

  Value build(const ScalarExpr& e) {
    const std::string key = scalar_str(e);
    if (auto it = memo_.find(key); it != memo_.end()) return it->second;
    Value v;
    switch (e.op) {
      case Op::Const: v = c_.constant(e.value, dtype_); break;
      case Op::Var: {
        auto it = vars_.find(e.var);
        if (it != vars_.end()) return it->second;
        if (!c_.node.attrs.has(e.var))
          throw InternalError(fmt::format("the gradient of {} names '{}', neither an input nor an attribute",
                                          op_name(c_.node.op), e.var));
        v = c_.constant(c_.node.attrs.f(e.var), dtype_);
        break;
      }
      case Op::Call: {
        const OpInfo* callee = OpRegistry::get().find(e.var);
        if (!callee) throw InternalError(fmt::format("the gradient of {} calls '{}', which is no op", op_name(c_.node.op), e.var));
        v = c_.emit(callee->kind, args(e));
        break;
      }
      default: v = c_.emit(primitive_op(e.op), args(e)); break;
    }
    memo_.emplace(key, v);
    return v;
  }

 private:
  std::vector<Value> args(const ScalarExpr& e) {
    std::vector<Value> r;
    for (const ScalarExpr& a : e.args) r.push_back(build(a));
    return r;
  }

  GradCtx& c_;
  std::map<std::string, Value> vars_;
  DType dtype_;
  std::map<std::string, Value> memo_;
};

}  // namespace

GradFn expression_grad(std::vector<std::string> exprs) {
  std::vector<std::optional<ScalarExpr>> parsed;
  for (const std::string& e : exprs) parsed.push_back(e.empty() ? std::nullopt : std::optional(parse_scalar(e)));
  return [parsed = std::move(parsed)](GradCtx& c) {
    Value g = grads::out_grad(c);
    std::map<std::string, Value> vars{{"y", c.output()}, {"g", g}};
    const std::vector<std::string>& names = scalar_vars(c.node.inputs.size());
    for (size_t i = 0; i < names.size(); ++i) vars[names[i]] = c.input(static_cast<int>(i));
    NodeBuilder b(c, std::move(vars), c.type(c.output()).dtype);
    c.in_grads.assign(c.node.inputs.size(), Value{});
    for (size_t i = 0; i < parsed.size() && i < c.node.inputs.size(); ++i)
      if (parsed[i] && c.needs(static_cast<int>(i)))
        c.in_grads[i] = grads::to_input(c, b.build(*parsed[i]), static_cast<int>(i));
  };
}

}  // namespace modelc
