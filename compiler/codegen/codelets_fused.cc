// One kernel per fusion group (compiler/passes/fusion.h).
//
// A group's members are evaluated on demand: the value of member m at flat offset o (into
// m's own output) is computed from its inputs at the offsets its op reads, recursively, and
// an input outside the group is loaded from its buffer. The fusion rules make every member
// read element for element, so each is computed once per work item (memoised by node and
// offset); inlined one-element values are recomputed where read and hoisted by the
// optimiser, since input loads are marked invariant.
//
// Work items: a loop group has one per element of its root; a reduce group one per output
// element, or per tile of output columns (a column reduction), and the reduction loops over
// its reduced elements inside, then evaluates the epilogue and stores the outputs at each
// element it finished; a reduce group with few outputs over many elements is two kernels
// (a Partial and a Finish kernel: codelets_reduce.cc); a row group has one per lane of its
// anchor, whose last pass evaluates the epilogue and stores the outputs at each element of
// the lane.
//
// Each group is emitted twice from this same code: the host flavour into the host module,
// and, when GPU code is wanted, the GPU flavour into the GPU module (codelet_emit.h), with
// its launch shape chosen per group (choose_gpu_shape) and the same size table.
#include <algorithm>
#include <map>
#include <set>

#include <fmt/format.h>
#include <llvm/IR/Verifier.h>
#include <llvm/Support/raw_ostream.h>

#include "compiler/codegen/codelet_emit.h"
#include "compiler/codegen/codelets_impl.h"
#include "compiler/ir/op_registry.h"

namespace modelc {
namespace {

class GroupEmitter {
 public:
  // A reduce group's kernel of `phase` under `plan` (codelets_reduce.cc): the Partial and
  // Finish kernels of a two-phase reduction have the scratch buffer after the inputs.
  GroupEmitter(CodeletBuilder& kb, const Graph& g, const FusionGroup& grp, ReducePhase phase = ReducePhase::Whole,
               const ReducePlan& plan = {})
      : kb_(kb), g_(g), grp_(grp), members_(grp.nodes.begin(), grp.nodes.end()), phase_(phase), plan_(plan) {
    size_t slot = 0;
    for (const Value& v : grp.inputs) slots_[key(v)] = slot++;
    scratch_ = slot;
    if (phase != ReducePhase::Whole) ++slot;
    for (const Value& v : grp.outputs) slots_[key(v)] = slot++;
    // An output written in place goes through its input's slot (the same buffer, so the
    // optimiser sees one pointer), and that input is read with plain loads: it changes
    // while the kernel runs (no invariant load, no non-coherent cache on a GPU).
    for (size_t k = 0; k < grp.overwrites.size(); ++k) {
      if (grp.overwrites[k] < 0) continue;
      const auto in = static_cast<size_t>(grp.overwrites[k]);
      slots_[key(grp.outputs.at(k))] = in;
      written_.insert(in);
    }
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
    if (grp_.kind == FusionGroup::Kind::Reduce) {
      // The reduction finishes output elements (a tile's columns, or one), each stored
      // with its epilogue; a Partial kernel stores partials instead.
      const Node& a = g_.node(grp_.anchor);
      ReducePlan plan = plan_;
      if (phase_ != ReducePhase::Finish) plan.inner = divisor(g_.type(a.inputs.at(0)).shape);  // the prologue's
      emit_reduction(kb_, g_, a, plan, phase_, scratch_, reader(a), [&](llvm::Value* at, llvm::Value* y) {
        memo_[{grp_.anchor, at}] = y;
        store_outputs(at);
      });
      const ReduceWork w = reduction_work(g_, a, plan_, phase_);
      kb_.grain = w.grain;
      return kb_.symbols.size(w.extent);
    }
    if (grp_.kind == FusionGroup::Kind::Loop && kb_.target == KernelTarget::Host) split();
    store_outputs(kb_.index);
    kb_.grain = 4096;
    return kb_.symbols.numel(g_.type(Value{grp_.root, 0}).shape);
  }

 private:
  using Key = std::pair<NodeId, uint32_t>;
  static Key key(const Value& v) { return {v.node, v.index}; }

  // A loop group whose members read a broadcast operand at i % n runs rows of n work items
  // with the columns inside (CodeletBuilder::split_index): the reads become affine in the
  // inner loop, which the vectorizer then takes (with i % n it prices them as gathers and
  // keeps the loop scalar). The n most members divide by wins; a small constant n (a few
  // classes) is not worth a loop of its own.
  void split() {
    if (std::optional<Dim> d = divisor(g_.type(Value{grp_.root, 0}).shape)) kb_.split_index(*d);
  }

