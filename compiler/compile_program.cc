#include "compiler/compile_program.h"

#include "compiler/codegen/lower.h"
#include "compiler/ir/verifier.h"
#include "compiler/passes/train_step.h"

namespace modelc {

std::shared_ptr<rt::Program> compile_program(Compilation& c, const std::string& path,
                                             const ProgramOptions& options) {
  if (!c.load(path)) return nullptr;
  Elaborated e = c.elaborate();
  if (!e.graph || c.diags().has_errors()) return nullptr;
  std::unique_ptr<Graph> step;
  const TrainConfig* train = e.train ? &*e.train : nullptr;
  if (options.train && train) {
    step = std::make_unique<Graph>(build_train_step(*e.graph, train_step_options(*train)));
    if (auto problems = verify_graph(*step); !problems.empty())
      throw InternalError("the train-step graph does not verify: " + problems.front());
  }
  LowerOptions lo;
  lo.describe = [&c](SourceLoc loc) { return c.sources().describe(loc); };
  lo.fusion = options.fusion;
  lo.ptx_target = options.ptx_target;
  lo.shared_object = options.shared_object;
  lo.llvm_text = options.llvm_text;
  return lower_program(*e.graph, step.get(), train, lo);
}

}  // namespace modelc
