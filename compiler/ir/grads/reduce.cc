// Gradient rules of the reductions: sum, mean, max and prod.
//
// prod's gradient at x_i is the product of the other elements of its group. Where the group
// holds no zero that is y / x_i; where it holds one zero, it is the product of the nonzero
// elements at the zero and 0 elsewhere; with two or more zeros it is 0 everywhere. The rule
// builds exactly that from the product of the nonzero elements and the count of zeros, so no
// quotient is ever taken by a zero.
//
// max sends the gradient to the elements equal to the maximum and splits it evenly among
// tied maxima (as PyTorch's amax does), so the rule is symmetric in the tied elements and
// independent of scan order.
#include "compiler/ir/grads/grad_util.h"

namespace modelc::grads {

namespace {

// The reduced extents of x (for mean's count).
Shape reduced_dims(const Shape& x, const Ints& axes) {
  Shape s;
  for (int64_t a : axes) s.push_back(x[static_cast<size_t>(a)]);
  return s;
}

// g with the reduced axes restored as 1s, broadcast back to x's shape.
Value spread(GradCtx& c, Value g) {
  const TensorType& x = c.type(c.input(0));
  g = keepdims(c, g, x.shape, c.node.attrs.ints("axes"), c.node.attrs.b("keepdims"));
  Attrs a;
  a.set("shape", x.shape);
  return c.emit(OpKind::BroadcastTo, {g}, std::move(a));
}

}  // namespace

void sum(GradCtx& c) { c.in_grads = {spread(c, out_grad(c))}; }

void mean(GradCtx& c) {
  const TensorType& x = c.type(c.input(0));
  Value n = count(c, reduced_dims(x.shape, c.node.attrs.ints("axes")), x.dtype);
  c.in_grads = {spread(c, div(c, out_grad(c), n))};
}

void max(GradCtx& c) {
  const TensorType& x = c.type(c.input(0));
  const Ints& axes = c.node.attrs.ints("axes");
  bool kept = c.node.attrs.b("keepdims");
  Value y = keepdims(c, c.output(), x.shape, axes, kept);
  Value g = keepdims(c, out_grad(c), x.shape, axes, kept);
  Value hit = c.emit(OpKind::Where, {c.emit(OpKind::Eq, {c.input(0), y}), scalar(c, 1, g), scalar(c, 0, g)});
  Value ties = sum_keep(c, hit, axes);
  c.in_grads = {mul(c, hit, div(c, g, ties))};
}

void prod(GradCtx& c) {
  const Value x = c.input(0);
  const TensorType& xt = c.type(x);
  const Ints& axes = c.node.attrs.ints("axes");
  const Value zero = scalar(c, 0, x), one = scalar(c, 1, x);
  const Value is_zero = c.emit(OpKind::Eq, {x, zero});
  Attrs keep;
  keep.set("axes", axes);
  keep.set("keepdims", true);
  // The product of the nonzero elements and the number of zeros, per group (kept dims).
  const Value nonzero = c.emit(OpKind::Prod, {c.emit(OpKind::Where, {is_zero, one, x})}, keep);
  const Value zeros = sum_keep(c, c.emit(OpKind::Where, {is_zero, one, zero}), axes);
  const Value none = c.emit(OpKind::Eq, {zeros, zero});
  const Value just_one = c.emit(OpKind::Eq, {zeros, one});
  // At a nonzero x_i: nonzero / x_i when the group has no zero, else 0; at a zero: nonzero
  // when it is the group's only zero, else 0. (The quotient by a zero x_i is computed but
  // never selected.)
  const Value at_nonzero = c.emit(OpKind::Where, {none, div(c, nonzero, x), zero});
  const Value at_zero = c.emit(OpKind::Where, {just_one, nonzero, zero});
  const Value others = c.emit(OpKind::Where, {is_zero, at_zero, at_nonzero});
  const Value g = keepdims(c, out_grad(c), xt.shape, axes, c.node.attrs.b("keepdims"));
  c.in_grads = {mul(c, others, g)};
}

}  // namespace modelc::grads
