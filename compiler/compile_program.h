// From a .model file to the runtime's Program, in process: what `modelrun` runs and what
// a .plan file will hold. Load, elaborate, build the train step (when the model has a
// train section), lower and compile the kernels for the host.
#pragma once

#include <memory>
#include <string>

#include "compiler/compile.h"
#include "runtime/program.h"

namespace modelc {

struct ProgramOptions {
  bool train = true;  // false: the eval function only, even when there is a train section
  bool fusion = true;  // false: one kernel per node (-fno-fusion)
  std::string ptx_target;              // non-empty: also compile PTX for it (LowerOptions)
  std::string* shared_object = nullptr;  // non-null: also emit the host code as a .so
  std::string* llvm_text = nullptr;      // non-null: receives the kernels' LLVM IR text
};

// Problems go to c.diags() (user errors in the model) or are thrown as UserError (what the
// later stages refuse); returns null when diagnostics were reported.
std::shared_ptr<rt::Program> compile_program(Compilation& c, const std::string& path,
                                             const ProgramOptions& options = {});

}  // namespace modelc
