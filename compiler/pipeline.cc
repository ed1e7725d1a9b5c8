#include "compiler/pipeline.h"

#include <fmt/format.h>

#include <algorithm>
#include <set>

#include "compiler/codegen/codegen.h"
#include "compiler/codegen/codelets.h"
#include "compiler/ir/op_registry.h"
#include "compiler/ir/printer.h"
#include "compiler/ir/verifier.h"
#include "compiler/lowered/schedule.h"
#include "compiler/passes/autocast.h"
#include "compiler/passes/mode.h"
#include "compiler/passes/predict.h"
#include "compiler/passes/recompute.h"
#include "compiler/passes/simplify.h"
#include "compiler/passes/train_step.h"
#include "runtime/base/train_rules.h"

namespace modelc {

namespace {

void verify(const Graph& g, std::string_view what, std::string_view pass) {
  if (auto problems = verify_graph(g); !problems.empty())
    throw InternalError(fmt::format("the {} after pass {} does not verify: {}", what, pass, problems.front()));
}

std::string precision_of(const CompileState& s) {
  if (s.options.precision) return *s.options.precision;
  return s.e.train && s.e.train->precision ? *s.e.train->precision : "fp32";
}

// --- the recompute pass ----------------------------------------------------------------

// The train step's memory as the pipeline's fusion and memory-plan passes make it, without code.
struct StepSizer {
  const CompileState& s;

