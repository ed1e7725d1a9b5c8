// The scalar definitions of the elementwise ops, in code generation's primitive language
// (compiler/codegen/scalar.h): variables x (unary), a b (binary), c a b (where).
//
// Each definition mirrors the op's double-precision reference in elementwise.cc (same
// branches, same NaN behaviour), so that generated f32 code differs from the oracle only by
// rounding. Ops added to ops.def by name (erf) are looked up by name, so this file builds
// whether or not they exist yet.
#include <string>
#include <utility>

#include "compiler/ir/op_registry.h"

namespace modelc {
namespace {

// 1 / (1 + e^-x) in the two-branch form of the reference: exp never overflows into the
// selected branch.
constexpr const char* kSigmoid = "select(x >= 0, 1 / (1 + exp(-x)), exp(x) / (1 + exp(x)))";

void fixed(OpRegistry& r, OpKind k, std::string def) {
  r.def(k).scalar([def = std::move(def)](const Attrs&) { return def; });
}

}  // namespace

void register_scalar_defs(OpRegistry& r) {
  fixed(r, OpKind::Neg, "-x");
  fixed(r, OpKind::Abs, "abs(x)");
  fixed(r, OpKind::Exp, "exp(x)");
  fixed(r, OpKind::Log, "log(x)");
  fixed(r, OpKind::Sqrt, "sqrt(x)");
  fixed(r, OpKind::Rsqrt, "1 / sqrt(x)");
  fixed(r, OpKind::Tanh, "tanh(x)");
  fixed(r, OpKind::Sigmoid, kSigmoid);
  // max(x, 0) propagates NaN, as the reference's relu does.
  fixed(r, OpKind::Relu, "max(x, 0)");
  fixed(r, OpKind::Silu, std::string("x * ") + kSigmoid);
  r.def(OpKind::Gelu).scalar([](const Attrs& a) -> std::string {
    if (a.has("approximate") && a.s("approximate") == "tanh")
      return "0.5 * x * (1 + tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)))";  // sqrt(2/pi)
    return "0.5 * x * (1 + erf(x * 0.7071067811865476))";  // sqrt(2)/2
  });
  if (const OpInfo* erf = r.find("erf")) fixed(r, erf->kind, "erf(x)");

  fixed(r, OpKind::Add, "a + b");
  fixed(r, OpKind::Sub, "a - b");
  fixed(r, OpKind::Mul, "a * b");
  fixed(r, OpKind::Div, "a / b");
  fixed(r, OpKind::Pow, "pow(a, b)");
  fixed(r, OpKind::Maximum, "max(a, b)");
  fixed(r, OpKind::Minimum, "min(a, b)");
  fixed(r, OpKind::Lt, "a < b");
  fixed(r, OpKind::Le, "a <= b");
  fixed(r, OpKind::Gt, "a > b");
  fixed(r, OpKind::Ge, "a >= b");
  fixed(r, OpKind::Eq, "a == b");
  fixed(r, OpKind::Ne, "a != b");
  fixed(r, OpKind::Where, "select(c, a, b)");
}

}  // namespace modelc