  // The n the members shaped `shape` divide their index by most often (index_divisor),
  // when it is worth a loop of its own.
  std::optional<Dim> divisor(const Shape& shape) const {
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
    if (votes.empty()) return std::nullopt;
    return std::max_element(votes.begin(), votes.end(), [](const auto& a, const auto& b) { return a.second < b.second; })->first;
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
      if (written_.count(it->second)) return kb_.load(g_.type(v).dtype, it->second, off);
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
      // The anchor's value is memoised where the reduction finishes an element.
      throw InternalError(fmt::format("kernel compiler: reduction %{} read outside its group's loop", v.node));
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
      case DType::F16: case DType::BF16:
        return llvm::ConstantFP::get(kb_.b.getFloatTy(), round_to_dtype(value, n.outputs[0].dtype));
    }
    throw InternalError(fmt::format("kernel compiler: constant of type {}", n.outputs[0].str()));
  }

  CodeletBuilder& kb_;
  const Graph& g_;
  const FusionGroup& grp_;
  std::set<NodeId> members_;
  std::map<Key, size_t> slots_;
  std::set<size_t> written_;  // input slots the kernel writes in place
  const ReducePhase phase_;
  const ReducePlan plan_;
  size_t scratch_ = 0;  // the scratch buffer's slot (Partial and Finish)
  std::map<std::pair<NodeId, llvm::Value*>, llvm::Value*> memo_;
};

void verify(const std::string& name, llvm::Function* body, llvm::Function* wrapper) {
  std::string err;
  llvm::raw_string_ostream os(err);
  if (llvm::verifyFunction(*body, &os) || llvm::verifyFunction(*wrapper, &os))
    throw InternalError(fmt::format("kernel compiler: invalid IR for {}: {}\n{}", name, err, function_text(body)));
}

}  // namespace

EmittedCodelet CodeletCompiler::emit_group(const Graph& g, const FusionGroup& grp, const std::vector<bool>& inlined,
                                         const EmitOptions& options) {
  Impl& im = *impl_;
  if (im.sealed()) throw InternalError("kernel compiler: emit() after the host code was compiled");
  if (grp.kind == FusionGroup::Kind::Library) throw InternalError("kernel compiler: a library group has no kernel");
  for (NodeId id : grp.nodes)
    if (!handles(g, id)) throw InternalError(fmt::format("kernel compiler: no kernel for node {} ({})", id, op_name(g.node(id).op)));
  const NodeId named = grp.anchor != kNoNode ? grp.anchor : grp.root;
  auto real = [&](const std::function<bool(NodeId)>& which) {
    size_t n = 0;
    for (NodeId id : grp.nodes) n += (!inlined.at(id) || id == grp.root) && which(id);
    return static_cast<uint32_t>(n);
  };
  // One kernel, both flavours; a reduce group's kernel of `phase` under `plan`.
  auto emit_kernel = [&](uint32_t nodes, ReducePhase phase, const ReducePlan& plan, const char* suffix) {
    const auto index = static_cast<uint32_t>(im.codelets.size());
    std::string name = fmt::format("k{}_{}", index, op_name(g.node(named).op));
    if (nodes > 1) name += fmt::format("_x{}", nodes);
    name += suffix;
    CodeletBuilder kb(*im.module, im.symbols, name + ".body");
    kb.training = options.training;
    rt::SizeExpr extent = GroupEmitter(kb, g, grp, phase, plan).emit();
    kb.finish();
    llvm::Function* host = emit_host_wrapper(*im.module, kb.fn, name, kb.split());
    verify(name, kb.fn, host);
    Impl::Codelet k;
    k.name = k.symbol = name;
    k.body = kb.fn;
    share_identical(im, k, host);
    const GpuShape shape = choose_gpu_shape(g, grp, plan, phase);
    k.gpu_mapping = shape.block_mapped ? rt::GpuMapping::Block : rt::GpuMapping::Thread;
    k.gpu_block = shape.block;
    k.nodes = nodes;
    std::vector<rt::SizeExpr> sizes = std::move(kb.sizes);
    if (im.gpu_module) {
      CodeletBuilder gb(*im.gpu_module, im.symbols, name + ".body", KernelTarget::Gpu, shape);
      gb.training = options.training;
      gb.seed_sizes(sizes);  // the host's slots first: both flavours read one table
      GroupEmitter(gb, g, grp, phase, plan).emit();
      gb.finish();
      verify(name, gb.fn, emit_gpu_kernel(*im.gpu_module, gb.fn, name, shape, gb.direct_buffers()));
      sizes = std::move(gb.sizes);
    }
    im.codelets.push_back(std::move(k));
    return EmittedCodelet{index, std::move(sizes), std::move(extent), kb.grain, std::nullopt};
  };
  const ReducePlan plan = grp.kind == FusionGroup::Kind::Reduce ? plan_reduction(g, g.node(grp.anchor)) : ReducePlan{};
  if (plan.chunks == 1) return emit_kernel(real([](NodeId) { return true; }), ReducePhase::Whole, plan, "");
  // Two phases: the prologue and the chunks' partials, then the partials' combination and
  // the epilogue (each kernel counts the members on its side of the anchor, and the anchor).
  EmittedCodelet part = emit_kernel(real([&](NodeId id) { return id <= grp.anchor; }), ReducePhase::Partial, plan, "_partial");
  EmittedCodelet k = emit_kernel(real([&](NodeId id) { return id >= grp.anchor; }), ReducePhase::Finish, plan, "");
  k.partial = EmittedCodelet::Partial{part.codelet, std::move(part.sizes), std::move(part.extent), part.grain,
                                     plan.scratch_type, plan.scratch_elements};
  return k;
}

