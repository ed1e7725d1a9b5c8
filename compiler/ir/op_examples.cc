// Test domains: the helpers of the records' generators and the elementwise default.
#include "compiler/ir/op_examples.h"

#include <fmt/format.h>

#include <cmath>

namespace modelc::examples {

int64_t pick(ExampleRng& rng, int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); }

std::vector<int64_t> shape(ExampleRng& rng, int rank_lo, int rank_hi, int64_t lo, int64_t hi) {
  std::vector<int64_t> s(static_cast<size_t>(pick(rng, rank_lo, rank_hi)));
  for (int64_t& d : s) d = pick(rng, lo, hi);
  return s;
}

std::vector<int64_t> broadcastable_to(ExampleRng& rng, const std::vector<int64_t>& out) {
  const auto rank = static_cast<size_t>(pick(rng, 0, static_cast<int64_t>(out.size())));
  std::vector<int64_t> s(out.end() - static_cast<std::ptrdiff_t>(rank), out.end());
  for (int64_t& d : s)
    if (pick(rng, 0, 2) == 0) d = 1;
  return s;
}

RefTensor values(ExampleRng& rng, DType t, std::vector<int64_t> shape, Domain d) {
  RefTensor x(t, std::move(shape));
  if (t == DType::Bool) {
    for (double& v : x.data) v = static_cast<double>(pick(rng, 0, 1));
    return x;
  }
  if (t == DType::I32) {
    const auto lo = static_cast<int64_t>(std::ceil(d.lo)), hi = static_cast<int64_t>(std::floor(d.hi));
    for (double& v : x.data) v = static_cast<double>(pick(rng, lo, std::max(lo, hi)));
    return x;
  }
  std::uniform_real_distribution<double> u(d.lo, d.hi);
  for (double& v : x.data) {
    v = d.step > 0 ? d.lo + d.step * static_cast<double>(pick(rng, 0, static_cast<int64_t>((d.hi - d.lo) / d.step)))
                   : u(rng);
    if (d.either_sign && pick(rng, 0, 1)) v = -v;
  }
  return x;
}

RefTensor ids(ExampleRng& rng, std::vector<int64_t> shape, int64_t n) {
  RefTensor x(DType::I32, std::move(shape));
  for (double& v : x.data) v = static_cast<double>(pick(rng, 0, n - 1));
  return x;
}

std::vector<int64_t> out_shape(OpKind op, const OpExample& e, size_t k) {
  Graph g;
  std::vector<Value> in;
  for (const auto& t : e.inputs) {
    if (!t) {
      in.push_back(Value{});
      continue;
    }
    Node n;
    n.op = OpKind::Input;
    n.outputs = {TensorType{t->dtype, Shape(t->shape.begin(), t->shape.end())}};
    in.push_back(Value{g.add(std::move(n)), 0});
  }
  InferFailure why;
  auto id = add_op(g, op, in, e.attrs, {}, &why);
  if (!id) throw InternalError(fmt::format("test domain of {}: {}: {}", op_name(op), e.label, why.message));
  std::vector<int64_t> s;
  for (const Dim& d : g.node(*id).outputs.at(k).shape) s.push_back(d.as_const().value());
  return s;
}

namespace {

// Whether the op's shape rule takes inputs of dtype t (for the forms the defaults try).
bool accepts(const OpInfo& op, DType t, size_t inputs) {
  Graph g;
  std::vector<Value> in;
  for (size_t i = 0; i < inputs; ++i) {
    Node n;
    n.op = OpKind::Input;
    n.outputs = {TensorType{t, {Dim(2)}}};
    in.push_back(Value{g.add(std::move(n)), 0});
  }
  return add_op(g, op.kind, in, {}).has_value();
}

// Shapes for `inputs` operands that broadcast together, the full shape from a random one.
std::vector<std::vector<int64_t>> broadcast_shapes(ExampleRng& rng, size_t inputs) {
  const std::vector<int64_t> out = shape(rng, 0, 3);
  std::vector<std::vector<int64_t>> s(inputs);
  for (auto& x : s) x = broadcastable_to(rng, out);
  s[static_cast<size_t>(pick(rng, 0, static_cast<int64_t>(inputs) - 1))] = out;
  return s;
}

}  // namespace

std::vector<OpExample> default_examples(const OpInfo& op, ExampleRng& rng) {
  size_t inputs = 0;
  for (const ParamSpec& p : op.params) inputs += p.kind == ParamKind::Tensor;
  auto domain = [&](size_t i) { return op.domains.empty() ? Domain{} : op.domains[std::min(i, op.domains.size() - 1)]; };
  std::vector<OpExample> out;
  auto add = [&](DType t, std::string label, Attrs attrs) {
    OpExample e;
    e.label = std::move(label);
    for (const auto& s : broadcast_shapes(rng, inputs)) e.inputs.push_back(values(rng, t, s, domain(e.inputs.size())));
    e.attrs = std::move(attrs);
    e.grad = is_float(t);
    out.push_back(std::move(e));
  };
  for (int rep = 0; rep < 3; ++rep) add(DType::F32, "f32", {});
  Attrs random;
  std::string label = "f32";
  std::uniform_real_distribution<double> u(0.05, 0.5);
  for (const ParamSpec& p : op.params)
    if (p.kind == ParamKind::Float) {
      random.set(p.name, u(rng));
      label += fmt::format(", {} {}", p.name, random.f(p.name));
    }
  if (!random.empty()) add(DType::F32, label, random);
  for (DType t : {DType::I32, DType::Bool})
    if (accepts(op, t, inputs)) add(t, std::string(dtype_name(t)), {});
  return out;
}

std::vector<OpExample> of(const OpInfo& op, ExampleRng& rng) {
  if (op.examples) return op.examples(rng);
  if (!op.domains.empty()) return default_examples(op, rng);
  return {};
}

std::vector<OpExample> calls(int n, const std::function<void(int rep, OpExample& call)>& fill) {
  std::vector<OpExample> out(static_cast<size_t>(n));
  for (int rep = 0; rep < n; ++rep) fill(rep, out[static_cast<size_t>(rep)]);
  return out;
}

}  // namespace modelc::examples
