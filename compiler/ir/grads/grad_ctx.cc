// GradCtx's emit and constant, and the helpers the gradient rules share (grad_util.h).
#include <fmt/format.h>

#include "compiler/ir/grads/grad_util.h"

namespace modelc {

Value GradCtx::emit(OpKind op, std::vector<Value> inputs, Attrs attrs) {
  InferFailure f;
  auto id = add_op(g, op, std::move(inputs), std::move(attrs), node.loc, &f);
  if (!id)
    throw InternalError(fmt::format("internal error: the gradient of {} (%{}) builds a bad {}: {}",
                                    op_name(node.op), this->id, op_name(op), f.message));
  g.nodes[*id].scope = node.scope;
  return Value{*id, 0};
}

Value GradCtx::constant(double value, DType dtype, const Shape& shape) {
  Node n;
  n.op = OpKind::Constant;
  n.attrs.set("value", value);
  n.outputs = {TensorType{dtype, shape}};
  n.loc = node.loc;
  n.scope = node.scope;
  return Value{g.add(std::move(n)), 0};
}

namespace grads {

Value out_grad(GradCtx& c, int i) {
  Value g = c.out_grads.at(static_cast<size_t>(i));
  if (g.valid()) return g;
  const TensorType& t = c.type(c.output(i));
  return c.constant(0.0, t.dtype, t.shape);
}

Value reduce_to(GradCtx& c, Value g, const Shape& shape) {
  const Shape& have = c.type(g).shape;
  if (have == shape) return g;
  MODELC_CHECK(have.size() >= shape.size(), "reduce_to: the target has a higher rank");
  size_t lead = have.size() - shape.size();
  Ints axes;
  for (size_t d = 0; d < have.size(); ++d)
    if (d < lead || (shape[d - lead] == Dim(1) && have[d] != Dim(1))) axes.push_back(static_cast<int64_t>(d));
  if (!axes.empty()) {
    Attrs a;
    a.set("axes", axes);
    a.set("keepdims", true);
    g = c.emit(OpKind::Sum, {g}, std::move(a));
  }
  if (c.type(g).shape == shape) return g;
  Attrs a;
  a.set("shape", shape);
  return c.emit(OpKind::Reshape, {g}, std::move(a));
}

Value to_input(GradCtx& c, Value g, int i) {
  const TensorType& t = c.type(c.input(i));
  g = reduce_to(c, g, t.shape);
  if (c.type(g).dtype == t.dtype) return g;
  Attrs a;
  a.set("dtype", t.dtype);
  return c.emit(OpKind::Cast, {g}, std::move(a));
}

Value count(GradCtx& c, const Shape& dims, DType dtype) {
  Dim n(1);
  for (const Dim& d : dims) n = n * d;
  if (auto v = n.as_const()) return c.constant(static_cast<double>(*v), dtype);
  Value ones = c.constant(1.0, dtype, dims);
  return c.emit(OpKind::Sum, {ones});
}

Value keepdims(GradCtx& c, Value x, const Shape& in_shape, const Ints& axes, bool kept) {
  if (kept) return x;
  Shape s = in_shape;
  for (int64_t a : axes) s[static_cast<size_t>(a)] = Dim(1);
  if (c.type(x).shape == s) return x;
  Attrs at;
  at.set("shape", s);
  return c.emit(OpKind::Reshape, {x}, std::move(at));
}

Value sum_keep(GradCtx& c, Value x, Ints axes) {
  Attrs a;
  a.set("axes", std::move(axes));
  a.set("keepdims", true);
  return c.emit(OpKind::Sum, {x}, std::move(a));
}

Value mean_keep(GradCtx& c, Value x, Ints axes) {
  Attrs a;
  a.set("axes", std::move(axes));
  a.set("keepdims", true);
  return c.emit(OpKind::Mean, {x}, std::move(a));
}

int64_t known(const GradCtx& c, const Dim& d, const char* what) {
  if (auto v = d.as_const()) return *v;
  throw UserError(fmt::format("autodiff: the gradient of {} (%{} at line {}, column {}) needs a known {}, got {}",
                              op_name(c.node.op), c.id, c.node.loc.line, c.node.loc.col, what, d.str()));
}

Value add(GradCtx& c, Value a, Value b) { return c.emit(OpKind::Add, {a, b}); }
Value sub(GradCtx& c, Value a, Value b) { return c.emit(OpKind::Sub, {a, b}); }
Value mul(GradCtx& c, Value a, Value b) { return c.emit(OpKind::Mul, {a, b}); }
Value div(GradCtx& c, Value a, Value b) { return c.emit(OpKind::Div, {a, b}); }
Value neg(GradCtx& c, Value a) { return c.emit(OpKind::Neg, {a}); }
Value scalar(GradCtx& c, double v, Value like) { return c.constant(v, c.type(like).dtype); }

}  // namespace grads
}  // namespace modelc
