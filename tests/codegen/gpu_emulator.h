// Runs the GPU flavour of the kernels on the CPU, for machines without a GPU: the GPU
// module's IR (CodeletCompiler::gpu_module_text) with the NVPTX intrinsics replaced by an
// emulation, compiled for the host with ORC LLJIT.
//
// A launch runs its blocks one after another. A thread-mapped kernel's threads run one
// after another (they never synchronise; a barrier or shuffle there is counted as an
// error). A block-mapped kernel's threads are OS threads: bar.sync is a std::barrier, and
// a warp shuffle writes the thread's value to the block's slots, waits, reads its
// partner's, waits (every thread of a block-mapped kernel shuffles at the same points,
// which the emulation thereby also checks: otherwise it deadlocks or times out). Shared
// memory is an ordinary global (one block at a time).
//
// This tests the emitter's GPU logic (the primitives, the wrappers, launch shapes, the
// 128-bit path and its fallback) against the reference, not LLVM's NVPTX backend (ptxas
// checks its output) nor libdevice (the host's libm stands in).
#pragma once

#include <atomic>
#include <barrier>
#include <bit>
#include <thread>

#include <llvm/AsmParser/Parser.h>
#include <llvm/ExecutionEngine/Orc/ExecutionUtils.h>
#include <llvm/ExecutionEngine/Orc/LLJIT.h>
#include <llvm/IR/Constants.h>
#include <llvm/IR/IntrinsicsNVPTX.h>
#include <llvm/IR/Module.h>
#include <llvm/Support/SourceMgr.h>
#include <llvm/Support/TargetSelect.h>
#include <llvm/Support/raw_ostream.h>

#include "runtime/base/program.h"

namespace modelc::test::emu {

inline thread_local uint32_t t_tid = 0, t_ctaid = 0;
inline uint32_t g_ntid = 0, g_nctaid = 0;
inline std::barrier<>* g_barrier = nullptr;  // null: the threads run one after another
inline std::atomic<int> g_bad_sync{0};       // barriers or shuffles where threads cannot meet
inline uint32_t g_slots[1024];

inline uint32_t tid() { return t_tid; }
inline uint32_t ctaid() { return t_ctaid; }
inline uint32_t ntid() { return g_ntid; }
inline uint32_t nctaid() { return g_nctaid; }
inline void barrier() {
  if (!g_barrier) {
    ++g_bad_sync;
    return;
  }
  g_barrier->arrive_and_wait();
}
inline uint32_t shuffle_bits(uint32_t v, uint32_t lane_mask) {
  if (!g_barrier) {
    ++g_bad_sync;
    return v;
  }
  g_slots[t_tid] = v;
  g_barrier->arrive_and_wait();
  uint32_t r = g_slots[(t_tid & ~31u) | ((t_tid & 31u) ^ (lane_mask & 31u))];
  g_barrier->arrive_and_wait();
  return r;
}
inline uint32_t shfl_i32(uint32_t, uint32_t v, uint32_t lane_mask, uint32_t) { return shuffle_bits(v, lane_mask); }
inline float shfl_f32(uint32_t, float v, uint32_t lane_mask, uint32_t) {
  return std::bit_cast<float>(shuffle_bits(std::bit_cast<uint32_t>(v), lane_mask));
}

class GpuEmulator {
 public:
  using Kernel = rt::HostCodeletFn;

  explicit GpuEmulator(const std::string& gpu_ir) {
    llvm::InitializeNativeTarget();
    llvm::InitializeNativeTargetAsmPrinter();
    auto ctx = std::make_unique<llvm::LLVMContext>();
    llvm::SMDiagnostic diag;
    std::unique_ptr<llvm::Module> m = llvm::parseAssemblyString(gpu_ir, diag, *ctx);
    if (!m) {
      std::string msg;
      llvm::raw_string_ostream os(msg);
      diag.print("gpu module", os);
      throw std::runtime_error("emulator: cannot parse the GPU module: " + msg);
    }
    auto jit = llvm::orc::LLJITBuilder().create();
    if (!jit) throw std::runtime_error("emulator: " + llvm::toString(jit.takeError()));
    jit_ = std::move(*jit);
    m->setTargetTriple(jit_->getTargetTriple().str());
    m->setDataLayout(jit_->getDataLayout());
    rewrite(*m);
    llvm::orc::SymbolMap syms;
    auto def = [&](const char* name, auto* fn) {
      syms[jit_->mangleAndIntern(name)] = {llvm::orc::ExecutorAddr::fromPtr(fn), llvm::JITSymbolFlags::Exported};
    };
    def("emu_tid", &tid);
    def("emu_ctaid", &ctaid);
    def("emu_ntid", &ntid);
    def("emu_nctaid", &nctaid);
    def("emu_barrier", &barrier);
    def("emu_shfl_i32", &shfl_i32);
    def("emu_shfl_f32", &shfl_f32);
    check(jit_->getMainJITDylib().define(llvm::orc::absoluteSymbols(std::move(syms))));
    auto process = llvm::orc::DynamicLibrarySearchGenerator::GetForCurrentProcess(jit_->getDataLayout().getGlobalPrefix());
    if (!process) throw std::runtime_error("emulator: " + llvm::toString(process.takeError()));
    jit_->getMainJITDylib().addGenerator(std::move(*process));
    check(jit_->addIRModule(llvm::orc::ThreadSafeModule(std::move(m), std::move(ctx))));
  }

