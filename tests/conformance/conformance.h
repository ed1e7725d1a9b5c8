// The conformance test's harness (as ggml's test-backend-ops): every op of the registry on
// the calls of its test domain (compiler/ir/op_examples.h), built into a one-op graph,
// run through the reference interpreter and through the compiled program on the CPU, fused
// (its float inputs and outputs pass through `x * 1`, which fusion folds into the op's
// kernel or chains around a library call) and unfused.
#pragma once

#include <fmt/format.h>

#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "compiler/pipeline.h"
#include "compiler/ir/op_examples.h"
#include "compiler/ir/verifier.h"
#include "kernels/cpu/library.h"
#include "runtime/execution/cpu/executor.h"
#include "tests/ir/op_harness.h"

namespace modelc::test::conformance {

// One call of one op.
struct Case {
  const OpInfo* op = nullptr;
  OpExample ex;
  std::string name() const { return op->name + " (" + ex.label + ")"; }
};

// Every call of every op that is not a source, fresh from the test's generator.
inline std::vector<Case> all_cases() {
  std::vector<Case> r;
  for (const OpInfo& op : OpRegistry::get().all()) {
    if (op.fusion == FusionKind::Source) continue;
    for (OpExample& e : examples::of(op, rng())) r.push_back({&op, std::move(e)});
  }
  return r;
}

// The inputs as the runtime holds them: each value rounded to its dtype, so that the
// reference and the kernels start from the same numbers.
inline std::vector<std::optional<RefTensor>> rounded_inputs(const Case& c) {
  std::vector<std::optional<RefTensor>> in = c.ex.inputs;
  for (auto& t : in)
    if (t)
      for (double& v : t->data) v = round_to_dtype(v, t->dtype);
  return in;
}

// The one-op graph of a call: inputs "in0", "in1", ... (an absent optional input is none),
// outputs "out0", ...; `fused`: float inputs and outputs pass through `x * 1`.
inline Graph graph_of(const Case& c, const std::vector<std::optional<RefTensor>>& inputs, bool fused) {
  Graph g;
  g.name = "conformance";
  auto times_one = [&](Value v) {
    const TensorType& t = g.type(v);
    if (!fused || !is_float(t.dtype)) return v;
    Node one;
    one.op = OpKind::Constant;
    one.attrs.set("value", 1.0);
    one.outputs = {TensorType{t.dtype, {}}};
    Value k{g.add(std::move(one)), 0};
    return Value{*add_op(g, OpKind::Mul, {v, k}, {}), 0};
  };
  std::vector<Value> ins;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i]) {
      ins.push_back(Value{});
      continue;
    }
    Node n;
    n.op = OpKind::Input;
    n.name = "in" + std::to_string(i);
    n.outputs = {type_of(*inputs[i])};
    NodeId id = g.add(std::move(n));
    g.inputs.push_back(id);
    ins.push_back(times_one(Value{id, 0}));
  }
  InferFailure why;
  std::vector<Value> results;
  auto id = add_op(g, c.op->kind, ins, c.ex.attrs, {}, &why, &results);
  if (!id) throw InternalError(fmt::format("{}: the shape rule refuses the test call: {}", c.name(), why.message));
  for (size_t k = 0; k < results.size(); ++k) g.outputs.push_back({"out" + std::to_string(k), times_one(results[k]), {}});
  return g;
}

inline std::map<std::string, RefTensor> feeds_of(const std::vector<std::optional<RefTensor>>& inputs) {
  std::map<std::string, RefTensor> f;
  for (size_t i = 0; i < inputs.size(); ++i)
    if (inputs[i]) f["in" + std::to_string(i)] = *inputs[i];
  return f;
}

inline constexpr uint64_t kSeed = 20261202, kStep = 7;  // dropout's RNG, in both runs

inline InterpOptions reference_options() {
  InterpOptions o;
  o.training = true;
  o.seed = kSeed;
  o.step = kStep;
  return o;
}

// RefTensor <-> HostTensor, by dtype (f16 / bf16 through the runtime's conversions).
inline rt::HostTensor to_host(const RefTensor& t) {
  rt::HostTensor h(t.dtype, t.shape);
  for (int64_t i = 0; i < t.numel(); ++i) {
    const double v = t[i];
    switch (t.dtype) {
      case DType::F32: h.f32()[i] = static_cast<float>(v); break;
      case DType::F16: case DType::BF16:
        reinterpret_cast<uint16_t*>(h.bytes.data())[i] = kernels::f32_to_low(static_cast<float>(v), h.type);
        break;
      case DType::I32: h.i32()[i] = static_cast<int32_t>(v); break;
      case DType::Bool: h.bytes[static_cast<size_t>(i)] = v != 0; break;
    }
  }
  return h;
}

