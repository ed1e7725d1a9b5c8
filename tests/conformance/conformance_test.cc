// The conformance test, driven by the two op tables (the compiler's registry,
// compiler/ir/op_registry.h, and the runtime's library ops, kernels/library_ops.def): for
// every registered op, on fresh random calls from its test domain,
//   (a) the lowered CPU program, fused and unfused, against the reference interpreter;
//   (b) its gradient against central finite differences of the reference, in double;
//   (c) every library op's CUDA twin, run on the host (the hand kernels' own launches and
//       bodies), against its CPU kernel, byte for byte;
//   (d) the PTX of every op code generation emits assembles for sm_80 and sm_90;
//   (e) NaN and infinities propagate as the reference says, fused and unfused;
//   (f) index operands: the limit the record declares is the one the reference enforces,
//       the lowering records it on the input, and a kernel never answers a bad index with
//       a finite number; value movers only move values;
//   (g) every composite op's expansion, run by the reference interpreter, against the op's
//       own reference (written apart from the expansion), on its inputs and with NaN and
//       infinities among them.
// Adding an op to a table adds it to every check; no list of ops is kept here. The seed is
// printed (MODELC_TEST_SEED replays a run).
#include <fmt/format.h>

#include <algorithm>
#include <optional>
#include <set>

#include "compiler/codegen/codelets.h"
#include "kernels/cuda/launches.h"
#include "kernels/cuda/library.h"
#include "kernels/cuda/run_op.h"
#include "tests/codegen/ptxas.h"
#include "tests/common/sanitizers.h"
#include "tests/conformance/conformance.h"
#include "tests/grad/grad_check.h"

