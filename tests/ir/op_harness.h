// Builds one-op graphs and runs them through the reference interpreter, for the op tests.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <initializer_list>
#include <iostream>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "compiler/ir/interpreter.h"
#include "compiler/ir/op_registry.h"

namespace modelc::test {

// Symbolic dims shared by the op tests.
inline const Dim B = Dim::symbol("B"), T = Dim::symbol("T"), C = Dim::symbol("C"), H = Dim::symbol("H");

// Tolerance of the reference checks (relative, see expect_near).
inline constexpr double kTol = 1e-12;

inline TensorType tt(DType t, std::vector<Dim> shape) { return TensorType{t, std::move(shape)}; }
inline TensorType f32(std::vector<Dim> shape) { return tt(DType::F32, std::move(shape)); }

// Concrete extents as dims.
inline Shape to_dims(const std::vector<int64_t>& s) { return Shape(s.begin(), s.end()); }
// The type of a concrete tensor.
inline TensorType type_of(const RefTensor& t) { return TensorType{t.dtype, to_dims(t.shape)}; }

inline Attrs attrs(std::initializer_list<std::pair<const char*, AttrValue>> items) {
  Attrs a;
  for (const auto& [k, v] : items) a.set(k, v);
  return a;
}

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
  std::vector<Value> results;  // a composite's may lie in several nodes (topk's)
  auto id = add_op(r.g, op, ins, std::move(attrs), {}, &f, &results);
  if (!id) { r.error = f; return r; }
  r.node = *id;
  for (size_t k = 0; k < results.size(); ++k) r.g.outputs.push_back({"out" + std::to_string(k), results[k], {}});
  return r;
}

// Expects the shape rule to refuse with exactly `message`, blaming `input` / `attr`.
inline void expect_error(const OneOp& o, const std::string& message, int input = -1, const std::string& attr = "") {
  ASSERT_TRUE(o.error) << "expected: " << message;
  EXPECT_EQ(o.error->message, message);
  EXPECT_EQ(o.error->input, input) << message;
  EXPECT_EQ(o.error->attr, attr) << message;
}

// Expects the shape rule to accept, with one output of type `want`.
inline void expect_type(const OneOp& o, const TensorType& want) {
  ASSERT_FALSE(o.error) << o.error->message;
  ASSERT_EQ(o.outputs().size(), 1u);
  EXPECT_EQ(o.outputs()[0], want) << o.outputs()[0].str() << " vs " << want.str();
}

// Runs the built op on concrete inputs (same order as build_op's; absent ones skipped).
//
// Returns the outputs by value. `for (double v : run_op(...)[0].data)` therefore reads
// freed memory: the range-for binds a reference to `.data`, but the returned vector is a
// temporary destroyed at the end of that statement, before the loop body runs (lifetime
// extension does not reach through operator[]). Store the result first:
// `RefTensor got = run_op(...)[0]; for (double v : got.data) ...`.
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

// The generator of all the random cases. Its seed comes from MODELC_TEST_SEED when that is
// set (to replay a failure), otherwise from std::random_device; it is printed to stderr on
// first use.
inline std::mt19937& rng() {
  static std::mt19937 gen = [] {
    std::mt19937::result_type seed;
    const char* env = std::getenv("MODELC_TEST_SEED");
    if (env && *env) {
      char* end = nullptr;
      unsigned long long v = std::strtoull(env, &end, 10);
      if (*end != '\0' || *env == '-' || v > std::mt19937::max()) {
        std::cerr << "op tests: MODELC_TEST_SEED=" << env << " is not a seed (an integer in [0, "
                  << std::mt19937::max() << "])\n";
        std::exit(2);
      }
      seed = static_cast<std::mt19937::result_type>(v);
    } else {
      seed = std::random_device{}();
    }
    std::cerr << "op tests: random seed " << seed << " (set MODELC_TEST_SEED=" << seed << " to replay)\n";
    return std::mt19937(seed);
  }();
  return gen;
}

// Uniform in [lo, hi], both included.
inline int64_t rnd(int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng()); }

// A shape of `rank` extents, each uniform in [lo, hi].
inline std::vector<int64_t> random_shape(int64_t rank, int64_t lo = 1, int64_t hi = 4) {
  std::vector<int64_t> s;
  for (int64_t i = 0; i < rank; ++i) s.push_back(rnd(lo, hi));
  return s;
}

inline DType random_float_dtype() {
  static const DType ts[] = {DType::F32, DType::F16, DType::BF16};
  return ts[rnd(0, 2)];
}

// The row-major offset of a multi-index.
inline int64_t offset(const std::vector<int64_t>& shape, const std::vector<int64_t>& idx) {
  int64_t off = 0;
  for (size_t k = 0; k < shape.size(); ++k) off = off * shape[k] + idx[k];
  return off;
}

// The multi-index of a row-major offset (the inverse of offset).
inline std::vector<int64_t> unflatten(int64_t flat, const std::vector<int64_t>& shape) {
  std::vector<int64_t> idx(shape.size());
  for (size_t k = shape.size(); k-- > 0;) {
    idx[k] = flat % shape[k];
    flat /= shape[k];
  }
  return idx;
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
