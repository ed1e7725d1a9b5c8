// The compile pipeline: from a .model file to the runtime's Program, as one straight list of
// passes over one CompileState (run_pipeline in compiler/pipeline.cc reads top to bottom):
//
//   parse        the file and its imports             CompileState::c (the AST)
//   elaborate    inlining, shapes, the train section  e.graph (forward), e.train
//   autocast     bf16 / fp16 precision                e.graph
//   train-step   autodiff, optimizer, clipping, accumulation   step
//   eval-mode    dropout off, `if training` resolved  e.graph
//   predict      eval mode, no target (options.predict)  predict
//   simplify     constant folding, CSE, DCE           e.graph, step, predict
//   recompute    what the backward pass recomputes    step, recompute_report
//   fusion       fused groups of every function       eval_plan, step_plan, predict_plan
//   memory-plan  buffers and instructions, no code    lowered
//   schedule     instructions onto streams            lowered
//   codegen      codelets for the host (and PTX)      lowered (the Program can run)
//
// Every `modelc --emit=X` prints the state after pass X (print_state), `--print-after=PASS`
// after any pass, and the verifier checks the graphs after each graph pass in debug builds
// and with PipelineHooks::verify_each. Recomputation placement sizes its candidates by
// running this pipeline's fusion and memory-plan passes on them (without code).
//
// Two places where the order differs from a first sketch, and why: autocast runs before the
// train step, so that the backward pass runs in the low precision and saves low-precision
// activations (the train step autocasts its copy of the forward graph the same way); and
// recomputation placement runs before fusion, because it rewrites the graph (clones of the
// recomputed nodes), which fusion then plans, so `--emit=fusion` shows what runs.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "compiler/compile.h"
#include "compiler/lowered/lower.h"
#include "compiler/lowered/memory_report.h"
#include "compiler/passes/fusion.h"
#include "compiler/passes/recompute_placement.h"
#include "runtime/base/program.h"

