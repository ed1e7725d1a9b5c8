// Builds one-op graphs and runs them through the reference interpreter, for the op tests.
#pragma once

#include <gtest/gtest.h>

#include <optional>
#include <random>
#include <string>
#include <vector>

#include "compiler/ir/interpreter.h"
#include "compiler/ir/op_registry.h"

namespace modelc::test {

inline TensorType tt(DType t, std::vector<Dim> shape) { return TensorType{t, std::move(shape)}; }
inline TensorType f32(std::vector<Dim> shape) { return tt(DType::F32, std::move(shape)); }

// A graph with one input per type ("in0", "in1", ...; nullopt: an absent optional input),
// one node of `op`, and its outputs named "out0", "out1", ...
struct OneOp {
  Graph g;
  std::optional<InferFailure> error;  // set when the shape rule refused
  NodeId node = kNoNode;
  const std::vector<TensorType>& outputs() const { return g.node(node).outputs; }
  const Attrs& attrs() const { return g.node(node).attrs; }
};

inline OneOp build_op(OpKind op, const std::vector<std::optional<TensorType>>& inputs, Attrs attrs = {}) {
  OneOp r;
  std::vector<Value> ins;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i]) { ins.push_back(Value{}); continue; }
    Node n;
    n.op = OpKind::Input;
    n.name = "in" + std::to_string(i);
    n.outputs = {*inputs[i]};
    NodeId id = r.g.add(std::move(n));
    r.g.inputs.push_back(id);
    ins.push_back(Value{id, 0});
  }
  InferFailure f;
  auto id = add_op(r.g, op, ins, std::move(attrs), {}, &f);
  if (!id) { r.error = f; return r; }
  r.node = *id;
  for (uint32_t k = 0; k < r.g.node(*id).outputs.size(); ++k)
    r.g.outputs.push_back({"out" + std::to_string(k), Value{*id, k}, {}});
  return r;
}

// Runs the built op on concrete inputs (same order as build_op's; absent ones skipped).
inline std::vector<RefTensor> run_op(const OneOp& o, const std::vector<RefTensor>& inputs,
                                     const InterpOptions& opts = {}) {
  std::map<std::string, RefTensor> feeds;
  size_t k = 0;
  for (NodeId id : o.g.inputs) feeds[o.g.node(id).name] = inputs.at(k++);
  InterpResult res = interpret(o.g, feeds, opts);
  std::vector<RefTensor> out;
  for (size_t i = 0; i < o.g.outputs.size(); ++i) out.push_back(res.outputs.at("out" + std::to_string(i)));
  return out;
}

inline std::mt19937& rng() {
  static std::mt19937 gen(std::random_device{}());
  return gen;
}

// Uniform values in [lo, hi); integer dtypes get integers in [lo, hi).
inline RefTensor random_tensor(DType t, std::vector<int64_t> shape, double lo = -1, double hi = 1) {
  RefTensor x(t, std::move(shape));
  std::uniform_real_distribution<double> u(lo, hi);
  for (double& v : x.data) {
    v = u(rng());
    if (t == DType::I32) v = std::floor(v);
    else if (t == DType::Bool) v = v > (lo + hi) / 2 ? 1 : 0;
    else v = round_to_dtype(v, t);
  }
  return x;
}

inline void expect_near(const RefTensor& got, const RefTensor& want, double tol, const std::string& what = "") {
  ASSERT_EQ(got.shape, want.shape) << what;
  ASSERT_EQ(got.dtype, want.dtype) << what;
  for (int64_t i = 0; i < got.numel(); ++i) {
    double g = got[i], w = want[i];
    if (std::isnan(w)) { EXPECT_TRUE(std::isnan(g)) << what << " at " << i; continue; }
    if (std::isinf(w)) { EXPECT_EQ(g, w) << what << " at " << i; continue; }
    ASSERT_NEAR(g, w, tol * (1 + std::fabs(w))) << what << " at flat index " << i;
  }
}

}  // namespace modelc::test
