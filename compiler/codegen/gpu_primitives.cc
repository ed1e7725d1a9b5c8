// The GPU forms of CodeletBuilder's target-dependent primitives (compiler/codegen/codelet_emit.h)
// for block-mapped kernels: one work item per thread block of `gpu.block` threads (a
// multiple of 32, known when the body is built; the kernel requires exactly that many).
//
// reduce_loop: thread t folds elements t, t + block, t + 2 * block, ... into its registers;
// then the warp combines with butterfly shuffles (shfl.sync.bfly; 64-bit values as two
// 32-bit halves), so that every lane holds the warp's result; lane 0 of each warp writes it
// to shared memory, and after a barrier every thread combines the warps' results in warp
// order (the same order everywhere, so every thread gets the same bits). A second barrier
// lets the next work item of the block reuse the shared slots.
//
// tile_reduce (a tile of `width` columns per work item): thread t takes column t % width and
// the rows t / width, t / width + block / width, ... (so a warp reads consecutive columns
// of a row); every thread writes its partials to shared memory, and after a barrier each
// thread of the first row combines its column's partials in row order and finishes it.
//
// The barriers need every thread of the block: block-mapped kernels call the cooperative
// primitives only where control flow is the same for the whole block (the wrapper's loop
// over work items is per block, and nested primitives are sequential).
#include <fmt/format.h>
#include <llvm/IR/IntrinsicsNVPTX.h>

#include "compiler/codegen/codelet_emit.h"
#include "compiler/support/diagnostics.h"