namespace modelc {

struct ProgramOptions {
  bool train = true;  // false: the eval function only, even when there is a train section
  bool fusion = true;  // false: one codelet per node (-fno-fusion)
  std::string ptx_target;              // non-empty: also compile PTX for it (CodegenOptions)
  std::string* shared_object = nullptr;  // non-null: also emit the host code as a .so
  std::string* llvm_text = nullptr;      // non-null: receives the codelets' LLVM IR text
  // Non-null: receives what each buffer of the Program holds, for the memory report.
  std::vector<BufferOrigin>* origins = nullptr;
  // Recomputation placement (compiler/passes/recompute_placement.h): the peak memory the train step
  // must fit in (overrides the train section's mem_budget) and the algorithm. @checkpoint
  // annotations are honoured with or without a budget.
  std::optional<int64_t> mem_budget;
  bool recompute = true;  // false: ignore @checkpoint and budgets (tests compare the two)
  // false: ignore @checkpoint annotations, recompute only what mem_budget needs.
  bool annotations = true;
  // false: stop after the schedule, no codelet code: a Program that cannot run but whose
  // buffers, instructions and memory plan are the real one's, in milliseconds.
  bool code = true;
  RecomputeAlgorithm recompute_algorithm = RecomputeAlgorithm::Greedy;
  // Values of the model's free dims that size the step for the placement and the memory
  // report (-D B=64 with --emit=memory); the batch dim defaults to the train section's
  // (micro-)batch (bind_symbols).
  std::map<std::string, int64_t> bindings;
  // The batch the step runs with, when not the train section's (modelrun --batch): what
  // the batch dim defaults to for the placement.
  std::optional<int64_t> batch;
  // Non-null: receives the placement and what it recomputes.
  RecomputeReport* recompute_report = nullptr;
  // fp32 | bf16 | fp16: overrides the train section's `precision` (modelc/modelrun
  // --precision); bf16 and fp16 autocast the eval function and the train step
  // (compiler/passes/autocast.h, docs/precision.md).
  std::optional<std::string> precision;
  // The streams each function's instructions may run on (compiler/lowered/schedule.h);
  // 1: one stream, no events (the sequential run).
  uint32_t streams = 1;
  // Set: also compile the function "predict" (compiler/passes/predict.h), the eval-mode
  // forward pass from the inputs other than the train data's target (the model's last input,
  // when it has a train section and two or more) to these tensors of the model's body by
  // name, or, empty, to its declared outputs that do not read the target.
  std::optional<std::vector<std::string>> predict;
};

// Everything the passes read and write; each pass's comment in pipeline.cc says which part.
struct CompileState {
  Compilation& c;
  std::string path;
  ProgramOptions options;
  Elaborated e;                  // forward graph (the eval function) and train section
  std::unique_ptr<Graph> step;   // the train step (null without a train section or options.train)
  std::unique_ptr<Graph> predict;  // the predict function (null unless options.predict)
  RecomputeReport recompute;     // what the recompute pass chose
  FusionPlan eval_plan, step_plan, predict_plan;
  Lowered lowered;               // after memory-plan: the Program without code; after codegen, with
  std::string llvm_text;         // codegen's LLVM module text when something prints it
  std::string describe(SourceLoc loc) const { return c.sources().describe(loc); }
  const Graph& last_graph() const { return step ? *step : *e.graph; }  // what graph passes print
};

struct PassInfo {
  std::string_view name;
  std::string_view what;  // one line for --help and docs/architecture.md
};
const std::vector<PassInfo>& pipeline_passes();
bool is_pass(std::string_view name);

struct PipelineHooks {
  std::string_view until = "codegen";     // the last pass to run
  std::vector<std::string> print_after;   // passes after which `print` receives the state
  std::function<void(std::string_view pass, const std::string& text)> print;
  bool verify_each = false;               // verify the graphs after every graph pass (always in debug builds)
};

// Runs the passes up to hooks.until. False when diagnostics were reported (in s.c.diags());
// what the later passes refuse is thrown as UserError, a bug as InternalError.
bool run_pipeline(CompileState& s, const PipelineHooks& hooks = {});

// The state after `pass`, as --emit and --print-after show it: the AST (parse), the forward
// graph and train section (elaborate), the graph passes' graph (the train step, or the
// forward graph without one), the fusion groups, the memory report, the stream schedule, the
// LLVM IR (codegen).
std::string print_state(const CompileState& s, std::string_view pass);

// The memory report of the lowered Program's train step (or eval, without a train section)
// and what the recompute pass recomputed, as --emit=memory prints it; `memory`: the device
// memory to find the largest fitting batch for.
std::string memory_report_text(const CompileState& s, const std::vector<BufferOrigin>& origins,
                               std::optional<int64_t> memory = std::nullopt);

// The whole pipeline: the Program modelrun runs and a .plan file holds (null when
// diagnostics were reported).
std::shared_ptr<rt::Program> compile_program(Compilation& c, const std::string& path,
                                             const ProgramOptions& options = {});

// The fusion pass's plan of one graph (with the memory-plan pass's `lower`,
// compiler/lowered/lower.h, what recomputation placement sizes candidates with).
FusionPlan fuse(const Graph& g, bool enabled, bool in_place = true, bool horizontal = true);

// For tests that start from graphs: fusion, memory plan and (unless dry_run) code generation
// of a forward graph and its train step (`train_step` may be null: "eval" only).
struct LowerOptions {
  std::function<std::string(SourceLoc)> describe;
  bool fusion = true, in_place = true, horizontal = true;
  std::string ptx_target;
  std::string* shared_object = nullptr;
  std::string* llvm_text = nullptr;
  std::vector<std::pair<std::string, Value>>* buffer_values = nullptr;
  bool dry_run = false;  // buffers and instructions only (the memory-plan pass's Program)
  bool eval = true;      // false: the train step only
};
std::shared_ptr<rt::Program> lower_program(const Graph& forward, const Graph* train_step, const TrainConfig* train,
                                           const LowerOptions& options = {});

}  // namespace modelc