inline RefTensor from_host(const rt::HostTensor& h) {
  RefTensor t(h.type, h.shape);
  for (int64_t i = 0; i < t.numel(); ++i) {
    switch (t.dtype) {
      case DType::F32: t[i] = h.f32()[i]; break;
      case DType::F16: case DType::BF16:
        t[i] = kernels::low_to_f32(reinterpret_cast<const uint16_t*>(h.bytes.data())[i], h.type);
        break;
      case DType::I32: t[i] = h.i32()[i]; break;
      case DType::Bool: t[i] = h.bytes[static_cast<size_t>(i)]; break;
    }
  }
  return t;
}

// The graph compiled for the CPU (as the train step, so that dropout is in training mode)
// and run on `feeds`: its outputs by name.
inline std::map<std::string, RefTensor> run_cpu(const Graph& g, const std::map<std::string, RefTensor>& feeds, bool fused) {
  LowerOptions lo;
  lo.fusion = fused;
  lo.eval = false;
  std::shared_ptr<rt::Program> p = lower_program(g, &g, nullptr, lo);
  const rt::Function* fn = p->function("train_step");
  rt::ThreadPool pool(2);
  std::vector<rt::HostTensor> persistent(p->buffers.size());
  rt::Executor ex(*p, *fn, pool, persistent);
  std::vector<rt::HostTensor> hosts;
  hosts.reserve(fn->feeds.size());
  std::vector<const rt::HostTensor*> in;
  for (const rt::Feed& f : fn->feeds) {
    hosts.push_back(to_host(feeds.at(f.name)));
    in.push_back(&hosts.back());
  }
  std::map<std::string, RefTensor> out;
  for (auto& [name, t] : ex.run(in, {{"$seed", static_cast<int64_t>(kSeed)}, {"$step", static_cast<int64_t>(kStep)}}))
    out[name] = from_host(t);
  return out;
}

// The tolerance of a kernel's result against the double-precision reference: f32 code
// rounds every step (transcendentals within a few ulps, sums of up to a few dozen terms):
// 3e-5 relative, against 1 + |want| and the magnitude of the operands' terms (`scale`); a
// 16-bit result one rounding of its type on top; integers and bools exactly.
inline double tolerance(DType t) {
  switch (t) {
    case DType::F32: return 3e-5;
    case DType::F16: return 3e-5 + std::ldexp(1.0, -10);
    case DType::BF16: return 3e-5 + std::ldexp(1.0, -7);
    case DType::I32: case DType::Bool: return 0;
  }
  return 0;
}

// Compares as expect_near does, NaN for NaN and infinities exactly; reports the first
// mismatch of a tensor only.
// `rule`: the op's (OpInfo::nonfinite).
inline void expect_close(const RefTensor& got, const RefTensor& want, double scale, const std::string& what,
                         NonFinite rule = NonFinite::Exact) {
  ASSERT_EQ(got.shape, want.shape) << what;
  ASSERT_EQ(got.dtype, want.dtype) << what;
  const double tol = tolerance(want.dtype);
  for (int64_t i = 0; i < got.numel(); ++i) {
    const double g = got[i], w = want[i];
    // Superset: non-finite where the reference is (NaN and infinity alike), and maybe more.
    if (rule == NonFinite::Superset && !std::isfinite(g)) continue;
    if (std::isnan(w) || std::isinf(w) || std::isnan(g) || std::isinf(g)) {
      if (std::isnan(w) ? !std::isnan(g) : g != w) {
        ADD_FAILURE() << what << " at flat index " << i << ": got " << g << ", the reference says " << w;
        return;
      }
      continue;
    }
    if (std::fabs(g - w) > tol * (1 + std::fabs(w) + scale)) {
      ADD_FAILURE() << what << " at flat index " << i << ": got " << g << ", the reference says " << w
                    << " (tolerance " << tol << " relative)";
      return;
    }
  }
}

// The largest finite magnitude among the inputs: how large the terms of a sum may be.
inline double input_scale(const std::vector<std::optional<RefTensor>>& inputs) {
  double s = 0;
  for (const auto& t : inputs)
    if (t && is_float(t->dtype))
      for (double v : t->data)
        if (std::isfinite(v)) s = std::max(s, std::fabs(v));
  return s;
}

}  // namespace modelc::test::conformance