  Kernel lookup(const std::string& name) {
    auto addr = jit_->lookup(name);
    if (!addr) throw std::runtime_error("emulator: " + llvm::toString(addr.takeError()));
    return addr->toPtr<Kernel>();
  }

  // Runs `grid` blocks of d.gpu_block threads over work items [begin, end).
  static void launch(Kernel k, const rt::CodeletDesc& d, uint32_t grid, void* const* buffers, const int64_t* sizes,
                     int64_t begin, int64_t end) {
    g_ntid = d.gpu_block;
    g_nctaid = grid;
    for (uint32_t blk = 0; blk < grid; ++blk) {
      if (d.gpu_mapping == rt::GpuMapping::Thread) {
        g_barrier = nullptr;
        for (uint32_t t = 0; t < d.gpu_block; ++t) {
          t_tid = t;
          t_ctaid = blk;
          k(buffers, sizes, begin, end);
        }
        continue;
      }
      std::barrier<> bar(static_cast<std::ptrdiff_t>(d.gpu_block));
      g_barrier = &bar;
      std::vector<std::thread> threads;
      threads.reserve(d.gpu_block);
      for (uint32_t t = 0; t < d.gpu_block; ++t)
        threads.emplace_back([=] {
          t_tid = t;
          t_ctaid = blk;
          k(buffers, sizes, begin, end);
        });
      for (std::thread& th : threads) th.join();
      g_barrier = nullptr;
    }
  }

 private:
  static void check(llvm::Error e) {
    if (e) throw std::runtime_error("emulator: " + llvm::toString(std::move(e)));
  }

  // NVPTX intrinsics -> calls of the emulation; shared memory -> ordinary globals.
  static void rewrite(llvm::Module& m) {
    std::vector<std::pair<llvm::Function*, const char*>> calls;
    for (llvm::Function& f : m) {
      switch (f.getIntrinsicID()) {
        case llvm::Intrinsic::nvvm_read_ptx_sreg_tid_x: calls.emplace_back(&f, "emu_tid"); break;
        case llvm::Intrinsic::nvvm_read_ptx_sreg_ctaid_x: calls.emplace_back(&f, "emu_ctaid"); break;
        case llvm::Intrinsic::nvvm_read_ptx_sreg_ntid_x: calls.emplace_back(&f, "emu_ntid"); break;
        case llvm::Intrinsic::nvvm_read_ptx_sreg_nctaid_x: calls.emplace_back(&f, "emu_nctaid"); break;
        case llvm::Intrinsic::nvvm_barrier0: calls.emplace_back(&f, "emu_barrier"); break;
        case llvm::Intrinsic::nvvm_shfl_sync_bfly_i32: calls.emplace_back(&f, "emu_shfl_i32"); break;
        case llvm::Intrinsic::nvvm_shfl_sync_bfly_f32: calls.emplace_back(&f, "emu_shfl_f32"); break;
        default:
          if (f.isIntrinsic() && f.getName().starts_with("llvm.nvvm."))
            throw std::runtime_error("emulator: no emulation of " + f.getName().str());
      }
    }
    for (auto& [f, name] : calls) {
      llvm::FunctionCallee callee = m.getOrInsertFunction(name, f->getFunctionType());
      f->replaceAllUsesWith(callee.getCallee());
      f->eraseFromParent();
    }
    std::vector<llvm::GlobalVariable*> shared;
    for (llvm::GlobalVariable& gv : m.globals())
      if (gv.getAddressSpace() == 3) shared.push_back(&gv);
    for (llvm::GlobalVariable* gv : shared) {
      auto* plain = new llvm::GlobalVariable(m, gv->getValueType(), false, llvm::GlobalValue::InternalLinkage,
                                             llvm::Constant::getNullValue(gv->getValueType()), gv->getName() + ".emu");
      plain->setAlignment(gv->getAlign());
      gv->replaceAllUsesWith(llvm::ConstantExpr::getAddrSpaceCast(plain, gv->getType()));
      gv->eraseFromParent();
    }
  }

  std::unique_ptr<llvm::orc::LLJIT> jit_;
};

}  // namespace modelc::test::emu
