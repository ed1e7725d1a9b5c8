// One kernel per fusion group (compiler/passes/fusion.h).
//
// A group's members are evaluated on demand: the value of member m at flat offset o (into
// m's own output) is computed from its inputs at the offsets its op reads, recursively, and
// an input outside the group is loaded from its buffer. The fusion rules make every member
// read element for element, so each is computed once per work item (memoised by node and
// offset); inlined one-element values are recomputed where read and hoisted by the
// optimiser, since input loads are marked invariant.
//
// Work items: a loop or reduce group has one per element of its root (a reduction loops
// over its reduced elements inside); a row group has one per lane of its anchor, whose
// last pass evaluates the epilogue and stores the outputs at each element of the lane.
//
// Each group is emitted twice from this same code: the host flavour into the host module,
// and, when GPU code is wanted, the GPU flavour into the GPU module (kernel_emit.h), with
// its launch shape chosen per group (choose_gpu_shape) and the same size table.
#include <algorithm>
#include <map>
#include <set>

#include <fmt/format.h>
#include <llvm/IR/Verifier.h>
#include <llvm/Support/raw_ostream.h>

#include "compiler/codegen/kernel_emit.h"
#include "compiler/codegen/kernels_impl.h"
#include "compiler/ir/op_registry.h"

namespace modelc {
namespace {

class GroupEmitter {
 public:
  GroupEmitter(KernelBuilder& kb, const Graph& g, const FusionGroup& grp)
      : kb_(kb), g_(g), grp_(grp), members_(grp.nodes.begin(), grp.nodes.end()) {
    size_t slot = 0;
    for (const Value& v : grp.inputs) slots_[key(v)] = slot++;
    for (const Value& v : grp.outputs) slots_[key(v)] = slot++;
  }

  rt::SizeExpr emit() {
    if (grp_.kind == FusionGroup::Kind::Row) {
      const Node& a = g_.node(grp_.anchor);
      row_op(kb_, g_, a, kb_.index, reader(a), [&](llvm::Value* at, llvm::Value* y) {
        memo_[{grp_.anchor, at}] = y;
        store_outputs(at);
      });
      kb_.grain = std::max<int64_t>(1, 16384 / estimate({row_length(g_, a)}));
      return kb_.symbols.size(row_lanes(g_, a));
    }
    if (grp_.kind == FusionGroup::Kind::Loop && kb_.target == KernelTarget::Host) split();
    store_outputs(kb_.index);
    if (grp_.anchor != kNoNode) kb_.grain = std::max<int64_t>(1, 16384 / estimate({reduced_count(g_, g_.node(grp_.anchor))}));
    else kb_.grain = 4096;
    return kb_.symbols.numel(g_.type(Value{grp_.root, 0}).shape);
  }

 private:
  using Key = std::pair<NodeId, uint32_t>;
  static Key key(const Value& v) { return {v.node, v.index}; }

  // A loop group whose members read a broadcast operand at i % n runs rows of n work items
  // with the columns inside (KernelBuilder::split_index): the reads become affine in the
  // inner loop, which the vectorizer then takes (with i % n it prices them as gathers and
  // keeps the loop scalar). The n most members divide by wins; a small constant n (a few
  // classes) is not worth a loop of its own.
  void split() {
    const Shape& shape = g_.type(Value{grp_.root, 0}).shape;
    std::vector<std::pair<Dim, int>> votes;
    for (NodeId id : grp_.nodes) {
      const Node& n = g_.node(id);
      if (n.outputs.size() != 1 || n.outputs[0].shape != shape) continue;
      std::optional<Dim> d = index_divisor(g_, n);
      if (!d || (d->is_const() && d->const_value() < 16)) continue;
      auto it = std::find_if(votes.begin(), votes.end(), [&](const auto& v) { return v.first == *d; });
      if (it == votes.end()) votes.emplace_back(*d, 1);
      else ++it->second;
    }
    if (votes.empty()) return;
    auto best = std::max_element(votes.begin(), votes.end(), [](const auto& a, const auto& b) { return a.second < b.second; });
    kb_.split_index(best->first);
  }

  // Evaluates every output (every thread of a cooperating block takes part in the
  // reduction), then stores them once.
  void store_outputs(llvm::Value* at) {
    std::vector<llvm::Value*> values;
    for (const Value& v : grp_.outputs) values.push_back(eval(v, at));
    kb_.single([&] {
      for (size_t k = 0; k < values.size(); ++k)
        kb_.store(g_.type(grp_.outputs[k]).dtype, slots_.at(key(grp_.outputs[k])), at, values[k]);
    });
  }

  Reader reader(const Node& n) {
    return [this, &n](size_t k, llvm::Value* off) { return eval(n.inputs.at(k), off); };
  }

