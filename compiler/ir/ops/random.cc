// Random tensors: rand_like (uniform in [0, 1)) and randn_like (standard normal), as
// torch.rand_like / torch.randn_like. Both draw from the Philox stream that dropout draws
// from (runtime/base/philox.h): element i of a call is a pure function of the run's seed,
// the step, the call's place in the model (its `key`, set by sema as dropout's is) and i,
// so a recomputed forward pass redraws the same numbers and every backend draws the same
// ones. They draw in train and eval mode alike (as torch's do; `if training` chooses
// otherwise). Their values do not depend on x's, only on its shape, so their gradient with
// respect to x is 0 (the reparameterisation trick differentiates through what they are
// multiplied with).
//
// rand_like is one elementwise primitive (code generation draws it: codelets_elementwise.cc);
// randn_like is Box-Muller over two of its draws (keys k and k ^ 1):
// sqrt(-2 log(1 - u1)) cos(2 pi u2), where 1 - u1 lies in (0, 1], so no draw is infinite.
#include <fmt/format.h>

#include <cmath>
#include <numbers>

#include "compiler/ir/grads/grad_util.h"
#include "compiler/ir/op_examples.h"
#include "compiler/ir/op_registry.h"
#include "runtime/base/philox.h"

namespace modelc {
namespace {

void infer_random(InferCtx& c, std::string_view name) {
  const TensorType& x = c.input(0);
  if (!is_float(x.dtype)) return c.fail(fmt::format("{} needs a float tensor (for its shape and dtype), got {}", name, x.str()), 0);
  c.out = {x};
}

uint64_t key_of(const Attrs& a) { return static_cast<uint64_t>(a.has("key") ? a.i("key") : 0); }

// The uniform draws of element i, in [0, 1), rounded to f32 as every backend draws them.
double uniform(const RefCtx& c, uint64_t key, int64_t i) {
  return dropout_uniform_with(dropout_key(c.options.seed, key), c.options.step, static_cast<uint64_t>(i));
}

void ref_rand(RefCtx& c) {
  const uint64_t key = key_of(c.attrs());
  for (int64_t i = 0; i < c.out[0].numel(); ++i) c.out[0][i] = uniform(c, key, i);
}

void ref_randn(RefCtx& c) {
  const uint64_t key = key_of(c.attrs());
  for (int64_t i = 0; i < c.out[0].numel(); ++i) {
    const double u1 = uniform(c, key, i), u2 = uniform(c, key ^ 1, i);
    c.out[0][i] = std::sqrt(-2 * std::log(1 - u1)) * std::cos(2 * std::numbers::pi * u2);
  }
}

Value expand_randn(ExpandCtx& x) {
  const int64_t key = x.attrs.has("key") ? x.attrs.i("key") : 0;
  const Value u1 = x.op(OpKind::RandLike, {x.input(0)}, {{"key", key}});
  const Value u2 = x.op(OpKind::RandLike, {x.input(0)}, {{"key", key ^ 1}});
  const DType t = x.type(x.input(0)).dtype;
  const Value r = x.op(OpKind::Sqrt, {x.op(OpKind::Mul, {x.number(-2, t), x.op(OpKind::Log, {x.op(OpKind::Sub, {x.number(1, t), u1})})})});
  const Value angle = x.op(OpKind::Mul, {x.number(2 * std::numbers::pi, t), u2});
  return x.op(OpKind::Mul, {r, x.op(OpKind::Cos, {angle})});
}

// x only gives the shape: no gradient reaches it (0, which the conformance test checks
// against central differences).
void grad_zero(GradCtx& c) {
  const TensorType& t = c.type(c.input(0));
  c.in_grads = {c.constant(0, t.dtype, t.shape)};
}

std::vector<OpExample> random_examples(ExampleRng& rng) {
  return examples::calls(4, [&](int rep, OpExample& e) {
    const std::vector<int64_t> s = examples::shape(rng, rep == 0 ? 0 : 1, 3, 1, 9);
    e.inputs = {examples::values(rng, DType::F32, s, Domain{-2, 2})};
    e.attrs.set("key", examples::pick(rng, 0, 1 << 30));
    e.label = fmt::format("{}, key {}", RefTensor(DType::F32, s).shape_str(), e.attrs.i("key"));
  });
}

}  // namespace

void register_random_ops(OpRegistry& r) {
  r.def(OpKind::RandLike).signature("x: tensor").fusion(FusionKind::Elementwise).keyed()
      .infer([](InferCtx& c) { infer_random(c, "rand_like"); }).reference(ref_rand).grad(grad_zero)
      .examples(random_examples)
      .summary("uniform random numbers in [0, 1) of x's shape and dtype (as torch.rand_like; x's values are not "
               "read and get no gradient), drawn from the counter-based Philox stream keyed by the seed, the step "
               "and the call's place, so a recomputation redraws the same numbers");
  r.def(OpKind::RandnLike).signature("x: tensor").keyed()
      .infer([](InferCtx& c) { infer_random(c, "randn_like"); }).reference(ref_randn).composite(expand_randn)
      .examples(random_examples)
      .summary("standard normal random numbers of x's shape and dtype (as torch.randn_like; x gets no gradient): "
               "Box-Muller over two rand_like draws, sqrt(-2 log(1 - u1)) cos(2 pi u2), so none is infinite");
}

}  // namespace modelc
