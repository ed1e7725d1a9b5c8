// Gradient rules of the neural-network ops, built from primitives: softmax, log_softmax,
// layer_norm (recomputing its statistics), embedding (embedding, a scatter-add),
// cross_entropy ((softmax(logits) - one_hot(targets)) * g / positions counted, 0 where
// ignored), dropout (dropout of the gradient with the same attributes: the same key draws
// the same mask) and causal_mask (zero where the forward masked).
#include "compiler/ir/grads/grad_util.h"

namespace modelc::grads {

namespace {

Value cast_to(GradCtx& c, Value x, DType t) {
  if (c.type(x).dtype == t) return x;
  Attrs a;
  a.set("dtype", t);
  return c.emit(OpKind::Cast, {x}, std::move(a));
}

}  // namespace

void softmax(GradCtx& c) {  // y (g - sum(g y))
  Value g = out_grad(c), y = c.output();
  Ints axis{c.node.attrs.i("axis")};
  c.in_grads = {mul(c, y, sub(c, g, sum_keep(c, mul(c, g, y), axis)))};
}

void log_softmax(GradCtx& c) {  // g - exp(y) sum(g)
  Value g = out_grad(c), y = c.output();
  Ints axis{c.node.attrs.i("axis")};
  c.in_grads = {sub(c, g, mul(c, c.emit(OpKind::Exp, {y}), sum_keep(c, g, axis)))};
}

void layer_norm(GradCtx& c) {
  Value x = c.input(0), g = out_grad(c);
  Ints last{c.type(x).rank() - 1};
  Value mu = mean_keep(c, x, last);
  Value xc = sub(c, x, mu);
  Value var = mean_keep(c, mul(c, xc, xc), last);
  Value rstd = c.emit(OpKind::Rsqrt, {add(c, var, scalar(c, c.node.attrs.f("eps"), x))});
  Value xhat = mul(c, xc, rstd);
  bool has_w = c.node.inputs.size() > 1 && c.node.inputs[1].valid();
  bool has_b = c.node.inputs.size() > 2 && c.node.inputs[2].valid();
  Value gy = has_w ? mul(c, g, c.input(1)) : g;
  // dx = rstd (gy - mean(gy) - xhat mean(gy xhat))
  Value gx = mul(c, rstd, sub(c, sub(c, gy, mean_keep(c, gy, last)), mul(c, xhat, mean_keep(c, mul(c, gy, xhat), last))));
  c.in_grads = {gx, has_w && c.needs(1) ? reduce_to(c, mul(c, g, xhat), c.type(c.input(1)).shape) : Value{},
                has_b && c.needs(2) ? reduce_to(c, g, c.type(c.input(2)).shape) : Value{}};
}

void embedding(GradCtx& c) {
  const TensorType& table = c.type(c.input(1));
  Attrs a;
  a.set("rows", known(c, table.shape[0], "table row count"));
  Value gt = c.emit(OpKind::EmbeddingGrad, {c.input(0), out_grad(c)}, std::move(a));
  c.in_grads = {Value{}, cast_to(c, gt, table.dtype)};
}

// Positions whose target is ignore_index neither count in the mean nor get a gradient: 0
// there (a where, not a product, so that a batch of ignored targets gives zeros, as
// PyTorch does, rather than 0 * inf).
void cross_entropy(GradCtx& c) {
  Value logits = c.input(0), targets = c.input(1);
  const TensorType& lt = c.type(logits);
  const Shape& positions = c.type(targets).shape;
  Attrs a;
  a.set("classes", known(c, lt.shape.back(), "class count"));
  Value oh = cast_to(c, c.emit(OpKind::OneHot, {targets}, std::move(a)), lt.dtype);
  Value p = c.emit(OpKind::Softmax, {logits});
  Value kept = c.emit(OpKind::Ne, {targets, c.constant(static_cast<double>(c.node.attrs.i("ignore_index")), DType::I32, {})});
  Value n = c.emit(OpKind::Sum, {cast_to(c, kept, lt.dtype)});
  Value scale = div(c, cast_to(c, out_grad(c), lt.dtype), n);
  Value d = mul(c, sub(c, p, oh), scale);
  Value row_kept = keepdims(c, kept, lt.shape, {static_cast<int64_t>(positions.size())}, false);
  c.in_grads = {c.emit(OpKind::Where, {row_kept, d, scalar(c, 0, d)}), Value{}};
}

void causal_mask(GradCtx& c) {
  const TensorType& x = c.type(c.input(0));
  Value g = out_grad(c);
  Value zero = c.constant(0.0, x.dtype, x.shape);
  Value kept = c.emit(OpKind::Eq, {c.emit(OpKind::CausalMask, {zero}), scalar(c, 0, g)});
  c.in_grads = {c.emit(OpKind::Where, {kept, g, scalar(c, 0, g)})};
}

void dropout(GradCtx& c) { c.in_grads = {c.emit(OpKind::Dropout, {out_grad(c)}, c.node.attrs)}; }

}  // namespace modelc::grads
