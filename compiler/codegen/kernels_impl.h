// Internal to the kernel compiler: the state behind KernelCompiler (compiler/codegen/kernels.h),
// shared by the host path (kernels.cc) and the NVPTX path (nvptx.cc).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <llvm/ExecutionEngine/Orc/ThreadSafeModule.h>
#include <llvm/IR/Module.h>
#include <llvm/Target/TargetMachine.h>

#include "compiler/codegen/kernels.h"

namespace modelc {

struct KernelCompiler::Impl {
  explicit Impl(SymbolTable& s);

  SymbolTable& symbols;
  llvm::orc::ThreadSafeContext tsc;  // owns the LLVMContext; declared before the module
  std::unique_ptr<llvm::Module> module;
  struct Kernel {
    std::string name;     // the host entry point (and the GPU kernel's name)
    llvm::Function* body;  // target-neutral: void(i64 i, ptr buffers, ptr sizes)
    bool row = false;      // a row group: on a GPU one work item per block
    uint32_t nodes = 1;    // IR nodes fused into it
  };
  std::vector<Kernel> kernels;
  bool finished = false;
  std::string final_text;  // module_text() once finish() took the module
};

// The O3 pipeline with the loop and SLP vectorizers, tuned for `tm`; with `libmvec`, loops
// over llvm.exp/log/pow/... may call glibc's vector math functions (x86 hosts only).
void optimize_module(llvm::Module& m, llvm::TargetMachine* tm, bool libmvec);

// Builds the body's loop wrapper `void name(ptr buffers, ptr sizes, i64 begin, i64 end)`.
llvm::Function* emit_host_wrapper(llvm::Module& m, llvm::Function* body, const std::string& name);

}  // namespace modelc
