// The memory plan's input: the functions' graphs and fusion plans become the runtime
// Program's buffers and instructions (runtime/base/program.h), without code.
//
// Reads: per function a verified graph and its fusion plan (compiler/passes/fusion.h), and
// the train section. Each fused group becomes one instruction: a codelet (elementwise,
// reduction and row groups; a two-phase reduction is two, with the scratch buffer between
// them, ReducePlan) or a library call the runtime implements under the op's own name, with
// the node's integer and float attributes. Params and optimizer state are persistent
// buffers shared by every function; a function's updates write them back after it ran.
// Guarantees: the buffers and instructions are the final Program's; code generation
// (compiler/codegen/codegen.h) only fills in the codelets of the `sites`, so the memory
// plan sized here (runtime/execution/memory_plan.h) is the one that runs.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "compiler/ir/graph.h"
#include "compiler/ir/train_config.h"
#include "compiler/lowered/sizes.h"
#include "compiler/passes/fusion.h"
#include "runtime/base/program.h"

namespace modelc {

struct LowerFunction {
  std::string name;  // "train_step", "eval"
  const Graph* graph = nullptr;
  const FusionPlan* plan = nullptr;
  bool training = false;  // dropout active
};

// An instruction whose codelet code generation emits: fusion group `group` of the
// function's plan, or with `horizontal` the plan's horizontal run `group`.
struct CodeletSite {
  size_t function = 0;  // index into the lowered functions (and Program::functions)
  size_t instr = 0;
  std::optional<size_t> partial;  // a two-phase reduction's Partial instruction, before `instr`
  size_t group = 0;
  bool horizontal = false;
};

struct Lowered {
  std::shared_ptr<rt::Program> program;  // buffers, instructions, symbols, train settings
  SymbolTable symbols;                   // the Program's runtime symbols, for code generation
  std::vector<LowerFunction> functions;
  std::vector<CodeletSite> sites;
  // By buffer id: the graph value it holds and the function whose graph it is in (empty for
  // params and states, which every function shares), for the memory report
  // (compiler/lowered/memory_report.h). A two-phase reduction's scratch holds its
  // reduction node's value.
  std::vector<std::pair<std::string, Value>> buffer_values;
};

// `dims`: the model's dims (the free ones become runtime symbols). Throws UserError for what
// the runtime cannot run, InternalError for an inconsistent graph.
Lowered lower(const std::string& model, const std::vector<DimDecl>& dims, std::vector<LowerFunction> functions,
              const TrainConfig* train, const std::function<std::string(SourceLoc)>& describe);

// The runtime's view of the train section (data, optimizer, schedule, loop settings).
rt::TrainSettings lower_train_settings(const TrainConfig& train);

// A parameter's initializer (the param node's attributes) as the runtime's Init:
// kaiming and xavier become normal or uniform with their bounds computed.
rt::Init lower_init(const Attrs& param_attrs);

}  // namespace modelc
