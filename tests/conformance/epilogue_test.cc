// Library epilogues (compiler/passes/library_epilogue.h) under the conformance checks: every
// library op that takes an epilogue (its test calls, from the registry) followed by every
// activation an epilogue runs (every elementwise op whose node epilogue_activation names,
// with its test attributes), with and without a bias add, lowered fused so that the library
// call absorbs them (checked: each activation is absorbed at least once), on inputs holding
// NaN and infinities: the CPU result against the reference interpreter, NaN for NaN and the
// same infinities (or, for an op whose record says Superset, non-finite wherever the
// reference is). A relu computed as max(x, 0), which turns NaN into 0, fails here.
#include <fmt/format.h>

#include <set>

#include "compiler/passes/library_epilogue.h"
#include "tests/conformance/conformance.h"

namespace modelc::test::conformance {
namespace {

struct Activation {
  const OpInfo* op;
  Attrs attrs;
  rt::EpilogueActivation code;
};

// Every (op, attributes) the epilogue can run as an activation, one per runtime code.
std::vector<Activation> activations() {
  std::vector<Activation> r;
  std::set<rt::EpilogueActivation> seen;
  for (const Case& c : all_cases()) {
    if (c.op->fusion != FusionKind::Elementwise || c.ex.inputs.size() != 1) continue;
    Graph g;
    g.name = "probe";
    Node n;
    n.op = OpKind::Input;
    n.name = "x";
    n.outputs = {TensorType{DType::F32, {Dim(2), Dim(3)}}};
    const NodeId x = g.add(std::move(n));
    g.inputs.push_back(x);
    std::optional<NodeId> id = add_op(g, c.op->kind, {Value{x, 0}}, c.ex.attrs);
    if (!id) continue;
    const rt::EpilogueActivation code = epilogue_activation(g, *id);
    if (code == rt::EpilogueActivation::None || !seen.insert(code).second) continue;
    r.push_back({c.op, g.node(*id).attrs, code});
  }
  return r;
}

NodeId add_input(Graph& g, const std::string& name, const TensorType& t) {
  Node n;
  n.op = OpKind::Input;
  n.name = name;
  n.outputs = {t};
  const NodeId id = g.add(std::move(n));
  g.inputs.push_back(id);
  return id;
}

// 1 to 3 NaNs and infinities at random places of every float input.
void add_specials(std::map<std::string, RefTensor>& feeds) {
  const double specials[] = {std::numeric_limits<double>::quiet_NaN(), std::numeric_limits<double>::infinity(),
                             -std::numeric_limits<double>::infinity()};
  for (auto& [name, t] : feeds) {
    if (!is_float(t.dtype) || t.numel() == 0) continue;
    for (int k = static_cast<int>(rnd(1, 3)); k > 0; --k) t.data[static_cast<size_t>(rnd(0, t.numel() - 1))] = specials[rnd(0, 2)];
  }
}

// Whether the fused program's library call took an epilogue with activation `code`.
bool absorbed(const Graph& g, rt::EpilogueActivation code) {
  LowerOptions lo;
  lo.eval = false;
  lo.dry_run = true;
  auto p = lower_program(g, &g, nullptr, lo);
  for (const rt::Instr& in : p->function("train_step")->instrs) {
    auto it = in.ints.find("epilogue");
    if (in.kind == rt::Instr::Kind::Library && it != in.ints.end() && it->second.at(1) == static_cast<int64_t>(code))
      return true;
  }
  return false;
}

TEST(Conformance, LibraryEpiloguesPropagateNaNAsTheReference) {
  const std::vector<Activation> acts = activations();
  ASSERT_FALSE(acts.empty()) << "no elementwise op is an epilogue activation";
  std::set<rt::EpilogueActivation> absorbed_codes;
  for (const Case& lib : all_cases()) {
    if (lib.op->math != MathKind::Library) continue;
    const auto inputs = rounded_inputs(lib);
    Graph base;
    base.name = "epilogue";
    std::vector<Value> ins;
    std::map<std::string, RefTensor> feeds;
    for (size_t i = 0; i < inputs.size(); ++i) {
      if (!inputs[i]) {
        ins.push_back(Value{});
        continue;
      }
      const std::string name = "in" + std::to_string(i);
      ins.push_back(Value{add_input(base, name, type_of(*inputs[i])), 0});
      feeds[name] = *inputs[i];
    }
    std::optional<NodeId> y = add_op(base, lib.op->kind, ins, lib.ex.attrs);
    if (!y || base.node(*y).outputs.size() != 1) continue;
    const std::optional<EpilogueAnchor> anchor = epilogue_anchor(base, *y);
    if (!anchor) continue;
    const TensorType out = base.node(*y).outputs[0];
    for (bool bias : {false, true}) {
      if (bias && !anchor->takes_bias) continue;
      for (const Activation& act : acts) {
        const std::string what = fmt::format("{}{} then {}", lib.name(), bias ? " + bias" : "", act.op->name);
        SCOPED_TRACE(what);
        Graph g = base;
        std::map<std::string, RefTensor> f = feeds;
        Value v{*y, 0};
        if (bias) {
          // [C] along the last axis, [C, 1, ...] along an inner one: a bias as is_epilogue_bias says.
          Shape bs{out.shape.at(anchor->bias_axis)};
          for (size_t k = anchor->bias_axis + 1; k < out.shape.size(); ++k) bs.push_back(Dim(1));
          const TensorType bt{DType::F32, bs};
          f["bias"] = random_tensor(DType::F32, concrete_shape(bs, {}), -1, 1);
          v = Value{*add_op(g, OpKind::Add, {v, Value{add_input(g, "bias", bt), 0}}, {}), 0};
        }
        v = Value{*add_op(g, act.op->kind, {v}, act.attrs), 0};
        g.outputs.push_back({"out", v, {}});
        if (absorbed(g, act.code)) absorbed_codes.insert(act.code);
        add_specials(f);
        const InterpResult want = interpret(g, f, reference_options());
        const std::map<std::string, RefTensor> got = run_cpu(g, f, /*fused=*/true);
        double scale = 0;
        for (const auto& [name, t] : f)
          for (double x : t.data)
            if (std::isfinite(x)) scale = std::max(scale, std::fabs(x));
        expect_close(got.at("out"), want.outputs.at("out"), scale, what, lib.op->nonfinite);
      }
    }
  }
  for (const Activation& act : acts)
    EXPECT_TRUE(absorbed_codes.count(act.code)) << act.op->name << " was never absorbed into a library epilogue";
}

}  // namespace
}  // namespace modelc::test::conformance