EmittedCodelet CodeletCompiler::emit_horizontal(const Graph& g, const std::vector<const FusionGroup*>& groups,
                                              const std::vector<bool>& inlined, const EmitOptions& options) {
  Impl& im = *impl_;
  if (im.sealed()) throw InternalError("kernel compiler: emit() after the host code was compiled");
  size_t inputs = 0;
  uint32_t nodes = 0;
  for (const FusionGroup* grp : groups) {
    if (grp->kind != FusionGroup::Kind::Loop) throw InternalError("kernel compiler: a horizontal kernel of a non-loop group");
    for (NodeId id : grp->nodes) {
      if (!handles(g, id)) throw InternalError(fmt::format("kernel compiler: no kernel for node {} ({})", id, op_name(g.node(id).op)));
      nodes += !inlined.at(id) || id == grp->root;
    }
    inputs += grp->inputs.size();
  }
  const auto index = static_cast<uint32_t>(im.codelets.size());
  const std::string name = fmt::format("k{}_horizontal_x{}", index, groups.size());
  // Segment s's buffer k: its inputs among all inputs, its outputs among all outputs.
  std::vector<std::vector<size_t>> maps;
  size_t in_base = 0, out_base = 0;
  for (const FusionGroup* grp : groups) {
    std::vector<size_t> map;
    for (size_t k = 0; k < grp->inputs.size(); ++k) map.push_back(in_base + k);
    for (size_t k = 0; k < grp->outputs.size(); ++k) map.push_back(inputs + out_base + k);
    in_base += grp->inputs.size();
    out_base += grp->outputs.size();
    maps.push_back(std::move(map));
  }
  // One size table for every segment of both flavours: the host bodies' own slots one
  // after the other (each body reads its tables from its first slot and buffer, so that
  // alike segments share one body), then the segments' extents; each GPU body is seeded
  // with every slot before it.
  std::vector<rt::SizeExpr> sizes;
  std::vector<Segment> host, gpu;
  rt::SizeExpr total;
  std::vector<rt::SizeExpr> extents;
  for (size_t s = 0; s < groups.size(); ++s) {
    CodeletBuilder kb(*im.module, im.symbols, fmt::format("{}.body{}", name, s));
    kb.training = options.training;
    extents.push_back(GroupEmitter(kb, g, *groups[s], ReducePhase::Whole, ReducePlan{}).emit());
    kb.finish();
    Segment seg{share_body(im, kb.fn), kb.split(), 0, maps[s], sizes.size()};
    sizes.insert(sizes.end(), kb.sizes.begin(), kb.sizes.end());
    host.push_back(std::move(seg));
  }
  for (size_t s = 0; s < groups.size(); ++s) {
    host[s].extent_slot = sizes.size();
    sizes.push_back(extents[s]);
    for (const rt::SizeExpr::Term& t : extents[s].terms) total.terms.push_back(t);
  }
  llvm::Function* wrapper = emit_host_horizontal(*im.module, name, host);
  for (const Segment& seg : host) verify(name, seg.body, wrapper);
  Impl::Codelet k;
  k.name = k.symbol = name;
  k.body = host.front().body;
  share_identical(im, k, wrapper);
  k.gpu_mapping = rt::GpuMapping::Thread;
  k.gpu_block = 256;
  k.nodes = nodes;
  if (im.gpu_module) {
    for (size_t s = 0; s < groups.size(); ++s) {
      CodeletBuilder gb(*im.gpu_module, im.symbols, fmt::format("{}.body{}", name, s), KernelTarget::Gpu, GpuShape{false, k.gpu_block});
      gb.training = options.training;
      gb.buffer_map = maps[s];
      gb.seed_sizes(sizes);
      GroupEmitter(gb, g, *groups[s], ReducePhase::Whole, ReducePlan{}).emit();
      gb.finish();
      gpu.push_back(Segment{gb.fn, std::nullopt, host[s].extent_slot});
      sizes = std::move(gb.sizes);
    }
    llvm::Function* kernel = emit_gpu_horizontal(*im.gpu_module, name, gpu, k.gpu_block);
    for (const Segment& seg : gpu) verify(name, seg.body, kernel);
  }
  im.codelets.push_back(std::move(k));
  return EmittedCodelet{index, std::move(sizes), std::move(total), 4096, std::nullopt};
}

}  // namespace modelc
