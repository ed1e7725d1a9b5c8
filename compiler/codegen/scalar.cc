// The scalar-expression language as LLVM IR (compiler/codegen/scalar.h).
#include "compiler/codegen/scalar.h"

#include <cmath>
#include <limits>

#include <fmt/format.h>
#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/Intrinsics.h>
#include <llvm/IR/Module.h>

#include "compiler/support/diagnostics.h"

namespace modelc {
namespace {

using Op = ScalarExpr::Op;

// --- IR emission ----------------------------------------------------------------------

class Emitter {
 public:
  Emitter(llvm::IRBuilderBase& b, const std::map<std::string, llvm::Value*>& vars) : b_(b), vars_(vars) {}

  // `hint`: the type a constant takes (the other operand's), or null for f32.
  // Long by design: one switch over the scalar expression kinds, a few lines each.
  llvm::Value* emit(const ScalarExpr& e, llvm::Type* hint = nullptr) {
    switch (e.op) {
      case Op::Const: {
        llvm::Type* t = hint ? hint : b_.getFloatTy();
        if (t->isFloatTy()) return llvm::ConstantFP::get(t, e.value);
        if (t->isIntegerTy(1)) return b_.getInt1(e.value != 0);
        return llvm::ConstantInt::get(t, static_cast<uint64_t>(static_cast<int64_t>(e.value)), true);
      }
      case Op::Var: {
        auto it = vars_.find(e.var);
        if (it == vars_.end()) throw InternalError(fmt::format("scalar definition: unbound variable '{}'", e.var));
        return it->second;
      }
      case Op::Neg: {
        llvm::Value* x = emit(e.args[0], hint);
        return is_float(x) ? b_.CreateFNeg(x) : b_.CreateNeg(x);
      }
      case Op::Abs: {
        llvm::Value* x = emit(e.args[0], hint);
        if (is_float(x)) return b_.CreateUnaryIntrinsic(llvm::Intrinsic::fabs, x);
        return b_.CreateBinaryIntrinsic(llvm::Intrinsic::abs, x, b_.getFalse());
      }
      case Op::Exp: return b_.CreateUnaryIntrinsic(llvm::Intrinsic::exp, float_arg(e, 0));
      case Op::Log: return b_.CreateUnaryIntrinsic(llvm::Intrinsic::log, float_arg(e, 0));
      case Op::Sqrt: return b_.CreateUnaryIntrinsic(llvm::Intrinsic::sqrt, float_arg(e, 0));
      // sin and cos become libm's (or libmvec's) sinf / cosf on the host and libdevice's on
      // the GPU (gpu_libdevice.cc); the roundings are instructions on both (roundeven: half
      // to even, as torch.round).
      case Op::Sin: return b_.CreateUnaryIntrinsic(llvm::Intrinsic::sin, float_arg(e, 0));
      case Op::Cos: return b_.CreateUnaryIntrinsic(llvm::Intrinsic::cos, float_arg(e, 0));
      case Op::Floor: return b_.CreateUnaryIntrinsic(llvm::Intrinsic::floor, float_arg(e, 0));
      case Op::Ceil: return b_.CreateUnaryIntrinsic(llvm::Intrinsic::ceil, float_arg(e, 0));
      case Op::Round: return b_.CreateUnaryIntrinsic(llvm::Intrinsic::roundeven, float_arg(e, 0));
      case Op::Tanh: return tanh_f32(float_arg(e, 0));
      case Op::Erf: return libm("erff", float_arg(e, 0));
      case Op::Log1p: return libm("log1pf", float_arg(e, 0));
      case Op::Expm1: return libm("expm1f", float_arg(e, 0));
      case Op::Call: throw InternalError(fmt::format("scalar definition: unresolved call of '{}'", e.var));
      case Op::Pow: {
        auto [a, c] = pair(e, hint);
        require_float(a, "pow");
        return b_.CreateBinaryIntrinsic(llvm::Intrinsic::pow, a, c);
      }
      case Op::Add: case Op::Sub: case Op::Mul: case Op::Div: {
        auto [a, c] = pair(e, hint);
        if (is_float(a)) {
          switch (e.op) {
            case Op::Add: return b_.CreateFAdd(a, c);
            case Op::Sub: return b_.CreateFSub(a, c);
            case Op::Mul: return b_.CreateFMul(a, c);
            default: return b_.CreateFDiv(a, c);
          }
        }
        switch (e.op) {
          case Op::Add: return b_.CreateAdd(a, c);
          case Op::Sub: return b_.CreateSub(a, c);
          case Op::Mul: return b_.CreateMul(a, c);
          default: throw InternalError("scalar definition: integer division is not defined");
        }
      }
      case Op::Max: case Op::Min: {
        auto [a, c] = pair(e, hint);
        bool mx = e.op == Op::Max;
        if (!is_float(a))
          return b_.CreateBinaryIntrinsic(mx ? llvm::Intrinsic::smax : llvm::Intrinsic::smin, a, c);
        // NaN propagates: the reference's (isnan(a) || isnan(b)) ? nan : (a > b ? a : b).
        llvm::Value* pick = b_.CreateSelect(mx ? b_.CreateFCmpOGT(a, c) : b_.CreateFCmpOLT(a, c), a, c);
        llvm::Value* nan = llvm::ConstantFP::getNaN(a->getType());
        return b_.CreateSelect(b_.CreateFCmpUNO(a, c), nan, pick);
      }
      case Op::Lt: case Op::Le: case Op::Gt: case Op::Ge: case Op::Eq: case Op::Ne: {
        auto [a, c] = pair(e, nullptr);
        using P = llvm::CmpInst::Predicate;
        // Ordered float predicates (false on NaN) except !=, which is true on NaN as in C.
        static const std::map<Op, std::pair<P, P>> preds = {
            {Op::Lt, {P::FCMP_OLT, P::ICMP_SLT}}, {Op::Le, {P::FCMP_OLE, P::ICMP_SLE}},
            {Op::Gt, {P::FCMP_OGT, P::ICMP_SGT}}, {Op::Ge, {P::FCMP_OGE, P::ICMP_SGE}},
            {Op::Eq, {P::FCMP_OEQ, P::ICMP_EQ}},  {Op::Ne, {P::FCMP_UNE, P::ICMP_NE}}};
        auto [fp, ip] = preds.at(e.op);
        return is_float(a) ? b_.CreateFCmp(fp, a, c) : b_.CreateICmp(ip, a, c);
      }
      case Op::Select: {
        llvm::Value* c = emit(e.args[0], nullptr);
        if (!c->getType()->isIntegerTy(1))
          c = is_float(c) ? b_.CreateFCmpUNE(c, llvm::ConstantFP::get(c->getType(), 0.0))
                          : b_.CreateICmpNE(c, llvm::ConstantInt::get(c->getType(), 0));
        ScalarExpr rest;
        rest.op = Op::Add;  // only to reuse pair(): the two branches unify like operands
        rest.args = {e.args[1], e.args[2]};
        auto [a, d] = pair(rest, hint);
        return b_.CreateSelect(c, a, d);
      }
    }
    throw InternalError("scalar definition: unknown primitive");
  }

