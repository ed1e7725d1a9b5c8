// Lowering: the forward graph and the train-step graph of a model become one runtime
// Program (runtime/base/program.h) with two functions, "train_step" and "eval".
//
// Reads: a verified forward graph (eval: dropout off) and the train-step graph built from
// it (compiler/passes/train_step.h), plus the train section. Elementwise, reduction and row
// ops become LLVM kernels (compiler/codegen/codelets.h), compiled for the host; every other
// op becomes a library call the runtime implements under the op's own name, with the
// node's integer and float attributes. Params and optimizer state are persistent buffers
// shared by both functions; a function's updates write them back after it ran.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "compiler/ir/train_config.h"
#include "compiler/ir/graph.h"
#include "runtime/base/program.h"

namespace modelc {

struct LowerOptions {
  // Formats a source location for messages ("models/x.model:12:5"); may be empty.
  std::function<std::string(SourceLoc)> describe;
  // Fuse elementwise chains into reductions and each other (compiler/passes/fusion.h);
  // false: one kernel per node (`-fno-fusion`).
  bool fusion = true;
  // With fusion, write the optimizer's updates over the old values (plan_in_place); false:
  // new values are copied back after the step (for tests comparing the two).
  bool in_place = true;
  // With fusion, emit the optimizer's updates of all parameters as one kernel
  // (plan_horizontal); false: one kernel per parameter.
  bool horizontal = true;
  // Also compile the kernels for NVPTX into Program::ptx, for this target ("sm_80",
  // "sm_90"); empty: no PTX.
  std::string ptx_target;
  // When set, also emits the host kernels as a shared object (the bytes of a .so whose
  // exported symbols are the kernels' names) into *shared_object, for a .plan file.
  std::string* shared_object = nullptr;
  // When set, receives the kernels' target-neutral LLVM module text (--emit=llvm).
  std::string* llvm_text = nullptr;
  // When set, receives by buffer id the graph value each buffer holds and the function
  // whose graph it is in ("train_step", "eval"; empty for params and states, which every
  // function shares), for the memory report (compiler/passes/memory_report.h). A two-phase
  // reduction's scratch holds its reduction node's value.
  std::vector<std::pair<std::string, Value>>* buffer_values = nullptr;
  // Buffers and instructions only: no kernel is emitted or compiled (every kernel
  // instruction names kernel 0 of none), so the Program cannot run, but its buffers,
  // instructions and so its memory plan are the real one's. Milliseconds where real
  // lowering takes seconds: what recomputation placement sizes its candidates with, and what
  // `modelc --emit=memory` reports.
  bool dry_run = false;
  // false: the train step only, no "eval" function (when only the step is sized).
  bool eval = true;
};

// `train_step` may be null (a model without a train section): the Program then has "eval"
// only. Throws UserError for what the runtime cannot run (e.g. an unsupported dtype).
std::shared_ptr<rt::Program> lower_program(const Graph& forward, const Graph* train_step,
                                           const TrainConfig* train, const LowerOptions& options = {});

// The runtime's view of the train section (data, optimizer, schedule, loop settings).
rt::TrainSettings lower_train_settings(const TrainConfig& train);

// A parameter's initializer (the param node's attributes) as the runtime's Init:
// kaiming and xavier become normal or uniform with their bounds computed.
rt::Init lower_init(const Attrs& param_attrs);

}  // namespace modelc
