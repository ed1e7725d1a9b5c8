// Elementwise kernels: one output element per work item. The ops with a scalar definition
// in the registry (with numpy broadcasting of their inputs), and the elementwise ops whose
// body is not a scalar function of the inputs: cast, dropout and rand_like (Philox), causal_mask, one_hot,
// and broadcast_to (a read of its input under the same broadcasting, so that a broadcast
// gradient such as mean's fuses into its consumer instead of being copied out).
#include <limits>

#include <fmt/format.h>

#include "compiler/codegen/codelet_emit.h"
#include "compiler/codegen/scalar.h"
#include "compiler/ir/op_registry.h"
#include "runtime/base/philox.h"

namespace modelc {
namespace {


// The broadcasting of a node's inputs over its output: output dims of extent 1 dropped,
// neighbouring dims that every input treats alike (varying or broadcast) merged, so
// [B,784] + [784] has groups [B] (the bias is broadcast) and [784] (both vary).
struct BroadcastGroups {
  bool all_same = true;  // every input has the output's shape: no index arithmetic
  std::vector<Dim> extent;
  std::vector<std::vector<bool>> varies;  // [group][input]
};

BroadcastGroups broadcast_groups(const Graph& g, const Node& n) {
  BroadcastGroups r;
  const Shape& os = n.outputs[0].shape;
  const size_t nin = n.inputs.size();
  std::vector<const Shape*> ins;
  for (size_t k = 0; k < nin; ++k) {
    ins.push_back(&g.type(n.inputs[k]).shape);
    r.all_same = r.all_same && *ins.back() == os;
  }
  if (r.all_same) return r;
  for (size_t d = 0; d < os.size(); ++d) {
    if (os[d] == Dim(1)) continue;
    std::vector<bool> col(nin);
    for (size_t k = 0; k < nin; ++k) {
      size_t lead = os.size() - ins[k]->size();
      col[k] = d >= lead && (*ins[k])[d - lead] != Dim(1);
    }
    if (!r.varies.empty() && r.varies.back() == col) {
      r.extent.back() = r.extent.back() * os[d];
    } else {
      r.extent.push_back(os[d]);
      r.varies.push_back(col);
    }
  }
  return r;
}

// The flat offset of every input's element for output element `index` under numpy
// broadcasting (an input that varies along every group is read at `index` itself).
std::vector<llvm::Value*> broadcast_offsets(CodeletBuilder& kb, const Graph& g, const Node& n, llvm::Value* index) {
  const size_t nin = n.inputs.size();
  std::vector<llvm::Value*> offs(nin, index);
  const BroadcastGroups bg = broadcast_groups(g, n);
  if (bg.all_same) return offs;
  const size_t ng = bg.extent.size();
  // Coordinates of i over the groups (the first group takes what remains).
  std::vector<llvm::Value*> coord(ng);
  llvm::Value* rest = index;
  for (size_t j = ng; j-- > 0;) {
    if (j == 0) { coord[j] = rest; break; }
    llvm::Value* m = kb.size(bg.extent[j]);
    coord[j] = kb.rem(rest, m);
    rest = kb.div(rest, m);
  }
  for (size_t k = 0; k < nin; ++k) {
    if (g.type(n.inputs[k]).shape == n.outputs[0].shape) continue;
    llvm::Value* off = kb.c64(0);
    Dim stride = 1;
    for (size_t j = ng; j-- > 0;) {
      if (!bg.varies[j][k]) continue;
      off = kb.b.CreateAdd(off, kb.b.CreateMul(coord[j], kb.size(stride)));
      stride = stride * bg.extent[j];
    }
    offs[k] = off;
  }
  return offs;
}

// Philox4x32-10 in IR, exactly as runtime/base/philox.h computes it.
std::array<llvm::Value*, 4> philox(llvm::IRBuilder<>& b, std::array<llvm::Value*, 4> c, std::array<llvm::Value*, 2> k) {
  auto mulhilo = [&](uint32_t m, llvm::Value* x) {
    llvm::Value* p = b.CreateMul(b.getInt64(m), b.CreateZExt(x, b.getInt64Ty()));
    return std::pair{b.CreateTrunc(b.CreateLShr(p, 32), b.getInt32Ty()), b.CreateTrunc(p, b.getInt32Ty())};
  };
  using namespace philox_detail;
  for (int r = 0; r < 10; ++r) {
    if (r > 0) {
      k[0] = b.CreateAdd(k[0], b.getInt32(kW0));
      k[1] = b.CreateAdd(k[1], b.getInt32(kW1));
    }
    auto [hi0, lo0] = mulhilo(kM0, c[0]);
    auto [hi1, lo1] = mulhilo(kM1, c[2]);
    c = {b.CreateXor(b.CreateXor(hi1, c[1]), k[0]), lo1, b.CreateXor(b.CreateXor(hi0, c[3]), k[1]), lo0};
  }
  return c;
}

std::pair<llvm::Value*, llvm::Value*> split64(llvm::IRBuilder<>& b, llvm::Value* v) {
  return {b.CreateTrunc(v, b.getInt32Ty()), b.CreateTrunc(b.CreateLShr(v, 32), b.getInt32Ty())};
}

// The uniform in [0, 1) of element `index` of a keyed op (dropout, rand_like):
// dropout_uniform(seed, key, step, index), as runtime/base/philox.h draws it. Seed and step
// come from the size table ($seed, $step); the site key is hoisted out of the host loop by
// the optimiser (it depends on the seed only).
llvm::Value* emit_uniform(CodeletBuilder& kb, const Node& n, llvm::Value* index) {
  auto& b = kb.b;
  auto key = static_cast<uint64_t>(n.attrs.has("key") ? n.attrs.i("key") : 0);
  llvm::Value* seed = kb.size(rt::SizeExpr::symbol(kb.symbols.id("$seed")));
  llvm::Value* step = kb.size(rt::SizeExpr::symbol(kb.symbols.id("$step")));
  auto [slo, shi] = split64(b, seed);
  auto site = philox(b, {b.getInt32(static_cast<uint32_t>(key)), b.getInt32(static_cast<uint32_t>(key >> 32)),
                         b.getInt32(0), b.getInt32(0)}, {slo, shi});
  auto [ilo, ihi] = split64(b, index);
  auto [tlo, thi] = split64(b, step);
  llvm::Value* bits = philox(b, {ilo, ihi, tlo, thi}, {site[0], site[1]})[0];
  return b.CreateFMul(b.CreateUIToFP(b.CreateLShr(bits, 8), b.getFloatTy()),
                      llvm::ConstantFP::get(b.getFloatTy(), 1.0 / 16777216.0));
}

// dropout in training mode: keep when the element's uniform is >= p, scaled by 1/(1-p).
llvm::Value* emit_dropout(CodeletBuilder& kb, const Node& n, llvm::Value* index, llvm::Value* x) {
  auto& b = kb.b;
  double p = n.attrs.f("p");
  llvm::Value* u = emit_uniform(kb, n, index);
  // The comparison in double, like the reference's float-vs-double p.
  llvm::Value* keep = b.CreateFCmpOGE(b.CreateFPExt(u, b.getDoubleTy()), llvm::ConstantFP::get(b.getDoubleTy(), p));
  llvm::Value* scaled = b.CreateFMul(x, llvm::ConstantFP::get(b.getFloatTy(), 1.0 / (1.0 - p)));
  return b.CreateSelect(keep, scaled, llvm::ConstantFP::get(b.getFloatTy(), 0.0));
}

}  // namespace

std::optional<Dim> index_divisor(const Graph& g, const Node& n) {
  if (n.op == OpKind::CausalMask) return n.outputs[0].shape.back();  // the key index is i % Tk
  if (n.op != OpKind::BroadcastTo && (!op_info(n.op).scalar || n.inputs.size() < 2)) return std::nullopt;
  BroadcastGroups bg = broadcast_groups(g, n);
  if (bg.all_same || bg.extent.size() < 2) return std::nullopt;
  return bg.extent.back();
}

llvm::Value* elementwise_value(CodeletBuilder& kb, const Graph& g, const Node& n, llvm::Value* i, const Reader& read) {
  const TensorType& out = n.outputs.at(0);
  const size_t nin = n.inputs.size();
  auto& b = kb.b;
  switch (n.op) {
    case OpKind::Cast: return kb.convert(read(0, i), out.dtype);
    case OpKind::BroadcastTo: return read(0, broadcast_offsets(kb, g, n, i)[0]);
    case OpKind::Dropout: return kb.training ? emit_dropout(kb, n, i, read(0, i)) : read(0, i);
    case OpKind::RandLike: return emit_uniform(kb, n, i);  // x gives the shape only
    case OpKind::CausalMask: {
      // Key j is masked for query q when j > q + (Tk - Tq) (queries aligned to the last keys).
      const Shape& s = out.shape;
      llvm::Value* tk = kb.size(s[s.size() - 1]);
      llvm::Value* tq = kb.size(s[s.size() - 2]);
      llvm::Value* j = kb.rem(i, tk);
      llvm::Value* q = kb.rem(kb.div(i, tk), tq);
      llvm::Value* masked = b.CreateICmpSGT(j, b.CreateAdd(q, b.CreateSub(tk, tq)));
      return b.CreateSelect(masked, llvm::ConstantFP::getInfinity(b.getFloatTy(), true), read(0, i));
    }
    case OpKind::OneHot: {
      // out[pos, cls] = ids[pos] == cls; an id out of range matches no class (a zero row).
      llvm::Value* classes = kb.c64(n.attrs.i("classes"));
      llvm::Value* idv = b.CreateSExt(read(0, kb.div(i, classes)), kb.i64());
      return kb.convert(b.CreateICmpEQ(idv, kb.rem(i, classes)), out.dtype);
    }
    default: break;
  }
  ScalarExpr e = node_scalar(n);
  std::vector<llvm::Value*> offs = broadcast_offsets(kb, g, n, i);
  std::map<std::string, llvm::Value*> vars;
  const auto& names = scalar_vars(nin);
  for (size_t k = 0; k < nin; ++k) vars[names[k]] = read(k, offs[k]);
  return kb.convert(emit_scalar(e, b, vars), out.dtype);
}

}  // namespace modelc