namespace modelc::test::conformance {
namespace {

// Every op but the sources has a test domain, so every check below reaches it.
TEST(Conformance, EveryOpHasATestDomain) {
  for (const OpInfo& op : OpRegistry::get().all()) {
    if (op.fusion == FusionKind::Source) continue;
    EXPECT_FALSE(examples::of(op, rng()).empty()) << op.name << " has no test domain (domains or examples in its record)";
  }
}

// An op the registry says runs as a library call has a kernel on every backend: a CPU
// function, and on CUDA a hand kernel or a cuBLASLt / cuDNN call (when the runtime has its
// hand kernels: built with nvcc). Found here, not when an executor is constructed.
TEST(Conformance, EveryLibraryOpHasAKernelOnEveryBackend) {
  const bool nvcc = *rt::cuda::hand_kernels_ptx() != '\0';
  if (!nvcc) std::cerr << "built without nvcc: the CUDA hand kernels are not checked\n";
  int checked = 0;
  for (const OpInfo& op : OpRegistry::get().all()) {
    if (op.math != MathKind::Library) continue;
    EXPECT_NE(kernels::find_library_op(op.name), nullptr) << op.name << " has no CPU kernel (kernels/library_ops.def)";
    if (nvcc) {
      EXPECT_NE(rt::cuda::find_cuda_library_op(op.name), nullptr) << op.name << " has no CUDA kernel";
    }
    ++checked;
  }
  EXPECT_GT(checked, 0);
}

// The lowered program on the CPU against the reference, fused and unfused; `rule`: how
// NaN and infinities must agree (finite inputs: exactly).
void expect_cpu_matches_reference(const Case& c, const std::vector<std::optional<RefTensor>>& inputs,
                                  const std::string& label, NonFinite rule) {
  const auto feeds = feeds_of(inputs);
  for (bool fused : {false, true}) {
    const std::string what = fmt::format("{}{}, {}", c.name(), label, fused ? "fused" : "unfused");
    SCOPED_TRACE(what);
    Graph g = graph_of(c, inputs, fused);
    InterpResult want = interpret(g, feeds, reference_options());
    std::map<std::string, RefTensor> got = run_cpu(g, feeds, fused);
    for (const auto& [name, w] : want.outputs)
      expect_close(got.at(name), w, input_scale(inputs), what + ", " + name, rule);
  }
}

// (a)
TEST(Conformance, LoweredCpuCodeMatchesTheReference) {
  for (const Case& c : all_cases()) expect_cpu_matches_reference(c, rounded_inputs(c), "", NonFinite::Exact);
}

// (b) Every float input of every differentiable op, at up to 12 random elements each, with
// loss = sum over outputs k of sum(out_k * r_k), r_k random (every output's gradient).
TEST(Conformance, GradientsMatchCentralDifferences) {
  int checked = 0;
  for (const Case& c : all_cases()) {
    if ((!c.op->grad && c.op->math != MathKind::Composite) || !c.ex.grad) continue;
    SCOPED_TRACE(c.name());
    const auto inputs = rounded_inputs(c);
    Graph g = graph_of(c, inputs, false);
    std::vector<Value> results;  // the call's results (unfused: as the op gives them)
    for (const auto& o : g.outputs) results.push_back(o.value);
    g.outputs.clear();
    std::map<std::string, RefTensor> feeds = feeds_of(inputs);
    const InterpResult fwd = interpret(g, feeds, reference_options());
    Value total{};
    // A new input of the loss graph, fed `value`.
    auto add_input = [&](std::string name, TensorType type, RefTensor value) {
      Node n;
      n.op = OpKind::Input;
      n.name = std::move(name);
      n.outputs = {std::move(type)};
      const NodeId id = g.add(std::move(n));
      g.inputs.push_back(id);
      feeds[g.node(id).name] = std::move(value);
      return id;
    };
    for (size_t k = 0; k < results.size(); ++k) {
      const TensorType t = g.type(results[k]);
      if (!is_float(t.dtype)) continue;
      const NodeId rid = add_input("r" + std::to_string(k), TensorType{DType::F32, t.shape},
                                   random_tensor(DType::F32, concrete_shape(t.shape, {}), -1, 1));
      Value out = results[k];
      if (t.dtype != DType::F32) {
        Attrs a;
        a.set("dtype", DType::F32);
        out = Value{*add_op(g, OpKind::Cast, {out}, a), 0};
      }
      // Where the output is not finite (a causal mask's -inf) it is left out of the loss:
      // where(finite, out, 0), whose gradient there is 0.
      const RefTensor& y = fwd.values.at(out.node).at(out.index);
      RefTensor finite(DType::Bool, y.shape);
      for (int64_t i = 0; i < y.numel(); ++i) finite[i] = std::isfinite(y[i]);
      const NodeId mid = add_input("finite" + std::to_string(k), TensorType{DType::Bool, t.shape}, std::move(finite));
      Node zero;
      zero.op = OpKind::Constant;
      zero.attrs.set("value", 0.0);
      zero.outputs = {TensorType{DType::F32, {}}};
      out = Value{*add_op(g, OpKind::Where, {Value{mid, 0}, out, Value{g.add(std::move(zero)), 0}}, {}), 0};
      Value s{*add_op(g, OpKind::Sum, {Value{*add_op(g, OpKind::Mul, {out, Value{rid, 0}}, {}), 0}}, {}), 0};
      total = total.valid() ? Value{*add_op(g, OpKind::Add, {total, s}, {}), 0} : s;
    }
    if (!total.valid()) continue;
    g.outputs.push_back({"loss", total, {}});
    std::vector<std::string> names;
    for (size_t i = 0; i < inputs.size(); ++i)
      if (inputs[i] && inputs[i]->dtype == DType::F32) names.push_back("in" + std::to_string(i));
    check_graph_grads(g, "loss", feeds, names, reference_options(), c.ex.grad_step > 0 ? c.ex.grad_step : kGradEps,
                      c.ex.grad_tol > 0 ? c.ex.grad_tol : kGradTol, 12);
    ++checked;
  }
  EXPECT_GT(checked, 0);
}

// One to three elements of every float input replaced by NaN, +inf or -inf; false when the
// call has no float input to change.
bool inject_specials(std::vector<std::optional<RefTensor>>& inputs) {
  const double specials[] = {std::numeric_limits<double>::quiet_NaN(), std::numeric_limits<double>::infinity(),
                             -std::numeric_limits<double>::infinity()};
  bool any = false;
  for (auto& t : inputs) {
    if (!t || !is_float(t->dtype) || t->numel() == 0) continue;
    for (int k = static_cast<int>(rnd(1, 3)); k > 0; --k) t->data[static_cast<size_t>(rnd(0, t->numel() - 1))] = specials[rnd(0, 2)];
    any = true;
  }
  return any;
}

// (c) The library call of each case (its instruction of the unfused program, so with the
// attributes lowering gives it) through the CUDA twin's launches on the host and through
// the CPU kernel, on its inputs and again with NaN and infinities among them.
TEST(Conformance, CudaTwinsOnTheHostMatchTheCpuKernels) {
  const std::vector<std::string> hand = kernels::cuda::hand_kernel_ops();
  std::set<std::string> skipped;
  for (const Case& c : all_cases()) {
    if (c.op->math != MathKind::Library) continue;
    if (std::find(hand.begin(), hand.end(), c.op->name) == hand.end()) {
      skipped.insert(c.op->name);  // cuBLASLt / cuDNN: tests/gpu compares them on a GPU
      continue;
    }
    for (bool specials : {false, true}) {
    SCOPED_TRACE(c.name() + (specials ? " with NaN/inf inputs" : ""));
    auto inputs = rounded_inputs(c);
    if (specials) inject_specials(inputs);
    Graph g = graph_of(c, inputs, false);
    LowerOptions lo;
    lo.fusion = false;
    lo.dry_run = true;
    auto p = lower_program(g, nullptr, nullptr, lo);
    const rt::Function* fn = p->function("eval");
    const rt::Instr* call = nullptr;
    for (const rt::Instr& in : fn->instrs)
      if (in.kind == rt::Instr::Kind::Library && in.op == c.op->name) call = &in;
    ASSERT_NE(call, nullptr) << "no " << c.op->name << " call in the lowered program";
    std::vector<rt::HostTensor> hosts;
    hosts.reserve(inputs.size());
    std::vector<const rt::HostTensor*> in;
    for (const auto& t : inputs) {
      if (t) hosts.push_back(to_host(*t));
      in.push_back(t ? &hosts.back() : nullptr);
    }
    const Node& node = g.nodes.back();
    std::vector<rt::HostTensor> cpu, gpu;
    for (const TensorType& t : node.outputs) cpu.emplace_back(t.dtype, concrete_shape(t.shape, {}));
    gpu = cpu;
    for (rt::HostTensor& t : gpu) std::fill(t.bytes.begin(), t.bytes.end(), 0xA5);  // unwritten bytes show
    // A keyed op's size table is the run's seed and step ($seed, $step): the reference's.
    kernels::cuda::OpSizes sizes;
    if (!call->sizes.empty())
      sizes = {static_cast<int64_t>(reference_options().seed), static_cast<int64_t>(reference_options().step)};
    kernels::cuda::run_cpu_op(c.op->name, in, cpu, call->ints, call->floats, 2, sizes);
    kernels::cuda::run_emulated_op(c.op->name, in, gpu, call->ints, call->floats, sizes);
    // Byte for byte; with NaN inputs, NaN where the CPU kernel has NaN (payloads may differ).
    for (size_t k = 0; k < cpu.size(); ++k) {
      if (specials) expect_close(from_host(gpu[k]), from_host(cpu[k]), 0, fmt::format("output {}", k));
      else EXPECT_EQ(gpu[k].bytes, cpu[k].bytes) << "output " << k;
    }
    }
  }
  for (const std::string& op : skipped)
    std::cerr << op << ": runs on cuBLASLt / cuDNN on a GPU, not emulated (tests/gpu compares it there)\n";
}

// (d) One module per op and call kind (unfused and fused), as a program holds it.
TEST(Conformance, PtxOfEveryGeneratedOpAssembles) {
  MODELC_REQUIRE_PTXAS();
  std::set<std::string> done;
  for (const Case& c : all_cases()) {
    if (c.op->math == MathKind::Library || done.count(c.op->name)) continue;
    done.insert(c.op->name);
    for (bool fused : {false, true}) {
      SCOPED_TRACE(fmt::format("{}, {}", c.name(), fused ? "fused" : "unfused"));
      Graph g = graph_of(c, rounded_inputs(c), fused);
      LowerOptions lo;
      lo.fusion = fused;
      lo.eval = false;
      lo.ptx_target = "sm_80";
      auto p = lower_program(g, &g, nullptr, lo);
      ASSERT_FALSE(p->ptx.empty());
      for (const char* sm : {"sm_80", "sm_90"})
        EXPECT_EQ(assemble_ptx(p->ptx, sm, fmt::format("{}_{}", c.op->name, fused ? "fused" : "unfused")), "");
    }
  }
}

// (e) Some elements of every float input replaced by NaN, +inf or -inf.
TEST(Conformance, NaNAndInfinitiesPropagateAsTheReferenceSays) {
  for (const Case& c : all_cases()) {
    auto inputs = rounded_inputs(c);
    if (inject_specials(inputs)) expect_cpu_matches_reference(c, inputs, " with NaN/inf inputs", c.op->nonfinite);
  }
}

// (f) The limit of an index operand, from the call's inputs as the record says.
int64_t index_limit(const Case& c, const IndexOperand& io) {
  if (io.of < 0) return c.ex.attrs.i(io.attr);
  const RefTensor& of = *c.ex.inputs.at(static_cast<size_t>(io.of));
  const auto rank = static_cast<int64_t>(of.shape.size());
  return of.shape.at(static_cast<size_t>(io.dim < 0 ? rank + io.dim : io.dim));
}

// True when a run of the compiled kernels refused the inputs or made every float output NaN.
bool kernels_refuse(const Graph& g, const std::map<std::string, RefTensor>& feeds) {
  try {
    for (const auto& [name, t] : run_cpu(g, feeds, false))
      if (is_float(t.dtype))
        for (double v : t.data)
          if (!std::isnan(v)) return false;
  } catch (const std::exception&) {
  }
  return true;
}

TEST(Conformance, IndexOperandsAreTheLimitsTheReferenceEnforces) {
  int checked = 0;
  for (const Case& c : all_cases()) {
    for (const IndexOperand& io : c.op->index_operands) {
      SCOPED_TRACE(c.name());
      auto inputs = rounded_inputs(c);
      RefTensor& ids = *inputs.at(static_cast<size_t>(io.operand));
      // cross_entropy's targets are indices when they are i32 (probabilities otherwise).
      if (ids.dtype != DType::I32 || ids.numel() == 0) continue;
      const int64_t limit = index_limit(c, io);
      std::optional<int64_t> ignore;
      if (!io.ignore_attr.empty()) {
        Attrs a = c.ex.attrs;
        apply_defaults(*c.op, a);  // the signature's default when the example leaves it out
        ignore = a.i(io.ignore_attr);
      }
      const bool ignore_outside = ignore && (*ignore < 0 || *ignore >= limit);
      Graph g = graph_of(c, inputs, false);
      std::shared_ptr<rt::Program> p = lower_program(g, &g, nullptr, LowerOptions{});
      const std::string name = "in" + std::to_string(io.operand);
      for (const rt::BufferDesc& d : p->buffers) {
        if (d.name == name && d.role == rt::BufferRole::Input) {
          EXPECT_EQ(d.index_limit, limit) << d.index_note;
          EXPECT_EQ(d.index_ignore, ignore_outside ? ignore : std::nullopt) << d.index_note;
        }
      }
      const auto at = static_cast<size_t>(rnd(0, ids.numel() - 1));
      std::vector<int64_t> values = {limit - 1, 0, limit, -1};
      if (ignore_outside) values.push_back(*ignore);
      for (int64_t v : values) {
        ids.data[at] = static_cast<double>(v);
        const bool ok = (v >= 0 && v < limit) || (ignore && v == *ignore);
        bool refused = false;
        try {
          interpret(g, feeds_of(inputs), reference_options());
        } catch (const UserError&) {
          refused = true;
        }
        EXPECT_EQ(refused, !ok) << "index " << v << " of " << limit << " (" << io.what << ")";
        if (!ok) {
          EXPECT_TRUE(kernels_refuse(g, feeds_of(inputs))) << "a finite answer for index " << v << " of " << limit;
        }
      }
      ++checked;
    }
  }
  EXPECT_GT(checked, 0);
}

// Every output value of a value mover is one of its inputs' values (on distinct inputs,
// so a computed value cannot pass by chance).
TEST(Conformance, ValueMoversOnlyMoveValues) {
  int checked = 0;
  for (const Case& c : all_cases()) {
    if (!c.op->moves_values) continue;
    SCOPED_TRACE(c.name());
    auto inputs = rounded_inputs(c);
    std::set<double> have;
    double next = 1;
    for (auto& t : inputs)
      if (t)
        for (double& v : t->data) have.insert(v = next++);
    Graph g = graph_of(c, inputs, false);
    for (const auto& [name, t] : interpret(g, feeds_of(inputs), reference_options()).outputs)
      for (double v : t.data) EXPECT_TRUE(have.count(v)) << name << " holds " << v << ", which no input holds";
    ++checked;
  }
  EXPECT_GT(checked, 0);
}

// (g) The composite's reference on the call's inputs, with the attributes its shape rule
// canonicalised: every result.
std::vector<RefTensor> composite_reference(const Case& c, const std::vector<std::optional<RefTensor>>& inputs) {
  Node n;
  n.op = c.op->kind;
  n.attrs = c.ex.attrs;
  apply_defaults(*c.op, n.attrs);
  std::vector<TensorType> types;
  for (const auto& t : inputs) types.push_back(t ? type_of(*t) : TensorType{});
  InferCtx ctx{{}, n.attrs, {}, {}, -1, {}};
  for (size_t i = 0; i < inputs.size(); ++i) ctx.in.push_back(inputs[i] ? &types[i] : nullptr);
  c.op->infer(ctx);
  if (ctx.failed()) throw InternalError(c.name() + ": " + *ctx.error);
  n.outputs = ctx.out;
  std::vector<RefTensor> out;
  for (const TensorType& t : n.outputs) out.emplace_back(t.dtype, concrete_shape(t.shape, {}));
  std::vector<const RefTensor*> in;
  for (const auto& t : inputs) in.push_back(t ? &*t : nullptr);
  const InterpOptions o = reference_options();
  RefCtx rc{n, std::move(in), out, o};
  c.op->reference(rc);
  return out;
}

TEST(Conformance, CompositesMatchTheirReference) {
  int checked = 0;
  for (const Case& c : all_cases()) {
    if (c.op->math != MathKind::Composite) continue;
    for (bool specials : {false, true}) {
      SCOPED_TRACE(c.name() + (specials ? " with NaN/inf inputs" : ""));
      auto inputs = rounded_inputs(c);
      if (specials && !inject_specials(inputs)) continue;
      Graph g = graph_of(c, inputs, false);
      const std::vector<RefTensor> want = composite_reference(c, inputs);
      const InterpResult got = interpret(g, feeds_of(inputs), reference_options());
      ASSERT_EQ(got.outputs.size(), want.size());
      for (size_t k = 0; k < want.size(); ++k)
        expect_close(got.outputs.at("out" + std::to_string(k)), want[k], input_scale(inputs),
                     "the expansion's result " + std::to_string(k));
      ++checked;
    }
  }
  EXPECT_GT(checked, 0);
}

}  // namespace
}  // namespace modelc::test::conformance
