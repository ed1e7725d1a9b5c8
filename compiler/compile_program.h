// From a .model file to the runtime's Program, in process: what `modelrun` runs and what
// a .plan file will hold. Load, elaborate, build the train step (when the model has a
// train section), lower and compile the kernels for the host, and schedule the functions
// onto streams (ProgramOptions::streams).
#pragma once

#include <memory>
#include <string>

#include "compiler/compile.h"
#include "compiler/passes/recompute_placement.h"
#include "compiler/passes/memory_report.h"
#include "runtime/base/program.h"

namespace modelc {

struct ProgramOptions {
  bool train = true;  // false: the eval function only, even when there is a train section
  bool fusion = true;  // false: one kernel per node (-fno-fusion)
  std::string ptx_target;              // non-empty: also compile PTX for it (LowerOptions)
  std::string* shared_object = nullptr;  // non-null: also emit the host code as a .so
  std::string* llvm_text = nullptr;      // non-null: receives the kernels' LLVM IR text
  // Non-null: receives what each buffer of the Program holds, for the memory report.
  std::vector<BufferOrigin>* origins = nullptr;
  // Recomputation placement (compiler/passes/recompute_placement.h): the peak memory the train step
  // must fit in (overrides the train section's mem_budget) and the algorithm. @checkpoint
  // annotations are honoured with or without a budget.
  std::optional<int64_t> mem_budget;
  bool recompute = true;  // false: ignore @checkpoint and budgets (tests compare the two)
  // false: ignore @checkpoint annotations, recompute only what mem_budget needs.
  bool annotations = true;
  // false: buffers and instructions only, no kernel code (LowerOptions::dry_run): a
  // Program that cannot run but whose memory plan is the real one's, in milliseconds.
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
  // The streams each function's instructions may run on (compiler/passes/schedule.h);
  // 1: one stream, no events (the sequential run).
  uint32_t streams = 1;
};

// Problems go to c.diags() (user errors in the model) or are thrown as UserError (what the
// later stages refuse); returns null when diagnostics were reported.
std::shared_ptr<rt::Program> compile_program(Compilation& c, const std::string& path,
                                             const ProgramOptions& options = {});

}  // namespace modelc