  // `describe`: source lines for the buffers' origins (the error of a step that does not fit).
  Lowered dry(const Graph& step, const std::function<std::string(SourceLoc)>& describe = {}) const {
    const FusionPlan plan = fuse(step, s.options.fusion);
    const TrainConfig* train = s.e.train ? &*s.e.train : nullptr;
    Lowered l = lower(s.e.graph->name, s.e.graph->dims, {{"train_step", &step, &plan, true}}, train, describe);
    l.functions.clear();  // `plan` dies here; only the Program is read
    if (s.options.batch) l.program->train.batch = *s.options.batch;
    return l;
  }
  int64_t peak(const Graph& step) const {
    auto p = dry(step).program;
    return predict_memory(*p, "train_step", {}, bind_symbols(*p, "train_step", s.options.bindings)).peak;
  }
};

// The compile-time error when no placement fits: the breakdown of the best placement found,
// and what would fit.
// `all`: the step with the best placement's recomputation.
[[noreturn]] void does_not_fit(const CompileState& s, const Graph& all, int64_t budget) {
  auto describe = [&s](SourceLoc l) { return s.describe(l); };
  const Lowered l = StepSizer{s}.dry(all, describe);
  const rt::Program& p = *l.program;
  std::vector<BufferOrigin> origins = buffer_origins(p, l.buffer_values, {{"train_step", &all}}, describe);
  std::vector<int64_t> symbols = bind_symbols(p, "train_step", s.options.bindings);
  MemoryPrediction m = predict_memory(p, "train_step", origins, symbols);
  std::string parts;
  for (int k = 0; k < kMemKinds; ++k)
    if (int64_t b = m.at_peak[static_cast<size_t>(k)])
      parts += fmt::format("{}{} {}", parts.empty() ? "" : ", ", mem_kind_name(static_cast<MemKind>(k)), format_bytes(b));
  std::string batch;
  if (auto sym = batch_symbol(p, "train_step")) {
    auto best = largest_fitting(p, "train_step", origins, symbols, *sym, budget);
    batch = best ? fmt::format("; {} = {} fits in it (peak {})", p.symbols[*sym], best->first, format_bytes(best->second))
                 : fmt::format("; not even {} = 1 fits in it", p.symbols[*sym]);
  }
  throw UserError(fmt::format("the train step does not fit in the memory budget of {}: the smallest predicted "
                              "peak recomputation placement found is {} ({}){}; a budget of {} would fit",
                              format_bytes(budget), format_bytes(m.peak), parts, batch, format_bytes(m.peak)));
}

// `rc`: the step recomputed as `pl` says.
RecomputeReport report(const CompileState& s, const RecomputePlacement& pl, const Recomputed& rc,
                       std::optional<int64_t> budget, const std::map<std::string, int64_t>& dims) {
  RecomputeReport r;
  r.placement = pl;
  r.budget = budget;
  const Graph& step = *s.step;
  ByteSize bytes = bytes_under(dims);
  for (const auto& [clone, original] : rc.original) {
    const Node& n = step.nodes[original];
    RecomputeReport::Value v;
    v.what = fmt::format("{} %{}", op_name(n.op), original);
    v.where = n.loc.valid() ? s.describe(n.loc) : "";
    for (const TensorType& t : n.outputs) v.bytes += bytes(t);
    v.flops = node_flops(step, original, dims);
    r.recomputed.push_back(std::move(v));
  }
  std::stable_sort(r.recomputed.begin(), r.recomputed.end(), [](auto& a, auto& b) { return a.bytes > b.bytes; });
  return r;
}

// --- the passes, in order ----------------------------------------------------------------

// parse: reads the file and its imports into s.c.
bool parse(CompileState& s) { return s.c.load(s.path); }

// elaborate: s.e, the forward graph and the train section (with the --precision override).
bool elaborate(CompileState& s) {
  s.e = s.c.elaborate();
  if (!s.e.graph || s.c.diags().has_errors()) return false;
  if (s.options.precision && s.e.train) s.e.train->precision = *s.options.precision;
  verify(*s.e.graph, "forward graph", "elaborate");
  return true;
}

// autocast: the forward graph in bf16 / fp16 where the precision asks for it.
bool autocast_pass(CompileState& s) {
  if (const DType low = precision_dtype(precision_of(s)); low != DType::F32) *s.e.graph = autocast(*s.e.graph, low);
  return true;
}

// train-step: s.step from the forward graph and the train section; what the train section
// cannot build is an error at the train section.
bool train_step(CompileState& s) {
  if (!s.options.train || !s.e.train) return true;
  if (s.options.batch && s.e.train->accumulate)
    if (auto e = rt::check_batch_split(*s.options.batch, *s.e.train->accumulate)) {
      s.c.diags().error(s.e.train->loc, fmt::format("with --batch {}: {}", *s.options.batch, *e));
      return false;
    }
  try {
    s.step = std::make_unique<Graph>(build_train_step(*s.e.graph, train_step_options(*s.e.train)));
  } catch (const SourceError& err) {
    // An op of the model (autodiff meeting one without a gradient): at the op, noted at the
    // train section that asked for the gradients.
    s.c.diags().error(err.loc.valid() ? err.loc : s.e.train->loc, err.what());
    if (err.loc.valid()) s.c.diags().note(s.e.train->loc, fmt::format("in the train step of '{}'", s.e.train->model));
    return false;
  } catch (const UserError& err) {
    s.c.diags().error(s.e.train->loc, err.what());
    return false;
  }
  verify(*s.step, "train-step graph", "train-step");
  return true;
}

// eval-mode: s.e.graph becomes the eval function's graph (passes/mode.h): dropout off,
// `if training` branches resolved to their eval side, no buffer updates. The train step
// was built from the graph's train mode.
bool eval_mode_pass(CompileState& s) {
  *s.e.graph = specialize_mode(*s.e.graph, Mode::Eval);
  return true;
}

// predict: s.predict, with options.predict, from the eval-mode forward graph, or from the
// model elaborated again with the requested outputs, in eval mode (passes/predict.h).
bool predict_pass(CompileState& s) {
  if (!s.options.predict) return true;
  std::set<std::string> targets;
  if (s.e.train && s.e.graph->inputs.size() >= 2) targets.insert(s.e.graph->nodes[s.e.graph->inputs.back()].name);
  Graph g;
  if (s.options.predict->empty()) {
    g = *s.e.graph;
  } else {
    Elaborated pe = s.c.elaborate(*s.options.predict);
    if (!pe.graph || s.c.diags().has_errors()) return false;
    if (const DType low = precision_dtype(precision_of(s)); low != DType::F32) *pe.graph = autocast(*pe.graph, low);
    g = specialize_mode(*pe.graph, Mode::Eval);
  }
  try {
    s.predict = std::make_unique<Graph>(predict_graph(g, targets, !s.options.predict->empty()));
  } catch (const SourceError& err) {
    s.c.diags().error(err.loc, err.what());
    return false;
  }
  verify(*s.predict, "predict graph", "predict");
  return true;
}

// simplify: every graph folded, deduplicated and without dead nodes.
bool simplify_pass(CompileState& s) {
  *s.e.graph = simplify(*s.e.graph);
  if (s.step) *s.step = simplify(*s.step);
  if (s.predict) *s.predict = simplify(*s.predict);
  return true;
}

// recompute: @checkpoint always; with a budget, what else the backward pass recomputes. s.step
// becomes the recomputed step, s.recompute says what was chosen.
bool recompute_pass(CompileState& s) {
  if (!s.step || !s.options.recompute) return true;
  const StepSizer sizer{s};
  PlacementOptions po;
  po.budget = s.options.mem_budget ? s.options.mem_budget : s.e.train->mem_budget;
  po.algorithm = s.options.recompute_algorithm;
  po.annotations = s.options.annotations;
  po.peak = [&sizer](const Graph& g) { return sizer.peak(g); };
  {
    auto p = sizer.dry(*s.step).program;
    po.dims = bound_dims(*p, bind_symbols(*p, "train_step", s.options.bindings));
  }
  RecomputePlacement pl = place_recomputation(*s.step, po);
  // What each recomputed value costs, where every dim has a value (the batch from the train
  // section or -D); a budget needs them all.
  bool bound = true;
  for (const DimDecl& d : s.e.graph->dims) bound &= d.value.has_value() || po.dims.count(d.name) > 0;
  Recomputed rc = recompute(*s.step, pl.drop);
  if (bound || po.budget) s.recompute = report(s, pl, rc, po.budget, po.dims);
  else s.recompute.placement = pl;
  if (s.options.recompute_report) *s.options.recompute_report = s.recompute;
  if (!pl.fits) does_not_fit(s, rc.graph, *po.budget);
  if (!pl.drop.empty()) *s.step = std::move(rc.graph);
  verify(*s.step, "recomputed train step", "recompute");
  return true;
}

// fusion: the fused groups of the forward graph and the train step.
bool fusion_pass(CompileState& s) {
  s.eval_plan = fuse(*s.e.graph, s.options.fusion);
  if (s.step) s.step_plan = fuse(*s.step, s.options.fusion);
  if (s.predict) s.predict_plan = fuse(*s.predict, s.options.fusion);
  return true;
}

// memory-plan: the Program's buffers and instructions (train_step, then eval), without code;
// what each buffer holds for the memory report.
bool memory_plan(CompileState& s) {
  std::vector<LowerFunction> fns;
  if (s.step) fns.push_back({"train_step", s.step.get(), &s.step_plan, true});
  fns.push_back({"eval", s.e.graph.get(), &s.eval_plan, false});
  if (s.predict) fns.push_back({"predict", s.predict.get(), &s.predict_plan, false});
  auto describe = [&s](SourceLoc l) { return s.describe(l); };
  s.lowered = lower(s.e.graph->name, s.e.graph->dims, std::move(fns), s.e.train ? &*s.e.train : nullptr, describe);
  if (s.options.origins) {
    std::map<std::string, const Graph*> graphs{{"eval", s.e.graph.get()}};
    if (s.step) graphs["train_step"] = s.step.get();
    if (s.predict) graphs["predict"] = s.predict.get();
    *s.options.origins = buffer_origins(*s.lowered.program, s.lowered.buffer_values, graphs, describe);
  }
  return true;
}

// schedule: each function's instructions onto options.streams streams, with events.
bool schedule(CompileState& s) {
  if (s.options.streams > 1)
    for (rt::Function& f : s.lowered.program->functions) schedule_streams(*s.lowered.program, f, s.options.streams);
  return true;
}

// codegen: the codelets, compiled for the host (and to PTX for options.ptx_target).
bool codegen(CompileState& s) {
  if (!s.options.code) return true;
  CodegenOptions co;
  co.ptx_target = s.options.ptx_target;
  co.shared_object = s.options.shared_object;
  co.llvm_text = &s.llvm_text;
  generate_code(s.lowered, co);
  if (s.options.llvm_text) *s.options.llvm_text = s.llvm_text;
  return true;
}

struct Pass {
  PassInfo info;
  bool (*run)(CompileState&);
  bool graph;  // changes graphs: the verifier may run after it
};

const std::vector<Pass>& passes() {
  static const std::vector<Pass> list = {
      {{"parse", "read the file and its imports into syntax trees"}, parse, false},
      {{"elaborate", "inline defs, infer shapes, check the train section: the forward graph"}, elaborate, true},
      {{"autocast", "bf16 / fp16 precision: matmuls and convolutions in the low type"}, autocast_pass, true},
      {{"train-step", "autodiff, clipping, accumulation and the optimizer update: the train step"}, train_step, true},
      {{"eval-mode", "the forward graph in eval mode: dropout off, `if training` resolved, no buffer updates"},
       eval_mode_pass, true},
      {{"predict", "the predict function (modelrun predict, --inference): eval mode, no target, no loss"}, predict_pass, true},
      {{"simplify", "constant folding, common subexpressions, dead nodes"}, simplify_pass, true},
      {{"recompute", "what the backward pass recomputes (@checkpoint, --mem-budget)"}, recompute_pass, true},
      {{"fusion", "fused groups: what becomes one codelet or library call"}, fusion_pass, false},
      {{"memory-plan", "buffers and instructions, without code: the memory plan"}, memory_plan, false},
      {{"schedule", "instructions onto streams (--streams)"}, schedule, false},
      {{"codegen", "codelets as LLVM IR, compiled for the host and to PTX"}, codegen, false},
  };
  return list;
}

}  // namespace

const std::vector<PassInfo>& pipeline_passes() {
  static const std::vector<PassInfo> infos = [] {
    std::vector<PassInfo> v;
    for (const Pass& p : passes()) v.push_back(p.info);
    return v;
  }();
  return infos;
}

bool is_pass(std::string_view name) {
  for (const Pass& p : passes())
    if (p.info.name == name) return true;
  return false;
}

FusionPlan fuse(const Graph& g, bool enabled, bool in_place, bool horizontal) {
  FusionOptions fo;
  fo.enabled = enabled;
  fo.in_place = in_place;
  fo.horizontal = horizontal;
  fo.can_emit = [](const Graph& gr, NodeId id) { return CodeletCompiler::handles(gr, id); };
  return plan_fusion(g, fo);
}

bool run_pipeline(CompileState& s, const PipelineHooks& hooks) {
  MODELC_CHECK(is_pass(hooks.until), "run_pipeline: no pass named " + std::string(hooks.until));
#ifdef NDEBUG
  const bool verify_each = hooks.verify_each;
#else
  const bool verify_each = true;
#endif
  for (const Pass& p : passes()) {
    if (!p.run(s)) return false;
    if (verify_each && p.graph && s.e.graph) {
      verify(*s.e.graph, "forward graph", p.info.name);
      if (s.step) verify(*s.step, "train-step graph", p.info.name);
      if (s.predict) verify(*s.predict, "predict graph", p.info.name);
    }
    if (hooks.print && std::find(hooks.print_after.begin(), hooks.print_after.end(), p.info.name) != hooks.print_after.end())
      hooks.print(p.info.name, print_state(s, p.info.name));
    if (p.info.name == hooks.until) break;
  }
  return true;
}

std::string memory_report_text(const CompileState& s, const std::vector<BufferOrigin>& origins,
                               std::optional<int64_t> memory) {
  const rt::Program& p = *s.lowered.program;
  const std::string fn = p.function("train_step") ? "train_step" : "eval";
  MemoryReportOptions ro;
  ro.memory = memory;
  MemoryPrediction m = predict_memory(p, fn, origins, bind_symbols(p, fn, s.options.bindings));
  std::string text = print_memory_report(p, origins, m, ro);
  if (fn == "train_step") text += print_recompute_report(s.recompute, m.peak);
  return text;
}

std::string print_state(const CompileState& s, std::string_view pass) {
  const SourceManager& sm = s.c.sources();
  auto describe = [&s](SourceLoc l) { return s.describe(l); };
  if (pass == "parse") return ast::print_module(s.c.main_module(), sm);
  if (pass == "elaborate")
    return print_graph(*s.e.graph, &sm) + (s.e.train ? print_train_config(*s.e.train) : std::string());
  if (pass == "autocast" || pass == "eval-mode") return print_graph(*s.e.graph, &sm);
  if (pass == "predict") return s.predict ? print_graph(*s.predict, &sm) : "(no predict function: --inference or --output asks for one)\n";
  if (pass == "train-step" || pass == "simplify" || pass == "recompute") return print_graph(s.last_graph(), &sm);
  if (pass == "fusion") return print_fusion(s.last_graph(), s.step ? s.step_plan : s.eval_plan, describe);
  if (pass == "memory-plan") {
    std::map<std::string, const Graph*> graphs{{"eval", s.e.graph.get()}};
    if (s.step) graphs["train_step"] = s.step.get();
    return memory_report_text(s, buffer_origins(*s.lowered.program, s.lowered.buffer_values, graphs, describe));
  }
  if (pass == "schedule") {
    const rt::Program& p = *s.lowered.program;
    std::string text;
    for (const rt::Function& f : p.functions) {
      text += fmt::format("function {}: {} instructions on {} stream(s), {} event(s)\n", f.name, f.instrs.size(),
                          std::max<uint32_t>(f.streams, 1), f.events);
      for (size_t i = 0; i < f.instrs.size(); ++i) {
        const rt::Instr& in = f.instrs[i];
        text += fmt::format("  [{}] stream {} {}", i, in.stream,
                            in.kind == rt::Instr::Kind::Library ? in.op
                            : in.codelet < p.codelets.size()     ? "codelet " + p.codelets[in.codelet].name
                                                                 : std::string("codelet"));
        if (!in.waits.empty()) text += fmt::format(" waits {}", fmt::join(in.waits, ","));
        if (!in.records.empty()) text += fmt::format(" records {}", fmt::join(in.records, ","));
        if (!in.where.empty()) text += "  " + in.where;
        text += "\n";
      }
    }
    return text;
  }
  if (pass == "codegen") return s.llvm_text;
  throw InternalError("print_state: no pass named " + std::string(pass));
}

std::shared_ptr<rt::Program> compile_program(Compilation& c, const std::string& path, const ProgramOptions& options) {
  CompileState s{c, path, options};
  if (!run_pipeline(s)) return nullptr;
  return s.lowered.program;
}

std::shared_ptr<rt::Program> lower_program(const Graph& forward, const Graph* train_step, const TrainConfig* train,
                                           const LowerOptions& o) {
  const FusionPlan eval_plan = fuse(forward, o.fusion, o.in_place, o.horizontal);
  const FusionPlan step_plan = train_step ? fuse(*train_step, o.fusion, o.in_place, o.horizontal) : FusionPlan{};
  std::vector<LowerFunction> fns;
  if (train_step) fns.push_back({"train_step", train_step, &step_plan, true});
  if (o.eval || !train_step) fns.push_back({"eval", &forward, &eval_plan, false});
  Lowered l = lower(forward.name, forward.dims, std::move(fns), train, o.describe);
  if (o.buffer_values) *o.buffer_values = l.buffer_values;
  if (!o.dry_run) generate_code(l, {o.ptx_target, o.shared_object, o.llvm_text});
  return l.program;
}

}  // namespace modelc
