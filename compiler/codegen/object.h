// The host target of the kernel compiler's machine code, for .plan files.
//
// CodeletCompiler::shared_object() (compiler/codegen/object.cc) compiles for the host CPU and
// its features, exactly as finish() does; host_target() says which, so that the plan can
// record it (rt::PlanTarget, runtime/session/plan.h) and a runtime on a CPU without those features
// refuses the plan instead of dying of an illegal instruction.
#pragma once

#include "runtime/session/plan.h"

namespace modelc {

// The architecture ("x86_64"), LLVM's name for the host CPU ("sapphirerapids") and the
// target features enabled for it (LLVM's names, sorted: "avx", "avx2", "fma", ...).
// Throws InternalError when LLVM cannot describe the host.
rt::PlanTarget host_target();

}  // namespace modelc