  llvm::Value* eval(const Value& v, llvm::Value* off) {
    if (!members_.count(v.node)) {
      auto it = slots_.find(key(v));
      if (it == slots_.end())
        throw InternalError(fmt::format("kernel compiler: group reads %{} but has no buffer for it", v.node));
      return kb_.load_input(g_.type(v).dtype, it->second, off);
    }
    auto m = memo_.find({v.node, off});
    if (m != memo_.end() && kb_.available(m->second)) return m->second;
    const Node& n = g_.node(v.node);
    const FusionKind kind = op_info(n.op).fusion;
    llvm::Value* r = nullptr;
    if (n.op == OpKind::Constant) {
      r = constant(n);
    } else if (kind == FusionKind::Row) {
      throw InternalError(fmt::format("kernel compiler: row op %{} read outside its lane", v.node));
    } else if (kind == FusionKind::Reduction) {
      if (v.node != grp_.anchor || grp_.kind != FusionGroup::Kind::Reduce)
        throw InternalError(fmt::format("kernel compiler: reduction %{} read outside its group's loop", v.node));
      r = reduction_value(kb_, g_, n, off, reader(n));
    } else {
      r = elementwise_value(kb_, g_, n, off, reader(n));
    }
    memo_[{v.node, off}] = r;
    return r;
  }

  llvm::Value* constant(const Node& n) {
    const double value = n.attrs.f("value");
    switch (n.outputs[0].dtype) {
      case DType::F32: return llvm::ConstantFP::get(kb_.b.getFloatTy(), value);
      case DType::I32: return kb_.b.getInt32(static_cast<uint32_t>(static_cast<int32_t>(value)));
      case DType::Bool: return kb_.b.getInt1(value != 0);
      default: break;
    }
    throw InternalError(fmt::format("kernel compiler: constant of type {}", n.outputs[0].str()));
  }

  KernelBuilder& kb_;
  const Graph& g_;
  const FusionGroup& grp_;
  std::set<NodeId> members_;
  std::map<Key, size_t> slots_;
  std::map<std::pair<NodeId, llvm::Value*>, llvm::Value*> memo_;
};

std::string function_text(const llvm::Function* f) {
  std::string s;
  llvm::raw_string_ostream os(s);
  f->print(os);
  return s;
}

void verify(const std::string& name, llvm::Function* body, llvm::Function* wrapper) {
  std::string err;
  llvm::raw_string_ostream os(err);
  if (llvm::verifyFunction(*body, &os) || llvm::verifyFunction(*wrapper, &os))
    throw InternalError(fmt::format("kernel compiler: invalid IR for {}: {}\n{}", name, err, function_text(body)));
}

}  // namespace

EmittedKernel KernelCompiler::emit_group(const Graph& g, const FusionGroup& grp, const std::vector<bool>& inlined,
                                         const EmitOptions& options) {
  Impl& im = *impl_;
  if (im.finished) throw InternalError("kernel compiler: emit() after finish()");
  if (grp.kind == FusionGroup::Kind::Library) throw InternalError("kernel compiler: a library group has no kernel");
  for (NodeId id : grp.nodes)
    if (!handles(g, id)) throw InternalError(fmt::format("kernel compiler: no kernel for node {} ({})", id, op_name(g.node(id).op)));
  const auto index = static_cast<uint32_t>(im.kernels.size());
  const NodeId named = grp.anchor != kNoNode ? grp.anchor : grp.root;
  size_t real = 0;
  for (NodeId id : grp.nodes) real += !inlined.at(id) || id == grp.root;
  std::string name = fmt::format("k{}_{}", index, op_name(g.node(named).op));
  if (real > 1) name += fmt::format("_x{}", real);
  KernelBuilder kb(*im.module, im.symbols, name + ".body");
  kb.training = options.training;
  rt::SizeExpr extent = GroupEmitter(kb, g, grp).emit();
  kb.finish();
  llvm::Function* host = emit_host_wrapper(*im.module, kb.fn, name, kb.split());
  verify(name, kb.fn, host);
  Impl::Kernel k;
  k.name = name;
  k.body = kb.fn;
  const GpuShape shape = choose_gpu_shape(g, grp);
  k.gpu_mapping = shape.block_mapped ? rt::GpuMapping::Block : rt::GpuMapping::Thread;
  k.gpu_block = shape.block;
  k.nodes = static_cast<uint32_t>(real);
  std::vector<rt::SizeExpr> sizes = std::move(kb.sizes);
  if (im.gpu_module) {
    KernelBuilder gb(*im.gpu_module, im.symbols, name + ".body", KernelTarget::Gpu, shape);
    gb.training = options.training;
    gb.seed_sizes(sizes);  // the host's slots first: both flavours read one table
    GroupEmitter(gb, g, grp).emit();
    gb.finish();
    verify(name, gb.fn, emit_gpu_kernel(*im.gpu_module, gb.fn, name, shape, gb.direct_buffers()));
    sizes = std::move(gb.sizes);
  }
  im.kernels.push_back(std::move(k));
  return EmittedKernel{index, std::move(sizes), std::move(extent), kb.grain};
}

}  // namespace modelc
