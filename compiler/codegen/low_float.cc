// Conversions between f32 values and the bits of f16 / bf16 elements, in LLVM IR built from
// integer operations (and one exact or correctly rounded f32 add), so that the same code
// runs on the x86 JIT (no libgcc half helpers needed, no F16C assumed) and on NVPTX.
//
// f32 -> low rounds to nearest even; overflow goes to +-inf, NaN stays NaN (quiet), values
// below the smallest subnormal round to +-0; f16 subnormals are produced exactly. low -> f32
// is exact. These agree with round_to_dtype (compiler/ir/dtype.cc) for every f32 input.
#include <fmt/format.h>

#include "compiler/codegen/codelet_emit.h"
#include "compiler/support/diagnostics.h"

namespace modelc {

namespace {

llvm::Value* u32(llvm::IRBuilder<>& b, uint32_t v) { return b.getInt32(v); }
llvm::Value* as_float(llvm::IRBuilder<>& b, llvm::Value* v) { return b.CreateBitCast(v, b.getFloatTy()); }
llvm::Value* as_int(llvm::IRBuilder<>& b, llvm::Value* v) { return b.CreateBitCast(v, b.getInt32Ty()); }

void check_low(DType t) {
  if (t != DType::F16 && t != DType::BF16)
    throw InternalError(fmt::format("kernel compiler: {} is not a 16-bit float type", dtype_name(t)));
}

}  // namespace

llvm::Value* low_to_f32(llvm::IRBuilder<>& b, llvm::Value* bits, DType t) {
  check_low(t);
  llvm::Value* h = b.CreateZExt(bits, b.getInt32Ty());
  if (t == DType::BF16) return as_float(b, b.CreateShl(h, 16));
  // f16: move exponent and mantissa into place and rebias; inf/NaN get the f32 maximum
  // exponent, zero and subnormals are normalised by an exact f32 subtraction.
  llvm::Value* o = b.CreateShl(b.CreateAnd(h, u32(b, 0x7fff)), 13);
  llvm::Value* exp = b.CreateAnd(o, u32(b, 0x0f800000));  // 0x7c00 << 13
  o = b.CreateAdd(o, u32(b, 0x38000000));                 // (127 - 15) << 23
  llvm::Value* inf_nan = b.CreateAdd(o, u32(b, 0x38000000));  // (128 - 16) << 23 more
  llvm::Value* sub = as_int(b, b.CreateFSub(as_float(b, b.CreateAdd(o, u32(b, 0x00800000))), as_float(b, u32(b, 0x38800000))));
  o = b.CreateSelect(b.CreateICmpEQ(exp, u32(b, 0x0f800000)), inf_nan,
                     b.CreateSelect(b.CreateICmpEQ(exp, u32(b, 0)), sub, o));
  o = b.CreateOr(o, b.CreateShl(b.CreateAnd(h, u32(b, 0x8000)), 16));
  return as_float(b, o);
}

llvm::Value* f32_to_low(llvm::IRBuilder<>& b, llvm::Value* v, DType t) {
  check_low(t);
  llvm::Value* u = as_int(b, v);
  if (t == DType::BF16) {
    // Add half an ulp minus one plus the lowest kept bit, then truncate; NaN keeps its top
    // bits with the quiet bit set (the add could carry it into infinity).
    llvm::Value* nan = b.CreateICmpUGT(b.CreateAnd(u, u32(b, 0x7fffffff)), u32(b, 0x7f800000));
    llvm::Value* odd = b.CreateAnd(b.CreateLShr(u, 16), u32(b, 1));
    llvm::Value* r = b.CreateLShr(b.CreateAdd(b.CreateAdd(u, u32(b, 0x7fff)), odd), 16);
    r = b.CreateSelect(nan, b.CreateOr(b.CreateLShr(u, 16), u32(b, 0x40)), r);
    return b.CreateTrunc(r, b.getInt16Ty());
  }
  // f16 (after F. Giesen's float_to_half_fast3_rtne).
  llvm::Value* sign = b.CreateAnd(u, u32(b, 0x80000000));
  llvm::Value* f = b.CreateXor(u, sign);
  // |v| >= 65536 (the f16 range ends at 65504; 65520 and up round to inf): inf, or NaN.
  llvm::Value* big = b.CreateSelect(b.CreateICmpUGT(f, u32(b, 0x7f800000)), u32(b, 0x7e00), u32(b, 0x7c00));
  // |v| < 2^-14: an f16 subnormal or zero. Adding 0.5 puts the f16 subnormal quantum
  // (2^-24) at the f32 ulp, so the f32 add rounds to nearest even for us.
  llvm::Value* sub = b.CreateSub(as_int(b, b.CreateFAdd(as_float(b, f), as_float(b, u32(b, 0x3f000000)))), u32(b, 0x3f000000));
  // Normal: rebias, round to nearest even on bit 13, shift.
  llvm::Value* odd = b.CreateAnd(b.CreateLShr(f, 13), u32(b, 1));
  llvm::Value* norm = b.CreateLShr(b.CreateAdd(b.CreateAdd(f, u32(b, 0xc8000fff)), odd), 13);
  llvm::Value* r = b.CreateSelect(b.CreateICmpUGE(f, u32(b, 0x47800000)), big,
                                  b.CreateSelect(b.CreateICmpULT(f, u32(b, 0x38800000)), sub, norm));
  r = b.CreateOr(r, b.CreateLShr(sign, 16));
  return b.CreateTrunc(r, b.getInt16Ty());
}

}  // namespace modelc
