// Internal to the kernel compiler: the state behind CodeletCompiler (compiler/codegen/codelets.h),
// shared by the host path (kernels.cc) and the NVPTX path (nvptx.cc).
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include <llvm/ExecutionEngine/Orc/JITTargetMachineBuilder.h>
#include <llvm/ExecutionEngine/Orc/ThreadSafeModule.h>
#include <llvm/IR/Module.h>
#include <llvm/Target/TargetMachine.h>

#include "compiler/codegen/code_cache.h"
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
    // The host function that defines it: `name`, or for a kernel whose host code is
    // identical to an earlier one's (share_identical) that one's, `name` an alias of it.
    std::string symbol;
    llvm::Function* body;  // host flavour: void(i64 i, ptr buffers, ptr sizes, i64 row, i64 col)
    rt::GpuMapping gpu_mapping = rt::GpuMapping::Thread;
    uint32_t gpu_block = 256;  // threads per block
    uint32_t nodes = 1;    // IR nodes fused into it
    std::string source;    // the body's and the entry's IR, kept when the module is compiled
  };
  std::vector<Codelet> codelets;
  // The host code of each defining kernel, its own name replaced: the key that finds an
  // identical kernel (the blocks of a transformer emit the same kernels again).
  std::unordered_map<std::string, uint32_t> by_text;
  std::unordered_map<std::string, llvm::Function*> bodies_by_text;  // share_body's
  CodeCache cache = CodeCache::from_environment();
  // The host module compiled to a relocatable object (host_object); the module is then
  // optimised and takes no more kernels.
  std::optional<std::string> object;
  bool veclib = false;  // the object calls glibc's vector math library (libmvec.so.1)
  bool finished = false;
  std::string final_text;  // module_text() once the module was compiled
  bool sealed() const { return finished || object.has_value(); }
};

// The printed IR of a function.
std::string function_text(const llvm::Function* f);

// When the host kernel k just emitted (`entry`, named k.name, and the functions it calls) is
// identical, up to its name, to an earlier kernel's, removes the new functions, makes k.name
// an alias of the earlier entry and gives k that kernel's symbol and body; else records it.
// Only the host module is shared: each GPU kernel keeps its own definition.
void share_identical(CodeletCompiler::Impl& im, CodeletCompiler::Impl::Codelet& k, llvm::Function* entry);

// An earlier body of the host module identical to `body` up to its name (and then `body`
// removed), else `body`, recorded.
llvm::Function* share_body(CodeletCompiler::Impl& im, llvm::Function* body);

// The host module optimised (O3, vectorised, for the host CPU and its features) and emitted
// as a relocatable position-independent object, or that object from im.cache when an entry
// has the same code_key; computed once (compiler/codegen/object.cc). Keeps every kernel's
// source and the module's text first. Both finish() (through LLJIT) and shared_object()
// (through the system linker) use this object.
const std::string& host_object(CodeletCompiler::Impl& im);
// The host as both paths compile for it: its CPU and features, CodeGenOptLevel::Aggressive.
llvm::orc::JITTargetMachineBuilder host_machine_builder();
// The GNU build id (hex) of the binary that contains this compiler; when it has none, its
// path, size and modification time. Part of every code_key.
const std::string& compiler_build_id();

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
  // Host only: the body reads its own tables, buffer k being the kernel's buffer
  // buffers[k] and size slot k the kernel's slot size_base + k, so that the segments of
  // parameters alike share one body (share_body).
  std::vector<size_t> buffers;
  size_t size_base = 0;
};
// The host wrapper of a horizontal kernel: for each segment, its buffer table gathered from
// the kernel's, then the part of [begin, end) that falls in it, run by emit_host_loop.
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
