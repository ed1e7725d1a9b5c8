// Tiny models for the train-step tests, their gradients written by hand, and a double
// precision re-implementation of torch.optim's SGD / Adam / AdamW and of
// torch.nn.utils.clip_grad_norm_ to compare the train-step graph against.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "compiler/ir/interpreter.h"
#include "compiler/passes/train_step.h"
#include "tests/ir/op_harness.h"

namespace modelc::test {

inline NodeId add_source(Graph& g, OpKind op, const std::string& name, TensorType t) {
  Node n;
  n.op = op;
  n.name = name;
  n.outputs = {std::move(t)};
  NodeId id = g.add(std::move(n));
  (op == OpKind::Input ? g.inputs : op == OpKind::Param ? g.params : g.states).push_back(id);
  return id;
}

inline Value op(Graph& g, OpKind k, std::vector<Value> in, Attrs a = {}) {
  InferFailure f;
  auto id = add_op(g, k, std::move(in), std::move(a), {}, &f);
  if (!id) throw InternalError("test model: " + f.message);
  return Value{*id, 0};
}

// pred = x @ w + b (x: f32[B, I], w: f32[I, O]); loss = mean((pred - y)^2), or with
// `cross_entropy` loss = cross_entropy(pred, labels) (labels: i32[B]). A param `unused`
// the loss does not read, and an output `pred` besides `loss`.
struct TinyModel {
  Graph g;
  int64_t I = 0, O = 0;
  bool ce = false;
};

inline TinyModel tiny_model(int64_t I, int64_t O, bool cross_entropy = false) {
  TinyModel m;
  m.I = I;
  m.O = O;
  m.ce = cross_entropy;
  Graph& g = m.g;
  g.name = "tiny";
  g.dims = {{"B", std::nullopt, {}}};
  NodeId x = add_source(g, OpKind::Input, "x", f32({B, I}));
  NodeId y = cross_entropy ? add_source(g, OpKind::Input, "labels", TensorType{DType::I32, {B}})
                           : add_source(g, OpKind::Input, "y", f32({B, O}));
  NodeId w = add_source(g, OpKind::Param, "w", f32({I, O}));
  NodeId b = add_source(g, OpKind::Param, "b", f32({O}));
  add_source(g, OpKind::Param, "unused", f32({2}));
  Value pred = op(g, OpKind::Add, {op(g, OpKind::Matmul, {{x, 0}, {w, 0}}), {b, 0}});
  Value loss;
  if (cross_entropy) {
    loss = op(g, OpKind::CrossEntropy, {pred, {y, 0}});
  } else {
    Value r = op(g, OpKind::Sub, {pred, {y, 0}});
    loss = op(g, OpKind::Mean, {op(g, OpKind::Mul, {r, r})});
  }
  g.outputs.push_back({"pred", pred, {}});
  g.outputs.push_back({"loss", loss, {}});
  return m;
}

using Tensors = std::map<std::string, RefTensor>;

// A batch of `n` rows for the model.
inline Tensors random_batch(const TinyModel& m, int64_t n) {
  Tensors t;
  t["x"] = random_tensor(DType::F32, {n, m.I});
  if (m.ce) t["labels"] = random_tensor(DType::I32, {n}, 0, static_cast<double>(m.O));
  else t["y"] = random_tensor(DType::F32, {n, m.O});
  return t;
}

inline Tensors random_params(const TinyModel& m) {
  return {{"w", random_tensor(DType::F32, {m.I, m.O})},
          {"b", random_tensor(DType::F32, {m.O})},
          {"unused", random_tensor(DType::F32, {2})}};
}

// The loss and d loss / d param of the model, by hand.
inline double hand_gradients(const TinyModel& m, const Tensors& p, const Tensors& batch, Tensors& grads) {
  const RefTensor& x = batch.at("x");
  const RefTensor &w = p.at("w"), &b = p.at("b");
  int64_t n = x.shape[0], I = m.I, O = m.O;
  std::vector<double> pred(static_cast<size_t>(n * O)), dpred(pred.size());
  for (int64_t r = 0; r < n; ++r)
    for (int64_t o = 0; o < O; ++o) {
      double s = b[o];
      for (int64_t i = 0; i < I; ++i) s += x[r * I + i] * w[i * O + o];
      pred[static_cast<size_t>(r * O + o)] = s;
    }
  double loss = 0;
  for (int64_t r = 0; r < n; ++r) {
    double* row = &pred[static_cast<size_t>(r * O)];
    double* drow = &dpred[static_cast<size_t>(r * O)];
    if (m.ce) {  // softmax(pred) - one_hot(label), over the n rows
      int64_t label = static_cast<int64_t>(batch.at("labels")[r]);
      double mx = *std::max_element(row, row + O), z = 0;
      for (int64_t o = 0; o < O; ++o) z += std::exp(row[o] - mx);
      loss += -(row[label] - mx - std::log(z)) / static_cast<double>(n);
      for (int64_t o = 0; o < O; ++o)
        drow[o] = (std::exp(row[o] - mx) / z - (o == label ? 1.0 : 0.0)) / static_cast<double>(n);
    } else {  // mean of squares over n * O elements
      for (int64_t o = 0; o < O; ++o) {
        double d = row[o] - batch.at("y")[r * O + o];
        loss += d * d / static_cast<double>(n * O);
        drow[o] = 2 * d / static_cast<double>(n * O);
      }
    }
  }
  grads["w"] = RefTensor(DType::F32, {I, O});
  grads["b"] = RefTensor(DType::F32, {O});
  grads["unused"] = RefTensor(DType::F32, {2});
  for (int64_t r = 0; r < n; ++r)
    for (int64_t o = 0; o < O; ++o) {
      double d = dpred[static_cast<size_t>(r * O + o)];
      grads["b"][o] += d;
      for (int64_t i = 0; i < I; ++i) grads["w"][i * O + o] += x[r * I + i] * d;
    }
  return loss;
}

// The optimizer settings of one case, and the options the train step gets for them.
// Hyperparameters are exact in f32 (and so are 1 - beta), because the interpreter rounds
// a constant to its dtype: the comparison with the double reference can then be tight.
struct Hyper {
  std::string optimizer = "sgd";
  double lr = 0.125, momentum = 0, weight_decay = 0, beta1 = 0.875, beta2 = 0.984375, eps = 0x1p-12;
  bool nesterov = false;
  double clip = 0;
  int64_t accumulate = 1;

