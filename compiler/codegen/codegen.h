// Code generation, the pipeline's last pass: the codelets of a lowered Program
// (compiler/lowered/lower.h) are emitted as LLVM IR (compiler/codegen/codelets.h),
// compiled for the host with ORC and, for a GPU target, for NVPTX.
//
// Reads: a Lowered program whose sites name the fusion groups of its functions. Changes
// only the codelet instructions' codelet, size table, extent and grain and the Program's
// code, codelets and PTX: buffers and instructions stay as the memory plan sized them
// (an InternalError if a two-phase reduction's emitted scratch disagrees with the plan's).
#pragma once

#include <string>

#include "compiler/lowered/lower.h"

namespace modelc {

struct CodegenOptions {
  // Also compile the codelets for NVPTX into Program::ptx, for this target ("sm_80",
  // "sm_90"); empty: no PTX.
  std::string ptx_target;
  // When set, also emits the host codelets as a shared object (the bytes of a .so whose
  // exported symbols are the codelets' names) into *shared_object, for a .plan file.
  std::string* shared_object = nullptr;
  // When set, receives the codelets' target-neutral LLVM module text (--emit=llvm).
  std::string* llvm_text = nullptr;
};

void generate_code(Lowered& lowered, const CodegenOptions& options = {});

}  // namespace modelc
