// Gradient rules of the reductions: sum, mean and max.
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

}  // namespace modelc::grads