  TrainStepOptions options() const {
    TrainStepOptions o;
    o.optimizer = optimizer;
    o.optimizer_args.set("lr", lr);
    o.optimizer_args.set("weight_decay", weight_decay);
    if (optimizer == "sgd") {
      o.optimizer_args.set("momentum", momentum);
      o.optimizer_args.set("nesterov", nesterov);
    } else {
      o.optimizer_args.set("beta1", beta1);
      o.optimizer_args.set("beta2", beta2);
      o.optimizer_args.set("eps", eps);
    }
    o.clip_grad_norm = clip;
    o.accumulate = accumulate;
    return o;
  }
};

// One step of torch.optim on params `p` and state `s` (keys "<param>.<state>", absent =
// zero) with gradients `g`, step number t (1-based). Returns the gradient norm before
// clipping. Written from PyTorch's documented algorithms, not from the graph.
inline double reference_step(const Hyper& h, Tensors& p, Tensors& s, Tensors g, int64_t t) {
  double sq = 0;
  for (auto& [name, gr] : g)
    for (double v : gr.data) sq += v * v;
  double norm = std::sqrt(sq);
  if (h.clip > 0) {
    double coef = std::min(1.0, h.clip / (norm + 1e-6));
    for (auto& [name, gr] : g)
      for (double& v : gr.data) v *= coef;
  }
  for (auto& [name, param] : p) {
    RefTensor& gr = g.at(name);
    auto state = [&](const char* what) -> RefTensor& {
      auto [it, fresh] = s.try_emplace(name + "." + what, param.dtype, param.shape);
      return it->second;
    };
    if (h.optimizer == "sgd") {
      RefTensor* buf = h.momentum != 0 ? &state("momentum_buffer") : nullptr;
      for (int64_t i = 0; i < param.numel(); ++i) {
        double d = gr[i] + h.weight_decay * param[i];
        if (buf) {
          (*buf)[i] = t == 1 ? d : h.momentum * (*buf)[i] + d;  // torch: the first buffer is a clone
          d = h.nesterov ? d + h.momentum * (*buf)[i] : (*buf)[i];
        }
        param[i] -= h.lr * d;
      }
    } else {
      RefTensor &m = state("exp_avg"), &v = state("exp_avg_sq");
      double bc1 = 1 - std::pow(h.beta1, static_cast<double>(t)), bc2 = 1 - std::pow(h.beta2, static_cast<double>(t));
      for (int64_t i = 0; i < param.numel(); ++i) {
        double d = gr[i];
        if (h.optimizer == "adamw") param[i] *= 1 - h.lr * h.weight_decay;
        else d += h.weight_decay * param[i];
        m[i] = h.beta1 * m[i] + (1 - h.beta1) * d;
        v[i] = h.beta2 * v[i] + (1 - h.beta2) * d * d;
        double denom = std::sqrt(v[i]) / std::sqrt(bc2) + h.eps;
        param[i] -= (h.lr / bc1) * m[i] / denom;
      }
    }
  }
  return norm;
}

inline RefTensor scalar(double v) { return RefTensor(DType::F32, {}, v); }

// Runs the train step once through the interpreter: feeds `batch`, the params and states
// (zero when absent), $lr and $t; returns the interpreter's result.
inline InterpResult run_step(const Graph& step, const Tensors& batch, const Tensors& params, const Tensors& states,
                             double lr, int64_t t) {
  Tensors feeds = batch;
  for (const auto& [k, v] : params) feeds[k] = v;
  for (NodeId id : step.states) {
    const Node& n = step.node(id);
    auto it = states.find(n.name);
    feeds[n.name] = it != states.end() ? it->second
                                       : RefTensor(n.outputs[0].dtype, concrete_shape(n.outputs[0].shape, {}));
  }
  feeds["$lr"] = scalar(lr);
  feeds["$t"] = scalar(static_cast<double>(t));
  return interpret(step, feeds);
}

// Expects `f` to throw UserError with a message containing `part`.
inline void expect_user_error(const std::function<void()>& f, const std::string& part) {
  try {
    f();
    ADD_FAILURE() << "no error; expected one containing: " << part;
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what() << "\nexpected: " << part;
  }
}

}  // namespace modelc::test
