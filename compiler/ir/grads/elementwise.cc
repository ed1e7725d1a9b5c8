// Gradient rules of the elementwise ops that are not scalar expressions: gelu (whose form
// depends on an attribute) and cast. The others are expressions in their records
// (compiler/ir/ops/elementwise.def, where).
#include <cmath>
#include <numbers>

#include "compiler/ir/grads/grad_util.h"

namespace modelc::grads {

namespace {

Value gelu_erf(GradCtx& c, Value g, Value x) {
  // d/dx x*Phi(x) = Phi(x) + x*phi(x), Phi(x) = (1 + erf(x/sqrt2))/2, phi(x) = e^(-x^2/2)/sqrt(2pi)
  Value cdf = mul(c, add(c, scalar(c, 1, x), c.emit(OpKind::Erf, {mul(c, x, scalar(c, std::numbers::sqrt2 / 2, x))})),
                  scalar(c, 0.5, x));
  Value pdf = mul(c, c.emit(OpKind::Exp, {mul(c, mul(c, x, x), scalar(c, -0.5, x))}),
                  scalar(c, 1 / std::sqrt(2 * std::numbers::pi), x));
  return mul(c, g, add(c, cdf, mul(c, x, pdf)));
}

Value gelu_tanh(GradCtx& c, Value g, Value x) {
  // y = x/2 (1 + t), t = tanh(k (x + a x^3)): y' = (1 + t)/2 + x/2 (1 - t^2) k (1 + 3a x^2)
  const double k = std::sqrt(2.0 / std::numbers::pi), a = 0.044715;
  Value x2 = mul(c, x, x);
  Value inner = mul(c, add(c, x, mul(c, mul(c, x2, x), scalar(c, a, x))), scalar(c, k, x));
  Value t = c.emit(OpKind::Tanh, {inner});
  Value one = scalar(c, 1, x);
  Value dinner = mul(c, add(c, one, mul(c, x2, scalar(c, 3 * a, x))), scalar(c, k, x));
  Value d = add(c, mul(c, add(c, one, t), scalar(c, 0.5, x)),
                mul(c, mul(c, mul(c, x, scalar(c, 0.5, x)), sub(c, one, mul(c, t, t))), dinner));
  return mul(c, g, d);
}

}  // namespace

void gelu(GradCtx& c) {
  Value g = out_grad(c);
  c.in_grads = {c.node.attrs.s("approximate") == "tanh" ? gelu_tanh(c, g, c.input(0)) : gelu_erf(c, g, c.input(0))};
}

// Back to the input's dtype; an integer input gets none (autodiff never asks for it).
void cast(GradCtx& c) { c.in_grads = {is_float(c.type(c.input(0)).dtype) ? to_input(c, out_grad(c), 0) : Value{}}; }

}  // namespace modelc::grads