namespace modelc {

llvm::Value* CodeletBuilder::thread_id() {
  return b.CreateZExt(b.CreateIntrinsic(llvm::Intrinsic::nvvm_read_ptx_sreg_tid_x, {}, {}), i64(), "tid");
}

void CodeletBuilder::strided_loop(llvm::Value* start, llvm::Value* n, llvm::Value* step,
                                 const std::function<void(llvm::Value*)>& body) {
  llvm::AllocaInst* k = var(i64(), start);
  auto* head = llvm::BasicBlock::Create(ctx, "sloop", fn);
  auto* inner = llvm::BasicBlock::Create(ctx, "sbody", fn);
  auto* exit = llvm::BasicBlock::Create(ctx, "sdone", fn);
  b.CreateBr(head);
  b.SetInsertPoint(head);
  llvm::Value* kv = b.CreateLoad(i64(), k);
  b.CreateCondBr(b.CreateICmpSLT(kv, n), inner, exit);
  b.SetInsertPoint(inner);
  body(kv);
  b.CreateStore(b.CreateAdd(kv, step, "", true, true), k);
  b.CreateBr(head);
  b.SetInsertPoint(exit);
}

llvm::Value* CodeletBuilder::shuffle_xor(llvm::Value* v, unsigned lane_mask) {
  llvm::Type* t = v->getType();
  llvm::Type* i32 = b.getInt32Ty();
  auto shfl = [&](llvm::Intrinsic::ID id, llvm::Value* x) {
    return b.CreateIntrinsic(id, {}, {b.getInt32(0xffffffffu), x, b.getInt32(lane_mask), b.getInt32(0x1f)});
  };
  if (t->isFloatTy()) return shfl(llvm::Intrinsic::nvvm_shfl_sync_bfly_f32, v);
  if (t->isIntegerTy(32)) return shfl(llvm::Intrinsic::nvvm_shfl_sync_bfly_i32, v);
  if (t->isIntegerTy() && t->getIntegerBitWidth() < 32)
    return b.CreateTrunc(shfl(llvm::Intrinsic::nvvm_shfl_sync_bfly_i32, b.CreateZExt(v, i32)), t);
  if (t->isDoubleTy() || t->isIntegerTy(64)) {
    llvm::Value* bits = t->isDoubleTy() ? b.CreateBitCast(v, b.getInt64Ty()) : v;
    llvm::Value* lo = shfl(llvm::Intrinsic::nvvm_shfl_sync_bfly_i32, b.CreateTrunc(bits, i32));
    llvm::Value* hi = shfl(llvm::Intrinsic::nvvm_shfl_sync_bfly_i32, b.CreateTrunc(b.CreateLShr(bits, 32), i32));
    llvm::Value* joined = b.CreateOr(b.CreateZExt(lo, b.getInt64Ty()), b.CreateShl(b.CreateZExt(hi, b.getInt64Ty()), 32));
    return t->isDoubleTy() ? b.CreateBitCast(joined, t) : joined;
  }
  std::string name;
  llvm::raw_string_ostream os(name);
  t->print(os);
  throw InternalError(fmt::format("kernel compiler: no warp shuffle for a value of type {}", name));
}

std::vector<llvm::Value*> CodeletBuilder::block_reduce(const std::vector<llvm::Value*>& extents,
                                                      const std::vector<Accumulator>& accs, const Element& element) {
  if (gpu.block % 32 != 0 || gpu.block == 0 || gpu.block > 1024)
    throw InternalError(fmt::format("kernel compiler: block size {} is not a multiple of 32 in [32, 1024]", gpu.block));
  std::vector<llvm::AllocaInst*> vars;
  for (const Accumulator& a : accs) vars.push_back(var(a.type, a.init));
  llvm::Value* total = extents[0];
  for (size_t j = 1; j < extents.size(); ++j) total = b.CreateMul(total, extents[j]);
  llvm::Value* tid = thread_id();
  ++coop_depth_;
  strided_loop(tid, total, c64(gpu.block), [&](llvm::Value* flat) {
    // Coordinates of the flat index, innermost fastest (the first takes what remains).
    std::vector<llvm::Value*> coords(extents.size());
    llvm::Value* rest = flat;
    for (size_t j = extents.size(); j-- > 0;) {
      if (j == 0) {
        coords[j] = rest;
        break;
      }
      coords[j] = rem(rest, extents[j]);
      rest = div(rest, extents[j]);
    }
    std::vector<llvm::Value*> vals = element(coords);
    if (vals.size() != accs.size()) throw InternalError("kernel compiler: reduce_loop element gives the wrong arity");
    for (size_t q = 0; q < accs.size(); ++q)
      b.CreateStore(accs[q].combine(b.CreateLoad(accs[q].type, vars[q]), vals[q]), vars[q]);
  });
  --coop_depth_;

  // Across the warp: after the butterfly every lane holds the warp's result.
  std::vector<llvm::Value*> v;
  for (size_t q = 0; q < accs.size(); ++q) v.push_back(b.CreateLoad(accs[q].type, vars[q]));
  for (unsigned off = 16; off >= 1; off /= 2)
    for (size_t q = 0; q < accs.size(); ++q) v[q] = accs[q].combine(v[q], shuffle_xor(v[q], off));
  const uint32_t warps = gpu.block / 32;
  if (warps == 1) return v;

  // Across warps, through shared memory (addrspace(3)).
  std::vector<llvm::GlobalVariable*> slots;
  for (size_t q = 0; q < accs.size(); ++q) {
    auto* at = llvm::ArrayType::get(accs[q].type, warps);
    auto* gv = new llvm::GlobalVariable(module, at, false, llvm::GlobalValue::InternalLinkage, llvm::UndefValue::get(at),
                                        fmt::format("{}.smem", fn->getName().str()), nullptr,
                                        llvm::GlobalValue::NotThreadLocal, 3);
    gv->setAlignment(llvm::Align(8));
    slots.push_back(gv);
  }
  auto slot = [&](size_t q, llvm::Value* w) {
    return b.CreateInBoundsGEP(slots[q]->getValueType(), slots[q], {b.getInt64(0), w});
  };
  llvm::Value* warp = b.CreateLShr(tid, 5);
  auto* write = llvm::BasicBlock::Create(ctx, "smem.write", fn);
  auto* join = llvm::BasicBlock::Create(ctx, "smem.join", fn);
  b.CreateCondBr(b.CreateICmpEQ(b.CreateAnd(tid, c64(31)), c64(0)), write, join);
  b.SetInsertPoint(write);
  for (size_t q = 0; q < accs.size(); ++q) b.CreateStore(v[q], slot(q, warp));
  b.CreateBr(join);
  b.SetInsertPoint(join);
  b.CreateIntrinsic(llvm::Intrinsic::nvvm_barrier0, {}, {});
  std::vector<llvm::Value*> r;
  for (size_t q = 0; q < accs.size(); ++q) {
    llvm::Value* x = b.CreateLoad(accs[q].type, slot(q, c64(0)));
    for (uint32_t w = 1; w < warps; ++w) x = accs[q].combine(x, b.CreateLoad(accs[q].type, slot(q, c64(w))));
    r.push_back(x);
  }
  b.CreateIntrinsic(llvm::Intrinsic::nvvm_barrier0, {}, {});
  return r;
}

void CodeletBuilder::block_tile_reduce(int64_t width, llvm::Value* cols, const std::vector<llvm::Value*>& extents,
                                      const std::vector<Accumulator>& accs, const TileElement& element,
                                      const TileDone& done) {
  if (width <= 0 || gpu.block % static_cast<uint64_t>(width) != 0)
    throw InternalError(fmt::format("kernel compiler: a tile of {} columns does not divide a block of {}", width, gpu.block));
  const int64_t rows = gpu.block / width;  // threads per column
  std::vector<llvm::AllocaInst*> vars;
  for (const Accumulator& a : accs) vars.push_back(var(a.type, a.init));
  llvm::Value* total = c64(1);
  for (llvm::Value* e : extents) total = b.CreateMul(total, e);
  llvm::Value* tid = thread_id();
  llvm::Value* c = b.CreateURem(tid, c64(width), "col");
  llvm::Value* r = b.CreateUDiv(tid, c64(width), "row");
  llvm::Value* mine = b.CreateICmpULT(c, cols);
  ++coop_depth_;
  when(mine, [&] {
    strided_loop(r, total, c64(rows), [&](llvm::Value* flat) {
      std::vector<llvm::Value*> coords(extents.size());
      llvm::Value* rest = flat;
      for (size_t j = extents.size(); j-- > 0;) {
        coords[j] = j == 0 ? rest : rem(rest, extents[j]);
        if (j > 0) rest = div(rest, extents[j]);
      }
      std::vector<llvm::Value*> vals = element(coords, c);
      if (vals.size() != accs.size()) throw InternalError("kernel compiler: tile_reduce element gives the wrong arity");
      for (size_t q = 0; q < accs.size(); ++q)
        b.CreateStore(accs[q].combine(b.CreateLoad(accs[q].type, vars[q]), vals[q]), vars[q]);
    });
  });
  --coop_depth_;
  // Every thread's partial to shared memory (slot tid); after the barrier, thread c of the
  // first row combines column c's partials in row order and finishes the column.
  std::vector<llvm::GlobalVariable*> smem;
  for (const Accumulator& a : accs) {
    auto* at = llvm::ArrayType::get(a.type, gpu.block);
    auto* gv = new llvm::GlobalVariable(module, at, false, llvm::GlobalValue::InternalLinkage, llvm::UndefValue::get(at),
                                        fmt::format("{}.tile", fn->getName().str()), nullptr,
                                        llvm::GlobalValue::NotThreadLocal, 3);
    gv->setAlignment(llvm::Align(8));
    smem.push_back(gv);
  }
  auto slot = [&](size_t q, llvm::Value* k) {
    return b.CreateInBoundsGEP(smem[q]->getValueType(), smem[q], {b.getInt64(0), k});
  };
  for (size_t q = 0; q < accs.size(); ++q) b.CreateStore(b.CreateLoad(accs[q].type, vars[q]), slot(q, tid));
  b.CreateIntrinsic(llvm::Intrinsic::nvvm_barrier0, {}, {});
  ++coop_depth_;
  when(b.CreateAnd(mine, b.CreateICmpEQ(r, c64(0))), [&] {
    std::vector<llvm::AllocaInst*> sums;
    for (size_t q = 0; q < accs.size(); ++q) sums.push_back(var(accs[q].type, b.CreateLoad(accs[q].type, slot(q, c))));
    loop(c64(rows - 1), [&](llvm::Value* k) {
      llvm::Value* at = b.CreateAdd(b.CreateMul(b.CreateAdd(k, c64(1)), c64(width)), c);
      for (size_t q = 0; q < accs.size(); ++q)
        b.CreateStore(accs[q].combine(b.CreateLoad(accs[q].type, sums[q]), b.CreateLoad(accs[q].type, slot(q, at))), sums[q]);
    });
    std::vector<llvm::Value*> results;
    for (size_t q = 0; q < accs.size(); ++q) results.push_back(b.CreateLoad(accs[q].type, sums[q]));
    done(c, results);
  });
  --coop_depth_;
  // The next work item of the block may reuse the slots once everyone has read them.
  b.CreateIntrinsic(llvm::Intrinsic::nvvm_barrier0, {}, {});
}

void CodeletBuilder::block_parallel_loop(llvm::Value* n, const std::function<void(llvm::Value*)>& body) {
  llvm::Value* tid = thread_id();
  ++coop_depth_;
  strided_loop(tid, n, c64(gpu.block), body);
  --coop_depth_;
}

void CodeletBuilder::block_single(const std::function<void()>& body) {
  auto* run = llvm::BasicBlock::Create(ctx, "single", fn);
  auto* join = llvm::BasicBlock::Create(ctx, "single.join", fn);
  b.CreateCondBr(b.CreateICmpEQ(thread_id(), c64(0)), run, join);
  b.SetInsertPoint(run);
  ++coop_depth_;
  body();
  --coop_depth_;
  b.CreateBr(join);
  b.SetInsertPoint(join);
}

}  // namespace modelc
