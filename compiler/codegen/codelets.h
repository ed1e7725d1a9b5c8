// The kernel compiler: one LLVM kernel per fusion group (or per elementwise / reduction /
// row op node), compiled for the host with ORC LLJIT and, when asked, for NVPTX.
//
// Each kernel is a body `void body(i64 i, ptr buffers, ptr sizes)` that processes one work
// item, built by one emitter per group from target-neutral code (codelet_emit.h), plus a
// wrapper that knows the target: on the host a loop over [begin, end) with the body
// inlined (so it vectorizes), exposed with the runtime's ABI (rt::HostCodeletFn); on a GPU a
// kernel with the same name and arguments whose threads or blocks share the work items
// (grid-stride loops, 128-bit accesses where alignment allows, block reductions with warp
// shuffles and shared memory; runtime/base/program.h documents the launch). Buffers at run
// time: the node's inputs in order (nullptr for an absent optional input), then its
// outputs. Sizes that depend on symbols come from the kernel's size table.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "compiler/lowered/sizes.h"
#include "compiler/ir/graph.h"
#include "compiler/passes/fusion.h"
#include "runtime/base/program.h"

namespace modelc {

struct EmittedCodelet {
  uint32_t codelet;                  // index into the vector finish() returns
  std::vector<rt::SizeExpr> sizes;   // the size table the kernel reads
  rt::SizeExpr extent;               // work items
  int64_t grain;                     // smallest worthwhile chunk of work items
  // A two-phase reduction (a reduce group with few outputs over many elements; see
  // compiler/codegen/codelets_reduce.cc): `partial` must run first. Its buffers are the
  // group's inputs, then the scratch buffer (its one output: `scratch_elements` values of
  // `scratch_type`); this kernel's are the group's inputs, the scratch buffer, then the
  // group's outputs.
  struct Partial {
    uint32_t codelet;
    std::vector<rt::SizeExpr> sizes;
    rt::SizeExpr extent;
    int64_t grain;
    DType scratch_type;
    int64_t scratch_elements;
  };
  std::optional<Partial> partial;
};

struct EmitOptions {
  bool training = true;  // false: dropout is the identity (the eval function)
};

class CodeletCompiler {
 public:
  // gpu: also emit every kernel's GPU flavour, for ptx() (lowering asks for it when
  // LowerOptions::ptx_target is set).
  explicit CodeletCompiler(SymbolTable& symbols, bool gpu = false);
  ~CodeletCompiler();
  CodeletCompiler(const CodeletCompiler&) = delete;
  CodeletCompiler& operator=(const CodeletCompiler&) = delete;

  // True for the ops this compiler emits, with f32 / i32 / bool tensors only: every op with
  // a scalar definition in the registry whose fusion kind is elementwise or broadcast, and
  // cast, dropout, causal_mask, one_hot, broadcast_to, sum/mean/max, softmax, log_softmax, layer_norm,
  // cross_entropy.
  static bool handles(const Graph& g, NodeId id);
  // Emits node id's kernel (two for a two-phase reduction: EmittedCodelet::partial). Throws
  // InternalError for a node handles() refuses.
  // Semantics beyond the reference: dropout is always in training mode (an eval lowering
  // drops the node); cross_entropy with a target outside [0, C) gives NaN.
  EmittedCodelet emit(const Graph& g, NodeId id, const EmitOptions& options = {});
  // Emits one kernel for a fusion group (compiler/passes/fusion.h; codelets_fused.cc), or
  // two for a two-phase reduction (EmittedCodelet::partial). Buffers at run time: the
  // group's inputs, then its outputs, in the group's order. Nodes the plan marks inlined
  // are recomputed where they are read.
  EmittedCodelet emit_group(const Graph& g, const FusionGroup& group, const std::vector<bool>& inlined,
                           const EmitOptions& options = {});
  // One kernel for several loop groups (FusionPlan::horizontal: the optimizer updates of
  // every parameter), each a segment of the kernel's work items in order. Its buffers are
  // every group's inputs in order, then every group's outputs in order.
  EmittedCodelet emit_horizontal(const Graph& g, const std::vector<const FusionGroup*>& groups,
                                const std::vector<bool>& inlined, const EmitOptions& options = {});
  // Compiles everything emitted for the host (O3, vectorized, host CPU and features; or
  // takes the machine code from the compiled-code cache, compiler/codegen/code_cache.h),
  // links it with ORC LLJIT, returns the kernels in order (name, host fn pointer, IR text,
  // GPU launch shape) and stores the owner of the machine code (the LLJIT) in `code`. The
  // compiler is spent afterwards. Kernels whose host code is identical share one
  // definition (each keeps its name).
  std::vector<rt::CodeletDesc> finish(std::shared_ptr<void>& code);
  std::string module_text() const;  // the LLVM IR of everything emitted so far
  // The GPU flavour's LLVM IR (before libdevice and optimisation; what ptx() compiles);
  // empty for a compiler without gpu, or after finish().
  std::string gpu_module_text() const;

  // The GPU flavour of every kernel as one PTX module for `sm` (e.g. "sm_80", "sm_90"):
  // entry points `NAME(buffers, sizes, begin, end)` launched as the CodeletDesc says
  // (compiler/codegen/nvptx.cc). Math functions come from libdevice ($MODELC_LIBDEVICE, else
  // the CUDA toolkit's; a UserError when it is needed and missing). Call before finish(),
  // on a compiler constructed with gpu = true (else InternalError); may be called again
  // for another target.
  std::string ptx(const std::string& sm = "sm_80") const;

  // The host kernels as a shared object (compiler/codegen/object.cc): the object finish()
  // loads (compiled once for both), linked by the system linker; returns the bytes of the
  // .so, whose exported symbols are the kernels' names. Call before finish(); no kernel can
  // be emitted afterwards.
  std::string shared_object();

  // The compiler's state (compiler/codegen/codelets_impl.h: the kernel compiler's own files
  // only).
  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace modelc