 private:
  // tanh without a libm call, so loops over it vectorize (gelu's tanh form): for |x| < 0.5
  // its odd Taylor series to x^15 (truncation < 1e-7 relative there), else
  // sign(x) (1 - 2 / (e^{2|x|} + 1)) (no cancellation: tanh >= 0.46). About 1e-6 relative
  // at worst with a 4-ulp vector exp; NaN and +-inf behave as tanhf's.
  llvm::Value* tanh_f32(llvm::Value* x) {
    auto c = [&](double v) { return llvm::ConstantFP::get(b_.getFloatTy(), v); };
    static const double taylor[] = {-1.0 / 3, 2.0 / 15, -17.0 / 315, 62.0 / 2835, -1382.0 / 155925,
                                    21844.0 / 6081075, -929569.0 / 638512875};
    llvm::Value* x2 = b_.CreateFMul(x, x);
    llvm::Value* p = c(taylor[6]);
    for (int k = 5; k >= 0; --k) p = b_.CreateFAdd(b_.CreateFMul(p, x2), c(taylor[k]));
    llvm::Value* small = b_.CreateFMul(x, b_.CreateFAdd(c(1), b_.CreateFMul(x2, p)));  // keeps -0
    llvm::Value* ax = b_.CreateUnaryIntrinsic(llvm::Intrinsic::fabs, x);
    llvm::Value* e = b_.CreateUnaryIntrinsic(llvm::Intrinsic::exp, b_.CreateFMul(ax, c(2)));
    llvm::Value* big = b_.CreateFSub(c(1), b_.CreateFDiv(c(2), b_.CreateFAdd(e, c(1))));
    big = b_.CreateBinaryIntrinsic(llvm::Intrinsic::copysign, big, x);
    return b_.CreateSelect(b_.CreateFCmpOLT(ax, c(0.5)), small, big);
  }

  llvm::IRBuilderBase& b_;
  const std::map<std::string, llvm::Value*>& vars_;

  static bool is_float(llvm::Value* v) { return v->getType()->isFloatingPointTy(); }
  static void require_float(llvm::Value* v, std::string_view what) {
    if (!is_float(v)) throw InternalError(fmt::format("scalar definition: {} of a non-float value", what));
  }
  llvm::Value* float_arg(const ScalarExpr& e, size_t i) {
    llvm::Value* v = emit(e.args[i], b_.getFloatTy());
    require_float(v, "a float function");
    return v;
  }
  // Two operands of one type: a constant takes the other operand's type.
  std::pair<llvm::Value*, llvm::Value*> pair(const ScalarExpr& e, llvm::Type* hint) {
    const ScalarExpr& l = e.args[0];
    const ScalarExpr& r = e.args[1];
    llvm::Value *a = nullptr, *c = nullptr;
    if (l.op == Op::Const && r.op != Op::Const) {
      c = emit(r, hint);
      a = emit(l, c->getType());
    } else {
      a = emit(l, hint);
      c = emit(r, a->getType());
    }
    if (a->getType() != c->getType()) throw InternalError("scalar definition: operands of different types");
    return {a, c};
  }
  // A call to a pure libm function float(float).
  llvm::Value* libm(const char* name, llvm::Value* x) {
    llvm::Module* m = b_.GetInsertBlock()->getModule();
    llvm::FunctionCallee f = m->getOrInsertFunction(name, b_.getFloatTy(), b_.getFloatTy());
    if (auto* fn = llvm::dyn_cast<llvm::Function>(f.getCallee())) {
      fn->setDoesNotThrow();
      fn->setMemoryEffects(llvm::MemoryEffects::none());
      fn->setWillReturn();
    }
    llvm::CallInst* call = b_.CreateCall(f, {x});
    call->setDoesNotThrow();
    call->setMemoryEffects(llvm::MemoryEffects::none());
    return call;
  }
};

}  // namespace

llvm::Value* emit_scalar(const ScalarExpr& e, llvm::IRBuilderBase& b, const std::map<std::string, llvm::Value*>& vars) {
  return Emitter(b, vars).emit(e);
}

}  // namespace modelc
