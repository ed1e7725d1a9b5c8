// The kernel compiler's host path: which ops it handles, emission of a body and its host
// loop per node, kernels with identical host code shared (share_identical, share_body), the
// optimisation pipeline (O3 with the loop and SLP vectorizers, for the host CPU and its
// features) and the compiled object loaded with ORC LLJIT (finish).
#include "compiler/codegen/codelets.h"

#include <algorithm>

#include <fmt/format.h>
#include <llvm/Analysis/TargetLibraryInfo.h>
#include <llvm/ExecutionEngine/Orc/ExecutionUtils.h>
#include <llvm/ExecutionEngine/Orc/JITTargetMachineBuilder.h>
#include <llvm/ExecutionEngine/Orc/LLJIT.h>
#include <llvm/Passes/PassBuilder.h>
#include <llvm/Support/MemoryBuffer.h>
#include <llvm/Support/raw_ostream.h>
#include <llvm/Target/TargetMachine.h>

#include "compiler/codegen/codelets_impl.h"
#include "compiler/ir/op_registry.h"

namespace modelc {
namespace {

template <class T>
T checked(llvm::Expected<T> v, const char* what) {
  if (!v) throw InternalError(fmt::format("kernel compiler: {}: {}", what, llvm::toString(v.takeError())));
  return std::move(*v);
}

void check(llvm::Error e, const char* what) {
  if (e) throw InternalError(fmt::format("kernel compiler: {}: {}", what, llvm::toString(std::move(e))));
}

// The functions `entry` calls, directly or not, that the module defines (entry first, then
// in the order they are met); false when any of them references a global other than a
// function: their text is then all there is to their code.
bool reachable(llvm::Function* entry, std::vector<llvm::Function*>& fns) {
  fns = {entry};
  for (size_t i = 0; i < fns.size(); ++i)
    for (const llvm::BasicBlock& bb : *fns[i])
      for (const llvm::Instruction& in : bb)
        for (const llvm::Value* op : in.operands()) {
          const auto* gv = llvm::dyn_cast<llvm::GlobalValue>(op);
          if (!gv) continue;
          auto* callee = const_cast<llvm::Function*>(llvm::dyn_cast<llvm::Function>(gv));
          if (!callee) return false;
          if (!callee->isDeclaration() && std::find(fns.begin(), fns.end(), callee) == fns.end()) fns.push_back(callee);
        }
  return true;
}

}  // namespace

std::string function_text(const llvm::Function* f) {
  std::string s;
  llvm::raw_string_ostream os(s);
  f->print(os);
  return s;
}

// `text` with every occurrence of `name` replaced by "@@".
std::string without_name(const std::string& text, const std::string& name) {
  std::string key;
  for (size_t pos = 0;;) {
    const size_t at = text.find(name, pos);
    key.append(text, pos, at == std::string::npos ? std::string::npos : at - pos);
    if (at == std::string::npos) return key;
    key += "@@";
    pos = at + name.size();
  }
}

llvm::Function* share_body(CodeletCompiler::Impl& im, llvm::Function* body) {
  std::vector<llvm::Function*> fns;
  if (!reachable(body, fns) || fns.size() != 1) return body;
  auto [it, inserted] = im.bodies_by_text.emplace(without_name(function_text(body), body->getName().str()), body);
  if (inserted) return body;
  body->eraseFromParent();
  return it->second;
}

void share_identical(CodeletCompiler::Impl& im, CodeletCompiler::Impl::Codelet& k, llvm::Function* entry) {
  const std::string& name = k.name;
  std::vector<llvm::Function*> fns;
  if (!reachable(entry, fns)) return;
  std::string text;
  for (const llvm::Function* f : fns) text += function_text(f);
  // The kernel's own name replaced (its functions' names start with it; a function it
  // shares with an earlier kernel keeps that kernel's name, which the same code calls too).
  auto [it, inserted] = im.by_text.emplace(without_name(text, name), static_cast<uint32_t>(im.codelets.size()));
  if (inserted) return;
  const CodeletCompiler::Impl::Codelet& earlier = im.codelets.at(it->second);
  llvm::Function* target = im.module->getFunction(earlier.symbol);
  if (!target) throw InternalError(fmt::format("kernel compiler: kernel {} has no host function", it->second));
  entry->eraseFromParent();
  for (size_t f = 1; f < fns.size(); ++f)  // callers before callees; what an earlier kernel calls stays
    if (fns[f]->use_empty()) fns[f]->eraseFromParent();
  llvm::GlobalAlias::create(target->getFunctionType(), 0, llvm::GlobalValue::ExternalLinkage, name, target,
                            im.module.get());
  k.symbol = earlier.symbol;
  k.body = earlier.body;
}

void optimize_module(llvm::Module& m, llvm::TargetMachine* tm, bool libmvec, bool vectorize) {
  llvm::PipelineTuningOptions pto;
  pto.LoopVectorization = vectorize;
  pto.SLPVectorization = vectorize;
  pto.LoopUnrolling = true;
  llvm::LoopAnalysisManager lam;
  llvm::FunctionAnalysisManager fam;
  llvm::CGSCCAnalysisManager cgam;
  llvm::ModuleAnalysisManager mam;
  llvm::PassBuilder pb(tm, pto);
  if (libmvec) {
    llvm::TargetLibraryInfoImpl tlii(llvm::Triple(m.getTargetTriple()));
    tlii.addVectorizableFunctionsFromVecLib(llvm::TargetLibraryInfoImpl::LIBMVEC_X86, llvm::Triple(m.getTargetTriple()));
    fam.registerPass([tlii] { return llvm::TargetLibraryAnalysis(tlii); });
  }
  pb.registerModuleAnalyses(mam);
  pb.registerCGSCCAnalyses(cgam);
  pb.registerFunctionAnalyses(fam);
  pb.registerLoopAnalyses(lam);
  pb.crossRegisterProxies(lam, fam, cgam, mam);
  pb.buildPerModuleDefaultPipeline(llvm::OptimizationLevel::O3).run(m, mam);
}

CodeletCompiler::Impl::Impl(SymbolTable& s, bool gpu)
    : symbols(s), tsc(std::make_unique<llvm::LLVMContext>()),
      module(std::make_unique<llvm::Module>("modelc_kernels", *tsc.getContext())) {
  if (gpu) gpu_module = new_gpu_module(*tsc.getContext());
}

llvm::Function* declare_kernel_entry(llvm::Module& m, const std::string& name) {
  llvm::IRBuilder<> b(m.getContext());
  llvm::Type* ptr = b.getPtrTy();
  auto* ty = llvm::FunctionType::get(b.getVoidTy(), {ptr, ptr, b.getInt64Ty(), b.getInt64Ty()}, false);
  auto* f = llvm::Function::Create(ty, llvm::Function::ExternalLinkage, name, m);
  f->addFnAttr(llvm::Attribute::NoUnwind);
  for (unsigned a : {0u, 1u}) {
    f->addParamAttr(a, llvm::Attribute::NoAlias);
    f->addParamAttr(a, llvm::Attribute::ReadOnly);
    f->addParamAttr(a, llvm::Attribute::NoCapture);
  }
  const char* names[] = {"buffers", "sizes", "begin", "end"};
  for (unsigned a = 0; a < 4; ++a) f->getArg(a)->setName(names[a]);
  return f;
}

void emit_host_loop(llvm::IRBuilder<>& b, llvm::Function* body, llvm::Value* buffers, llvm::Value* sizes,
                    llvm::Value* begin, llvm::Value* end, std::optional<CodeletBuilder::Split> split) {
  llvm::LLVMContext& ctx = b.getContext();
  llvm::Function* f = b.GetInsertBlock()->getParent();
  llvm::Type* i64 = b.getInt64Ty();
  llvm::BasicBlock* entry = b.GetInsertBlock();
  auto* done = llvm::BasicBlock::Create(ctx, "done", f);
  if (!split) {
    // for (i = begin; i < end; ++i) body(i)
    auto* loop = llvm::BasicBlock::Create(ctx, "loop", f, done);
    b.CreateCondBr(b.CreateICmpSLT(begin, end), loop, done);
    b.SetInsertPoint(loop);
    llvm::PHINode* i = b.CreatePHI(i64, 2, "i");
    i->addIncoming(begin, entry);
    llvm::Value* zero = b.getInt64(0);
    b.CreateCall(body, {i, buffers, sizes, zero, zero});
    llvm::Value* next = b.CreateAdd(i, b.getInt64(1), "", true, true);
    i->addIncoming(next, loop);
    b.CreateCondBr(b.CreateICmpSLT(next, end), loop, done);
  } else {
    // Rows of n work items from begin's row: for each, the columns [c0, min(n, end - base))
    // (c0 is begin's column in the first row, then 0), with i = base + col.
    auto* start = llvm::BasicBlock::Create(ctx, "start", f, done);
    auto* rows = llvm::BasicBlock::Create(ctx, "rows", f, done);
    auto* cols = llvm::BasicBlock::Create(ctx, "cols", f, done);
    auto* next_row = llvm::BasicBlock::Create(ctx, "next_row", f, done);
    b.CreateCondBr(b.CreateICmpSLT(begin, end), start, done);  // an empty range never divides by n
    b.SetInsertPoint(start);
    llvm::Value* n = b.getInt64(static_cast<uint64_t>(split->constant));
    if (split->constant <= 0) n = b.CreateLoad(i64, b.CreateConstInBoundsGEP1_64(i64, sizes, split->slot), "n");
    llvm::Value* r0 = b.CreateUDiv(begin, n, "r0");
    llvm::Value* c0 = b.CreateSub(begin, b.CreateMul(r0, n), "c0");
    b.CreateBr(rows);
    b.SetInsertPoint(rows);
    llvm::PHINode* row = b.CreatePHI(i64, 2, "row");
    llvm::PHINode* first = b.CreatePHI(i64, 2, "first");
    row->addIncoming(r0, start);
    first->addIncoming(c0, start);
    llvm::Value* base = b.CreateMul(row, n, "base", true, true);
    llvm::Value* left = b.CreateSub(end, base);
    llvm::Value* last = b.CreateSelect(b.CreateICmpSLT(left, n), left, n, "last");
    b.CreateBr(cols);
    b.SetInsertPoint(cols);
    llvm::PHINode* col = b.CreatePHI(i64, 2, "col");
    col->addIncoming(first, rows);
    b.CreateCall(body, {b.CreateAdd(base, col, "i", true, true), buffers, sizes, row, col});
    llvm::Value* col_next = b.CreateAdd(col, b.getInt64(1), "", true, true);
    col->addIncoming(col_next, cols);
    b.CreateCondBr(b.CreateICmpSLT(col_next, last), cols, next_row);
    b.SetInsertPoint(next_row);
    llvm::Value* row_next = b.CreateAdd(row, b.getInt64(1), "", true, true);
    row->addIncoming(row_next, next_row);
    first->addIncoming(b.getInt64(0), next_row);
    b.CreateCondBr(b.CreateICmpSLT(b.CreateAdd(base, n, "", true, true), end), rows, done);
  }
  b.SetInsertPoint(done);
}

llvm::Function* emit_host_wrapper(llvm::Module& m, llvm::Function* body, const std::string& name,
                                  std::optional<CodeletBuilder::Split> split) {
  llvm::IRBuilder<> b(m.getContext());
  llvm::Function* f = declare_kernel_entry(m, name);
  b.SetInsertPoint(llvm::BasicBlock::Create(m.getContext(), "entry", f));
  emit_host_loop(b, body, f->getArg(0), f->getArg(1), f->getArg(2), f->getArg(3), split);
  b.CreateRetVoid();
  return f;
}

// The loop over a segment's work items with its own tables: a function of its own, shared
// by the segments with the same body and split, and not inlined (the body is compiled once).
llvm::Function* segment_loop(llvm::Module& m, const Segment& s) {
  std::string name = s.body->getName().str() + ".loop";
  if (s.split) name += fmt::format("_{}_{}", s.split->constant, s.split->slot);
  if (llvm::Function* f = m.getFunction(name)) return f;
  llvm::Function* f = emit_host_wrapper(m, s.body, name, s.split);
  f->setLinkage(llvm::GlobalValue::InternalLinkage);
  f->addFnAttr(llvm::Attribute::NoInline);
  return f;
}

llvm::Function* emit_host_horizontal(llvm::Module& m, const std::string& name, const std::vector<Segment>& segments) {
  llvm::IRBuilder<> b(m.getContext());
  llvm::Function* f = declare_kernel_entry(m, name);
  llvm::Value *buffers = f->getArg(0), *sizes = f->getArg(1), *begin = f->getArg(2), *end = f->getArg(3);
  b.SetInsertPoint(llvm::BasicBlock::Create(m.getContext(), "entry", f));
  llvm::Type* i64 = b.getInt64Ty();
  llvm::Type* ptr = b.getPtrTy();
  // Every segment's tables first, in the entry block (the loops add blocks).
  std::vector<std::pair<llvm::Value*, llvm::Value*>> tables;
  for (const Segment& s : segments) {
    if (s.buffers.empty()) {
      tables.emplace_back(buffers, sizes);
      continue;
    }
    llvm::Value* local = b.CreateAlloca(llvm::ArrayType::get(ptr, s.buffers.size()), nullptr, "segment.buffers");
    for (size_t k = 0; k < s.buffers.size(); ++k) {
      llvm::Value* p = b.CreateLoad(ptr, b.CreateConstInBoundsGEP1_64(ptr, buffers, s.buffers[k]));
      b.CreateStore(p, b.CreateConstInBoundsGEP1_64(ptr, local, k));
    }
    tables.emplace_back(local, b.CreateConstInBoundsGEP1_64(i64, sizes, s.size_base, "segment.sizes"));
  }
  llvm::Value* off = b.getInt64(0);
  for (size_t k = 0; k < segments.size(); ++k) {
    const Segment& s = segments[k];
    llvm::Value* n = b.CreateLoad(i64, b.CreateConstInBoundsGEP1_64(i64, sizes, s.extent_slot), "segment");
    llvm::Value* lo = b.CreateSub(begin, off);
    lo = b.CreateSelect(b.CreateICmpSLT(lo, b.getInt64(0)), b.getInt64(0), lo);
    llvm::Value* hi = b.CreateSub(end, off);
    hi = b.CreateSelect(b.CreateICmpSLT(hi, n), hi, n);
    if (s.buffers.empty()) emit_host_loop(b, s.body, buffers, sizes, lo, hi, s.split);
    else b.CreateCall(segment_loop(m, s), {tables[k].first, tables[k].second, lo, hi});
    off = b.CreateAdd(off, n);
  }
  b.CreateRetVoid();
  return f;
}

CodeletCompiler::CodeletCompiler(SymbolTable& symbols, bool gpu) : impl_(std::make_unique<Impl>(symbols, gpu)) {}
CodeletCompiler::~CodeletCompiler() = default;

bool CodeletCompiler::handles(const Graph& g, NodeId id) {
  const Node& n = g.node(id);
  // Every dtype: f16 and bf16 are stored as bits and computed on as f32 (low_float.cc).
  // The record says which ops are library calls; the others have a scalar definition or a
  // template of code generation's own (codelets_elementwise.cc, codelets_reduce.cc).
  if (n.outputs.size() != 1) return false;
  const OpInfo& info = op_info(n.op);
  if (info.fusion == FusionKind::Source) return n.op == OpKind::Constant && n.attrs.has("value");
  return info.math != MathKind::Library;
}

EmittedCodelet CodeletCompiler::emit(const Graph& g, NodeId id, const EmitOptions& options) {
  if (!handles(g, id))
    throw InternalError(fmt::format("kernel compiler: no kernel for node {} ({})", id, op_name(g.node(id).op)));
  const Node& n = g.node(id);
  FusionGroup grp;
  const FusionKind kind = op_info(n.op).fusion;
  const bool reduction = kind == FusionKind::Reduction || kind == FusionKind::Row;
  grp.kind = kind == FusionKind::Row ? FusionGroup::Kind::Row
             : reduction            ? FusionGroup::Kind::Reduce
                                    : FusionGroup::Kind::Loop;
  grp.root = id;
  if (reduction) grp.anchor = id;
  grp.nodes = {id};
  for (const Value& v : n.inputs) grp.inputs.push_back(v);  // an absent input keeps its slot
  grp.outputs = {Value{id, 0}};
  return emit_group(g, grp, std::vector<bool>(g.nodes.size(), false), options);
}

std::string CodeletCompiler::module_text() const {
  if (impl_->sealed()) return impl_->final_text;
  std::string s;
  llvm::raw_string_ostream os(s);
  impl_->module->print(os, nullptr);
  return s;
}

std::string CodeletCompiler::gpu_module_text() const {
  if (!impl_->gpu_module) return "";
  std::string s;
  llvm::raw_string_ostream os(s);
  impl_->gpu_module->print(os, nullptr);
  return s;
}

std::vector<rt::CodeletDesc> CodeletCompiler::finish(std::shared_ptr<void>& code) {
  Impl& im = *impl_;
  if (im.finished) throw InternalError("kernel compiler: finish() called twice");
  const std::string& object = host_object(im);
  std::vector<rt::CodeletDesc> out;
  for (const Impl::Codelet& k : im.codelets) {
    rt::CodeletDesc d;
    d.name = k.name;
    d.nodes = k.nodes;
    d.gpu_mapping = k.gpu_mapping;
    d.gpu_block = k.gpu_block;
    d.source = k.source;
    out.push_back(std::move(d));
  }
  im.finished = true;
  im.gpu_module.reset();

  llvm::orc::JITTargetMachineBuilder jtmb = host_machine_builder();
  std::unique_ptr<llvm::orc::LLJIT> jit =
      checked(llvm::orc::LLJITBuilder().setJITTargetMachineBuilder(std::move(jtmb)).create(), "LLJIT");
  // libm (expf, tanhf, erff, powf, ...) from the process, and glibc's vector math library
  // where it exists, so that loops over exp/log/pow vectorize (libmvec: <= 4 ulp).
  const char prefix = jit->getDataLayout().getGlobalPrefix();
  jit->getMainJITDylib().addGenerator(
      checked(llvm::orc::DynamicLibrarySearchGenerator::GetForCurrentProcess(prefix), "process symbols"));
  if (im.veclib)
    jit->getMainJITDylib().addGenerator(
        checked(llvm::orc::DynamicLibrarySearchGenerator::Load("libmvec.so.1", prefix), "libmvec"));
  check(jit->addObjectFile(llvm::MemoryBuffer::getMemBufferCopy(object, "modelc_kernels.o")), "adding the kernels");
  for (rt::CodeletDesc& d : out)
    d.host = checked(jit->lookup(d.name), "kernel lookup").toPtr<rt::HostCodeletFn>();
  code = std::shared_ptr<llvm::orc::LLJIT>(std::move(jit));
  return out;
}

}  // namespace modelc
