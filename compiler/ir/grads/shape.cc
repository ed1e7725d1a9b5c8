// Gradient rules of the shape and data-movement ops: matmul (batch broadcasting and 1-D
// operands included), transpose, permute, reshape, broadcast_to, slice, concat, split.
#include <fmt/format.h>

#include "compiler/ir/grads/grad_util.h"

namespace modelc::grads {

namespace {

Value reshape(GradCtx& c, Value x, const Shape& s) {
  if (c.type(x).shape == s) return x;
  Attrs a;
  a.set("shape", s);
  return c.emit(OpKind::Reshape, {x}, std::move(a));
}

Value transpose_last(GradCtx& c, Value x) {
  Attrs a;
  a.set("dim0", int64_t{-2});
  a.set("dim1", int64_t{-1});
  return c.emit(OpKind::Transpose, {x}, std::move(a));
}

}  // namespace

void matmul(GradCtx& c) {
  Value a = c.input(0), b = c.input(1);
  Shape sa = c.type(a).shape, sb = c.type(b).shape;
  // Work on the promoted operands ([1,K] for a 1-D a, [K,1] for a 1-D b) and the gradient
  // with both matrix dims present; reshape back at the end.
  if (sa.size() == 1) sa.insert(sa.begin(), Dim(1));
  if (sb.size() == 1) sb.push_back(Dim(1));
  Value a2 = reshape(c, a, sa), b2 = reshape(c, b, sb);
  Shape sg = c.type(c.output()).shape;
  if (c.type(a).rank() == 1) sg.insert(sg.end() - (c.type(b).rank() == 1 ? 0 : 1), Dim(1));
  if (c.type(b).rank() == 1) sg.push_back(Dim(1));
  Value g = reshape(c, out_grad(c), sg);
  Value ga, gb;
  if (c.needs(0)) ga = reshape(c, reduce_to(c, c.emit(OpKind::Matmul, {g, transpose_last(c, b2)}), sa), c.type(a).shape);
  if (c.needs(1)) gb = reshape(c, reduce_to(c, c.emit(OpKind::Matmul, {transpose_last(c, a2), g}), sb), c.type(b).shape);
  c.in_grads = {ga, gb};
}

void slice(GradCtx& c) {
  const TensorType& x = c.type(c.input(0));
  int64_t axis = c.node.attrs.i("axis"), start = c.node.attrs.i("start"), end = c.node.attrs.i("end");
  const Dim& extent = x.shape[static_cast<size_t>(axis)];
  std::vector<Value> parts;
  Shape s = x.shape;
  if (start > 0) {
    s[static_cast<size_t>(axis)] = Dim(start);
    parts.push_back(c.constant(0.0, x.dtype, s));
  }
  parts.push_back(out_grad(c));
  Dim after = extent - Dim(end);
  if (after != Dim(0)) {
    s[static_cast<size_t>(axis)] = after;
    parts.push_back(c.constant(0.0, x.dtype, s));
  }
  if (parts.size() == 1) {
    c.in_grads = {parts[0]};
    return;
  }
  Attrs a;
  a.set("axis", axis);
  c.in_grads = {c.emit(OpKind::Concat, std::move(parts), std::move(a))};
}

void concat(GradCtx& c) {
  int64_t axis = c.node.attrs.i("axis");
  Value g = out_grad(c);
  c.in_grads.assign(c.node.inputs.size(), Value{});
  int64_t at = 0;
  for (size_t i = 0; i < c.node.inputs.size(); ++i) {
    int64_t len = known(c, c.type(c.node.inputs[i]).shape[static_cast<size_t>(axis)], "extent along the concat axis");
    if (c.needs(static_cast<int>(i))) {
      Attrs a;
      a.set("axis", axis);
      a.set("start", at);
      a.set("end", at + len);
      c.in_grads[i] = c.emit(OpKind::Slice, {g}, std::move(a));
    }
    at += len;
  }
}

void transpose(GradCtx& c) { c.in_grads = {c.emit(OpKind::Transpose, {out_grad(c)}, c.node.attrs)}; }

void permute(GradCtx& c) {
  const Ints& dims = c.node.attrs.ints("dims");
  Ints inv(dims.size());
  for (size_t k = 0; k < dims.size(); ++k) inv[static_cast<size_t>(dims[k])] = static_cast<int64_t>(k);
  Attrs a;
  a.set("dims", inv);
  c.in_grads = {c.emit(OpKind::Permute, {out_grad(c)}, std::move(a))};
}

void reshape(GradCtx& c) { c.in_grads = {reshape(c, out_grad(c), c.type(c.input(0)).shape)}; }

void broadcast_to(GradCtx& c) { c.in_grads = {reduce_to(c, out_grad(c), c.type(c.input(0)).shape)}; }

void split(GradCtx& c) {
  std::vector<Value> parts;
  for (int i = 0; i < static_cast<int>(c.node.outputs.size()); ++i) parts.push_back(out_grad(c, i));
  Attrs a;
  a.set("axis", c.node.attrs.i("axis"));
  c.in_grads = {c.emit(OpKind::Concat, std::move(parts), std::move(a))};
}

}  // namespace modelc::grads
