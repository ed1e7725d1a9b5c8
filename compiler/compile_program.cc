#include "compiler/compile_program.h"

#include <fmt/format.h>

#include <algorithm>

#include "compiler/codegen/lower.h"
#include "compiler/ir/op_registry.h"
#include "compiler/ir/verifier.h"
#include "compiler/passes/autocast.h"
#include "compiler/passes/recompute.h"
#include "compiler/passes/schedule.h"
#include "compiler/passes/train_step.h"

namespace modelc {

namespace {

// The train step's memory, sized by lowering without code (LowerOptions::dry_run).
struct StepSizer {
  const Graph& forward;
  const TrainConfig* train;
  bool fusion;
  std::map<std::string, int64_t> bindings;

  std::optional<int64_t> batch;

  std::shared_ptr<rt::Program> dry(const Graph& step, std::vector<std::pair<std::string, Value>>* values = nullptr) const {
    LowerOptions lo;
    lo.fusion = fusion;
    lo.dry_run = true;
    lo.eval = false;
    lo.buffer_values = values;
    auto p = lower_program(forward, &step, train, lo);
    if (batch) p->train.batch = *batch;
    return p;
  }
  int64_t peak(const Graph& step) const {
    auto p = dry(step);
    return predict_memory(*p, "train_step", {}, bind_symbols(*p, "train_step", bindings)).peak;
  }
};

// The compile-time error when no placement fits: the breakdown of the best placement found,
// and what would fit.
[[noreturn]] void does_not_fit(const StepSizer& sizer, const Graph& step, const RecomputePlacement& pl, int64_t budget,
                               const std::function<std::string(SourceLoc)>& describe) {
  Graph all = recompute(step, pl.drop).graph;
  std::vector<std::pair<std::string, Value>> values;
  auto p = sizer.dry(all, &values);
  std::vector<BufferOrigin> origins = buffer_origins(*p, values, {{"train_step", &all}}, describe);
  std::vector<int64_t> symbols = bind_symbols(*p, "train_step", sizer.bindings);
  MemoryPrediction m = predict_memory(*p, "train_step", origins, symbols);
  std::string parts;
  for (int k = 0; k < kMemKinds; ++k)
    if (int64_t b = m.at_peak[static_cast<size_t>(k)])
      parts += fmt::format("{}{} {}", parts.empty() ? "" : ", ", mem_kind_name(static_cast<MemKind>(k)), format_bytes(b));
  std::string batch;
  if (auto sym = batch_symbol(*p, "train_step")) {
    auto best = largest_fitting(*p, "train_step", origins, symbols, *sym, budget);
    batch = best ? fmt::format("; {} = {} fits in it (peak {})", p->symbols[*sym], best->first, format_bytes(best->second))
                 : fmt::format("; not even {} = 1 fits in it", p->symbols[*sym]);
  }
  throw UserError(fmt::format("the train step does not fit in the memory budget of {}: the smallest predicted "
                              "peak recomputation placement found is {} ({}){}; a budget of {} would fit",
                              format_bytes(budget), format_bytes(m.peak), parts, batch, format_bytes(m.peak)));
}

RecomputeReport report(const Graph& step, const RecomputePlacement& pl, std::optional<int64_t> budget,
                        const std::map<std::string, int64_t>& dims, const std::function<std::string(SourceLoc)>& describe) {
  RecomputeReport r;
  r.placement = pl;
  r.budget = budget;
  Recomputed rc = recompute(step, pl.drop);
  ByteSize bytes = bytes_under(dims);
  for (const auto& [clone, original] : rc.original) {
    const Node& n = step.nodes[original];
    RecomputeReport::Value v;
    v.what = fmt::format("{} %{}", op_name(n.op), original);
    v.where = describe && n.loc.valid() ? describe(n.loc) : "";
    for (const TensorType& t : n.outputs) v.bytes += bytes(t);
    v.flops = node_flops(step, original, dims);
    r.recomputed.push_back(std::move(v));
  }
  std::stable_sort(r.recomputed.begin(), r.recomputed.end(), [](auto& a, auto& b) { return a.bytes > b.bytes; });
  return r;
}

}  // namespace

std::shared_ptr<rt::Program> compile_program(Compilation& c, const std::string& path,
                                             const ProgramOptions& options) {
  if (!c.load(path)) return nullptr;
  Elaborated e = c.elaborate();
  if (!e.graph || c.diags().has_errors()) return nullptr;
  std::unique_ptr<Graph> step;
  const TrainConfig* train = e.train ? &*e.train : nullptr;
  // Mixed precision: the flag overrides the train section; the train step autocasts its
  // copy of the forward graph (train_step.cc), the eval function this one.
  if (options.precision && e.train) e.train->precision = *options.precision;
  const std::string precision = options.precision ? *options.precision : train && train->precision ? *train->precision : "fp32";
  if (const DType low = precision_dtype(precision); low != DType::F32) *e.graph = autocast(*e.graph, low);
  LowerOptions lo;
  lo.describe = [&c](SourceLoc loc) { return c.sources().describe(loc); };
  if (options.train && train) {
    step = std::make_unique<Graph>(build_train_step(*e.graph, train_step_options(*train)));
    if (auto problems = verify_graph(*step); !problems.empty())
      throw InternalError("the train-step graph does not verify: " + problems.front());
  }
  if (step && options.recompute) {
    // Recomputation placement: @checkpoint always; with a budget, what else to recompute.
    const StepSizer sizer{*e.graph, train, options.fusion, options.bindings, options.batch};
    PlacementOptions co;
    co.budget = options.mem_budget ? options.mem_budget : train->mem_budget;
    co.algorithm = options.recompute_algorithm;
    co.annotations = options.annotations;
    co.peak = [&sizer](const Graph& g) { return sizer.peak(g); };
    if (co.budget || options.recompute_report) {
      auto p = sizer.dry(*step);
      co.dims = bound_dims(*p, bind_symbols(*p, "train_step", options.bindings));
    }
    RecomputePlacement pl = place_recomputation(*step, co);
    if (options.recompute_report) *options.recompute_report = report(*step, pl, co.budget, co.dims, lo.describe);
    if (!pl.fits) does_not_fit(sizer, *step, pl, *co.budget, lo.describe);
    if (!pl.drop.empty()) {
      step = std::make_unique<Graph>(recompute(*step, pl.drop).graph);
      if (auto problems = verify_graph(*step); !problems.empty())
        throw InternalError("the recomputed train step does not verify: " + problems.front());
    }
  }
  lo.fusion = options.fusion;
  lo.dry_run = !options.code;
  lo.ptx_target = options.ptx_target;
  lo.shared_object = options.shared_object;
  lo.llvm_text = options.llvm_text;
  std::vector<std::pair<std::string, Value>> values;
  if (options.origins) lo.buffer_values = &values;
  auto program = lower_program(*e.graph, step.get(), train, lo);
  if (options.streams > 1)
    for (rt::Function& f : program->functions) schedule_streams(*program, f, options.streams);
  if (options.origins) {
    std::map<std::string, const Graph*> graphs{{"eval", e.graph.get()}};
    if (step) graphs["train_step"] = step.get();
    *options.origins = buffer_origins(*program, values, graphs, lo.describe);
  }
  return program;
}

}  // namespace modelc
