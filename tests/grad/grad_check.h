// Finite-difference gradient checks through the reference interpreter, for the autodiff
// tests. Everything runs in double precision: the interpreter never rounds (only cast
// does), so central differences with eps = 1e-6 agree with the analytic gradient to
// about 1e-9 relative; the checks use kGradTol = 1e-6 (|analytic - numeric| <=
// tol * (1 + |numeric|)). Random values come from op_harness.h's seeded generator.
#pragma once

#include <algorithm>
#include <numeric>

#include "compiler/ir/verifier.h"
#include "compiler/passes/autodiff.h"
#include "tests/ir/op_harness.h"

namespace modelc::test {

inline constexpr double kGradEps = 1e-6;
inline constexpr double kGradTol = 1e-6;

// Central difference of loss(feeds) in feeds[name][i]; f0 is the loss at the unperturbed
// point. Where a kink (a relu or a pool switching) lies within eps of the point, the one-
// sided differences disagree (|f(x+e) - 2 f(x) + f(x-e)| is of order e, not e^2): the step
// is then shrunk tenfold, at most twice, so that random points near a kink do not fail
// while a wrong gradient still does (it disagrees at every step).
template <class Loss>
double numeric_grad(std::map<std::string, RefTensor>& feeds, const std::string& name, int64_t i, double eps,
                    double f0, Loss loss) {
  double& x = feeds.at(name)[i];
  double x0 = x, d = 0;
  for (int tries = 0; tries < 3; ++tries, eps /= 10) {
    x = x0 + eps;
    double up = loss(feeds);
    x = x0 - eps;
    double down = loss(feeds);
    d = (up - down) / (2 * eps);
    if (std::fabs(up - 2 * f0 + down) <= 1e-4 * eps) break;
  }
  x = x0;
  return d;
}

// Compares the analytic gradient of every float input of `g` named in `names` (fed from
// `feeds`) with central differences at up to `max_elems` random elements of each.
// `loss_name` is the graph output holding the scalar loss; the gradients are appended to
// a copy, which must verify.
inline void check_graph_grads(const Graph& g, const std::string& loss_name, std::map<std::string, RefTensor> feeds,
                              const std::vector<std::string>& names, const InterpOptions& opts = {},
                              double eps = kGradEps, double tol = kGradTol, int64_t max_elems = 1 << 30) {
  Graph gg = g;
  Value loss{};
  for (const Graph::Output& o : gg.outputs)
    if (o.name == loss_name) loss = o.value;
  ASSERT_TRUE(loss.valid()) << "no output " << loss_name;
  std::vector<Value> wrt;
  for (const std::string& n : names) {
    NodeId id = kNoNode;
    for (NodeId k : gg.inputs) if (gg.node(k).name == n) id = k;
    for (NodeId k : gg.params) if (gg.node(k).name == n) id = k;
    ASSERT_NE(id, kNoNode) << n;
    wrt.push_back(Value{id, 0});
  }
  std::vector<Value> grads = append_gradients(gg, loss, wrt);
  ASSERT_EQ(grads.size(), wrt.size());
  for (size_t k = 0; k < grads.size(); ++k) {
    ASSERT_EQ(gg.type(grads[k]), gg.type(wrt[k])) << names[k];
    gg.outputs.push_back({"grad:" + names[k], grads[k], {}});
  }
  std::vector<std::string> problems = verify_graph(gg);
  for (const std::string& p : problems) ADD_FAILURE() << p;
  InterpResult res = interpret(gg, feeds, opts);
  auto loss_of = [&](const std::map<std::string, RefTensor>& f) { return interpret(g, f, opts).outputs.at(loss_name)[0]; };
  double f0 = loss_of(feeds);
  for (const std::string& n : names) {
    const RefTensor& an = res.outputs.at("grad:" + n);
    std::vector<int64_t> idx(static_cast<size_t>(an.numel()));
    std::iota(idx.begin(), idx.end(), 0);
    std::shuffle(idx.begin(), idx.end(), rng());
    if (static_cast<int64_t>(idx.size()) > max_elems) idx.resize(static_cast<size_t>(max_elems));
    for (int64_t i : idx) {
      double num = numeric_grad(feeds, n, i, eps, f0, loss_of);
      EXPECT_NEAR(an[i], num, tol * (1 + std::fabs(num))) << "d loss / d " << n << "[" << i << "]";
    }
  }
}

// A graph of one op on inputs "in0", "in1", ... (nullopt: an absent optional input) and
// loss = sum over outputs k of sum(out_k * r_k), with r_k random; checks the gradient of
// every float input by central differences.
inline void check_op_grad(OpKind op, const std::vector<std::optional<RefTensor>>& inputs, Attrs attrs = {},
                          const InterpOptions& opts = {}, double eps = kGradEps, double tol = kGradTol) {
  std::vector<std::optional<TensorType>> types;
  for (const auto& t : inputs) types.push_back(t ? std::optional<TensorType>(type_of(*t)) : std::nullopt);
  OneOp o = build_op(op, types, std::move(attrs));
  ASSERT_FALSE(o.error) << o.error->message;
  Graph& g = o.g;
  g.outputs.clear();
  std::map<std::string, RefTensor> feeds;
  std::vector<std::string> names;
  size_t k = 0;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i]) continue;
    std::string n = g.node(g.inputs[k++]).name;
    feeds[n] = *inputs[i];
    if (is_float(inputs[i]->dtype)) names.push_back(n);
  }
  Value total{};
  for (uint32_t out = 0; out < g.node(o.node).outputs.size(); ++out) {
    TensorType t = g.node(o.node).outputs[out];
    Node r;
    r.op = OpKind::Input;
    r.name = "r" + std::to_string(out);
    r.outputs = {t};
    NodeId rid = g.add(std::move(r));
    g.inputs.push_back(rid);
    feeds[g.node(rid).name] = random_tensor(t.dtype, concrete_shape(t.shape, {}), -1, 1);
    auto prod = add_op(g, OpKind::Mul, {Value{o.node, out}, Value{rid, 0}}, {});
    auto s = add_op(g, OpKind::Sum, {Value{*prod, 0}}, {});
    total = total.valid() ? Value{*add_op(g, OpKind::Add, {total, Value{*s, 0}}, {}), 0} : Value{*s, 0};
  }
  g.outputs.push_back({"loss", total, {}});
  check_graph_grads(g, "loss", feeds, names, opts, eps, tol);
}

// Random f32 values in [lo, hi) (double precision: the interpreter does not round inputs).
inline RefTensor rand_f(std::vector<int64_t> shape, double lo = -1, double hi = 1) {
  RefTensor x(DType::F32, std::move(shape));
  std::uniform_real_distribution<double> u(lo, hi);
  for (double& v : x.data) v = u(rng());
  return x;
}

// Random i32 ids in [0, n).
inline RefTensor rand_ids(std::vector<int64_t> shape, int64_t n) {
  RefTensor x(DType::I32, std::move(shape));
  for (double& v : x.data) v = static_cast<double>(rnd(0, n - 1));
  return x;
}

}  // namespace modelc::test
