// Gradient rules of convolution and pooling: conv2d -> conv2d_grad_input and
// conv2d_grad_weight (and a sum for the bias), the pools -> max_pool2d_grad and
// avg_pool2d_grad. The window attributes pass through in their canonical forms.
#include "compiler/ir/grads/grad_util.h"

namespace modelc::grads {

namespace {

Attrs pick(const Attrs& from, std::initializer_list<const char*> names) {
  Attrs a;
  for (const char* n : names) a.set(n, *from.find(n));
  return a;
}

}  // namespace

void conv2d(GradCtx& c) {
  Value g = out_grad(c), x = c.input(0), w = c.input(1);
  const Attrs& at = c.node.attrs;
  Value gx, gw, gb;
  if (c.needs(0)) {
    Attrs a = pick(at, {"stride", "padding", "dilation", "groups"});
    a.set("input_shape", c.type(x).shape);
    gx = c.emit(OpKind::Conv2dGradInput, {g, w}, std::move(a));
  }
  if (c.needs(1)) {
    Attrs a = pick(at, {"stride", "padding", "dilation", "groups"});
    a.set("weight_shape", c.type(w).shape);
    gw = c.emit(OpKind::Conv2dGradWeight, {x, g}, std::move(a));
  }
  if (c.node.inputs.size() > 2 && c.node.inputs[2].valid() && c.needs(2)) {
    Attrs a;
    a.set("axes", Ints{0, 2, 3});
    gb = c.emit(OpKind::Sum, {g}, std::move(a));
  }
  c.in_grads = {gx, gw, gb};
}

// conv2d_grad_input(dy, w) is the transpose of conv2d's map x -> conv2d(x, w) applied to
// dy (and so conv_transpose2d): its gradient with respect to dy is that map applied to the
// incoming gradient, conv2d(g, w), and with respect to w, conv2d_grad_weight with g as the
// input and dy as the gradient (both are bilinear: <g, A_w^T dy> = <A_w g, dy>).
void conv2d_grad_input(GradCtx& c) {
  Value g = out_grad(c), dy = c.input(0), w = c.input(1);
  const Attrs& at = c.node.attrs;
  Value gdy, gw;
  if (c.needs(0)) gdy = c.emit(OpKind::Conv2d, {g, w, Value{}}, pick(at, {"stride", "padding", "dilation", "groups"}));
  if (c.needs(1)) {
    Attrs a = pick(at, {"stride", "padding", "dilation", "groups"});
    a.set("weight_shape", c.type(w).shape);
    gw = c.emit(OpKind::Conv2dGradWeight, {g, dy}, std::move(a));
  }
  c.in_grads = {gdy, gw};
}

void max_pool2d(GradCtx& c) {
  c.in_grads = {c.emit(OpKind::MaxPool2dGrad, {c.input(0), out_grad(c)}, pick(c.node.attrs, {"kernel", "stride", "padding"}))};
}

void avg_pool2d(GradCtx& c) {
  Attrs a = pick(c.node.attrs, {"kernel", "stride", "padding"});
  a.set("input_shape", c.type(c.input(0)).shape);
  c.in_grads = {c.emit(OpKind::AvgPool2dGrad, {out_grad(c)}, std::move(a))};
}

}  // namespace modelc::grads
