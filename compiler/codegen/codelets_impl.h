// Internal to the kernel compiler: the state behind CodeletCompiler (compiler/codegen/codelets.h),
// shared by the host path (kernels.cc) and the NVPTX path (nvptx.cc).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <llvm/ExecutionEngine/Orc/ThreadSafeModule.h>
#include <llvm/IR/Module.h>
#include <llvm/Target/TargetMachine.h>

#include "compiler/codegen/codelet_emit.h"
#include "compiler/codegen/codelets.h"

namespace modelc {

struct CodeletCompiler::Impl {
  Impl(SymbolTable& s, bool gpu);

  SymbolTable& symbols;
  llvm::orc::ThreadSafeContext tsc;  // owns the LLVMContext; declared before the modules
  std::unique_ptr<llvm::Module> module;      // the host flavour of every kernel
  std::unique_ptr<llvm::Module> gpu_module;  // the GPU flavour (nvptx64), when wanted
  struct Codelet {
    std::string name;     // the host entry point (and the GPU kernel's name)
    llvm::Function* body;  // host flavour: void(i64 i, ptr buffers, ptr sizes, i64 row, i64 col)
    rt::GpuMapping gpu_mapping = rt::GpuMapping::Thread;
    uint32_t gpu_block = 256;  // threads per block
    uint32_t nodes = 1;    // IR nodes fused into it
  };
  std::vector<Codelet> codelets;
  bool finished = false;
  std::string final_text;  // module_text() once finish() took the module
};

// The O3 pipeline with the loop and SLP vectorizers (unless !vectorize), tuned for `tm`;
// with `libmvec`, loops over llvm.exp/log/pow/... may call glibc's vector math functions
// (x86 hosts only).
void optimize_module(llvm::Module& m, llvm::TargetMachine* tm, bool libmvec, bool vectorize = true);

// Declares `void name(ptr buffers, ptr sizes, i64 begin, i64 end)` (nounwind; the two
// tables noalias, readonly, nocapture), the entry point of a kernel on either target.
llvm::Function* declare_kernel_entry(llvm::Module& m, const std::string& name);

// Emits at b's insertion point the host loop that runs a body over work items
// [begin, end) (nothing when begin >= end): one loop, or with `split` rows of n work items
// and columns inside. The insertion point continues after it.
void emit_host_loop(llvm::IRBuilder<>& b, llvm::Function* body, llvm::Value* buffers, llvm::Value* sizes,
                    llvm::Value* begin, llvm::Value* end, std::optional<CodeletBuilder::Split> split);
// Builds the body's loop wrapper `void name(ptr buffers, ptr sizes, i64 begin, i64 end)`:
// one loop over the work items, or with `split` rows of n work items and columns inside.
llvm::Function* emit_host_wrapper(llvm::Module& m, llvm::Function* body, const std::string& name,
                                  std::optional<CodeletBuilder::Split> split = std::nullopt);

// A segment of a horizontal kernel (CodeletCompiler::emit_horizontal): its body runs over
// its own work items [0, sizes[extent_slot]); the segments lie end to end in the kernel's
// extent, in order.
struct Segment {
  llvm::Function* body;
  std::optional<CodeletBuilder::Split> split;  // host only
  size_t extent_slot;
};
// The host wrapper of a horizontal kernel: for each segment, the part of [begin, end) that
// falls in it, run by emit_host_loop.
llvm::Function* emit_host_horizontal(llvm::Module& m, const std::string& name, const std::vector<Segment>& segments);

// The GPU side (compiler/codegen/nvptx.cc, gpu_libdevice.cc).
// An empty module for the nvptx64-nvidia-cuda triple with its data layout.
std::unique_ptr<llvm::Module> new_gpu_module(llvm::LLVMContext& ctx);
// How a group's kernel (for a reduce group: the kernel of `phase` under `plan`) runs on a
// GPU: block-mapped for row groups and for reductions over many elements per work item (or
// with few work items), with a block size from those elements; else one work item per
// thread, 256 threads per block.
GpuShape choose_gpu_shape(const Graph& g, const FusionGroup& grp, const ReducePlan& plan = {},
                          ReducePhase phase = ReducePhase::Whole);
// Builds the GPU kernel `void name(ptr buffers, ptr sizes, i64 begin, i64 end)` around the
// GPU flavour of a body (runtime/base/program.h documents the ABI). `direct`: the buffers the
// body reads or writes at the work item's own index (candidates for 128-bit accesses).
llvm::Function* emit_gpu_kernel(llvm::Module& m, llvm::Function* body, const std::string& name, GpuShape shape,
                                const std::vector<bool>& direct);
// The GPU kernel of a horizontal kernel (thread-mapped, `block` threads): each thread
// walks every segment's part of [begin, end) with a grid stride (no 128-bit path).
llvm::Function* emit_gpu_horizontal(llvm::Module& m, const std::string& name, const std::vector<Segment>& segments,
                                    uint32_t block);
// Replaces the C library and LLVM math calls the NVPTX backend cannot lower by libdevice's
// __nv_* functions and links those from libdevice (internalized; the module flag
// nvvm-reflect-ftz = 0). Throws UserError when libdevice is needed and not found.
void link_libdevice(llvm::Module& m);
// Where libdevice is looked for: $MODELC_LIBDEVICE when set, else the CUDA toolkit's.
std::vector<std::string> libdevice_candidates();

}  // namespace modelc
