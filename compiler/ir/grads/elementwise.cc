// Gradient rules of the elementwise ops: unary math, cast, broadcasting binary arithmetic
// and where. A broadcast input's gradient is summed back to its shape (reduce_to).
//
// Choices at non-smooth points, as PyTorch makes them: relu'(0) = 0, abs'(0) = 0; maximum
// and minimum split the gradient evenly between a and b where they tie; pow's gradient
// with respect to the exponent is 0 where the base is 0.
#include <cmath>
#include <numbers>

#include "compiler/ir/grads/grad_util.h"

namespace modelc::grads {

namespace {

Value where(GradCtx& c, Value cond, Value a, Value b) { return c.emit(OpKind::Where, {cond, a, b}); }
Value cmp(GradCtx& c, OpKind op, Value a, Value b) { return c.emit(op, {a, b}); }

// A unary rule: in_grad(0) = g * f(x, y), where f builds the derivative.
template <class F>
GradFn unary(F derivative) {
  return [derivative](GradCtx& c) {
    Value g = out_grad(c);
    c.in_grads = {derivative(c, g, c.input(0), c.output())};
  };
}

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

// maximum (pick = gt) or minimum (pick = lt): a gets all where it wins, half on a tie.
void minmax(GradCtx& c, OpKind pick) {
  Value g = out_grad(c), a = c.input(0), b = c.input(1);
  Value share = where(c, cmp(c, pick, a, b), scalar(c, 1, a),
                      where(c, cmp(c, OpKind::Eq, a, b), scalar(c, 0.5, a), scalar(c, 0, a)));
  Value ga = mul(c, g, share);
  c.in_grads = {c.needs(0) ? to_input(c, ga, 0) : Value{}, c.needs(1) ? to_input(c, sub(c, g, ga), 1) : Value{}};
}

}  // namespace

void register_elementwise_grads(OpRegistry& r) {
  r.def(OpKind::Neg).grad(unary([](GradCtx& c, Value g, Value, Value) { return neg(c, g); }));
  r.def(OpKind::Abs).grad(unary([](GradCtx& c, Value g, Value x, Value) {
    Value zero = scalar(c, 0, x);
    return where(c, cmp(c, OpKind::Gt, x, zero), g, where(c, cmp(c, OpKind::Lt, x, zero), neg(c, g), zero));
  }));
  r.def(OpKind::Exp).grad(unary([](GradCtx& c, Value g, Value, Value y) { return mul(c, g, y); }));
  r.def(OpKind::Log).grad(unary([](GradCtx& c, Value g, Value x, Value) { return div(c, g, x); }));
  r.def(OpKind::Sqrt).grad(unary([](GradCtx& c, Value g, Value, Value y) {
    return div(c, g, mul(c, y, scalar(c, 2, y)));
  }));
  r.def(OpKind::Rsqrt).grad(unary([](GradCtx& c, Value g, Value x, Value y) {
    return mul(c, g, div(c, mul(c, y, scalar(c, -0.5, y)), x));  // -y / (2x)
  }));
  r.def(OpKind::Tanh).grad(unary([](GradCtx& c, Value g, Value, Value y) {
    return mul(c, g, sub(c, scalar(c, 1, y), mul(c, y, y)));
  }));
  r.def(OpKind::Sigmoid).grad(unary([](GradCtx& c, Value g, Value, Value y) {
    return mul(c, g, mul(c, y, sub(c, scalar(c, 1, y), y)));
  }));
  r.def(OpKind::Relu).grad(unary([](GradCtx& c, Value g, Value x, Value) {
    Value zero = scalar(c, 0, x);
    return where(c, cmp(c, OpKind::Gt, x, zero), g, zero);
  }));
  r.def(OpKind::Silu).grad(unary([](GradCtx& c, Value g, Value x, Value) {
    Value s = c.emit(OpKind::Sigmoid, {x});  // s (1 + x (1 - s))
    Value one = scalar(c, 1, x);
    return mul(c, g, mul(c, s, add(c, one, mul(c, x, sub(c, one, s)))));
  }));
  r.def(OpKind::Erf).grad(unary([](GradCtx& c, Value g, Value x, Value) {
    Value e = c.emit(OpKind::Exp, {neg(c, mul(c, x, x))});
    return mul(c, g, mul(c, e, scalar(c, 2 / std::sqrt(std::numbers::pi), x)));
  }));
  r.def(OpKind::Gelu).grad([](GradCtx& c) {
    Value g = out_grad(c);
    c.in_grads = {c.node.attrs.s("approximate") == "tanh" ? gelu_tanh(c, g, c.input(0)) : gelu_erf(c, g, c.input(0))};
  });
  // Back to the input's dtype; an integer input gets none (autodiff never asks for it).
  r.def(OpKind::Cast).grad([](GradCtx& c) {
    c.in_grads = {is_float(c.type(c.input(0)).dtype) ? to_input(c, out_grad(c), 0) : Value{}};
  });

  r.def(OpKind::Add).grad([](GradCtx& c) {
    Value g = out_grad(c);
    c.in_grads = {c.needs(0) ? to_input(c, g, 0) : Value{}, c.needs(1) ? to_input(c, g, 1) : Value{}};
  });
  r.def(OpKind::Sub).grad([](GradCtx& c) {
    Value g = out_grad(c);
    c.in_grads = {c.needs(0) ? to_input(c, g, 0) : Value{}, c.needs(1) ? to_input(c, neg(c, g), 1) : Value{}};
  });
  r.def(OpKind::Mul).grad([](GradCtx& c) {
    Value g = out_grad(c), a = c.input(0), b = c.input(1);
    c.in_grads = {c.needs(0) ? to_input(c, mul(c, g, b), 0) : Value{},
                  c.needs(1) ? to_input(c, mul(c, g, a), 1) : Value{}};
  });
  r.def(OpKind::Div).grad([](GradCtx& c) {
    Value g = out_grad(c), b = c.input(1), y = c.output();
    c.in_grads = {c.needs(0) ? to_input(c, div(c, g, b), 0) : Value{},
                  c.needs(1) ? to_input(c, neg(c, div(c, mul(c, g, y), b)), 1) : Value{}};
  });
  r.def(OpKind::Pow).grad([](GradCtx& c) {
    Value g = out_grad(c), a = c.input(0), b = c.input(1), y = c.output();
    Value ga, gb;
    if (c.needs(0)) {  // b a^(b-1)
      Value d = mul(c, b, c.emit(OpKind::Pow, {a, sub(c, b, scalar(c, 1, b))}));
      ga = to_input(c, mul(c, g, d), 0);
    }
    if (c.needs(1)) {  // a^b log a, 0 where a = 0
      Value zero = scalar(c, 0, a);
      Value d = where(c, cmp(c, OpKind::Eq, a, zero), zero, mul(c, y, c.emit(OpKind::Log, {a})));
      gb = to_input(c, mul(c, g, d), 1);
    }
    c.in_grads = {ga, gb};
  });
  r.def(OpKind::Maximum).grad([](GradCtx& c) { minmax(c, OpKind::Gt); });
  r.def(OpKind::Minimum).grad([](GradCtx& c) { minmax(c, OpKind::Lt); });
  r.def(OpKind::Where).grad([](GradCtx& c) {
    Value g = out_grad(c), cond = c.input(0);
    Value zero = scalar(c, 0, g);
    c.in_grads = {Value{}, c.needs(1) ? to_input(c, where(c, cond, g, zero), 1) : Value{},
                  c.needs(2) ? to_input(c, where(c, cond, zero, g), 2) : Value{}};
  });
}

}  // namespace modelc::grads
