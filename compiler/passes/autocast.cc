// The autocast pass (autocast.h): a copy of the graph, node by node, with casts around the
// ops whose registry policy asks for another type.
#include "compiler/passes/autocast.h"

#include <fmt/format.h>

#include <map>

#include "compiler/ir/op_registry.h"

namespace modelc {

DType precision_dtype(std::string_view precision) {
  if (precision == "fp32") return DType::F32;
  if (precision == "bf16") return DType::BF16;
  if (precision == "fp16") return DType::F16;
  throw UserError(fmt::format("unknown precision '{}'; expected fp32, bf16 or fp16", precision));
}

namespace {

class Autocast {
 public:
  Autocast(const Graph& g, DType low) : g_(g), low_(low) {}

  Graph run() {
    out_.name = g_.name;
    out_.dims = g_.dims;
    map_.resize(g_.nodes.size());
    for (NodeId id = 0; id < g_.nodes.size(); ++id) copy(id);
    for (NodeId id : g_.inputs) out_.inputs.push_back(map_[id].at(0).node);
    for (NodeId id : g_.params) out_.params.push_back(map_[id].at(0).node);
    for (NodeId id : g_.states) out_.states.push_back(map_[id].at(0).node);
    for (const Graph::Output& o : g_.outputs) out_.outputs.push_back({o.name, mapped(o.value), o.loc});
    // A buffer keeps its type: an update computed in the low type is cast back to it.
    for (const Graph::Update& u : g_.updates) {
      const NodeId target = map_[u.target].at(0).node;
      out_.updates.push_back({target, cast(mapped(u.value), out_.node(target).outputs[0].dtype, g_.node(u.value.node))});
    }
    return std::move(out_);
  }

 private:
  const Graph& g_;
  const DType low_;
  Graph out_;
  std::vector<std::vector<Value>> map_;             // g_'s node -> its values in out_
  std::map<std::pair<NodeId, uint32_t>, Value> casts_;  // (out_ value, dtype) -> its cast

  Value mapped(Value v) const { return v.valid() ? map_.at(v.node).at(v.index) : v; }

  // `v` (of out_) as type `t`, through one shared cast node; `like` lends the cast its
  // location, scope and checkpoint mark.
  Value cast(Value v, DType t, const Node& like) {
    if (out_.type(v).dtype == t) return v;
    const uint32_t key = static_cast<uint32_t>(t) << 24 | v.index;
    if (auto it = casts_.find({v.node, key}); it != casts_.end()) return it->second;
    Attrs a;
    a.set("dtype", t);
    InferFailure f;
    auto id = add_op(out_, OpKind::Cast, {v}, std::move(a), like.loc, &f);
    if (!id) throw InternalError(fmt::format("autocast: a cast to {} fails: {}", dtype_name(t), f.message));
    out_.nodes[*id].scope = like.scope;
    out_.nodes[*id].checkpoint = like.checkpoint;
    return casts_[{v.node, key}] = Value{*id, 0};
  }

  // The type policy p wants for a float input of type t (t itself: no cast).
  DType wanted(AutocastPolicy p, DType t) const {
    if (!is_float(t)) return t;
    if (p == AutocastPolicy::Lower) return low_;
    if (p == AutocastPolicy::F32) return DType::F32;
    return t;
  }

  void copy(NodeId id) {
    const Node& n = g_.nodes[id];
    const AutocastPolicy p = op_info(n.op).autocast;
    std::vector<Value> ins;
    bool changed = false;
    for (const Value& v : n.inputs) {
      Value m = mapped(v);
      if (m.valid() && p != AutocastPolicy::Follow) {
        const DType t = out_.type(m).dtype;
        if (wanted(p, t) != t) {
          m = cast(m, wanted(p, t), n);
          changed = true;
        }
      }
      ins.push_back(m);
    }
    std::vector<Value>& vals = map_[id];
    if (!changed) {
      Node c = n;
      c.inputs = std::move(ins);
      const NodeId nid = out_.add(std::move(c));
      for (uint32_t k = 0; k < n.outputs.size(); ++k) vals.push_back(Value{nid, k});
      return;
    }
    // The shape rule gives the new output types (the low type for matmul and conv).
    InferFailure f;
    auto nid = add_op(out_, n.op, std::move(ins), n.attrs, n.loc, &f);
    if (!nid) throw InternalError(fmt::format("autocast: {} in {} fails: {}", op_name(n.op), dtype_name(low_), f.message));
    Node& made = out_.nodes[*nid];
    made.name = n.name;
    made.scope = n.scope;
    made.checkpoint = n.checkpoint;
    if (made.outputs.size() != n.outputs.size())
      throw InternalError(fmt::format("autocast: {} changed its number of outputs", op_name(n.op)));
    const Node like = made;
    for (uint32_t k = 0; k < n.outputs.size(); ++k) vals.push_back(cast(Value{*nid, k}, n.outputs[k].dtype, like));
  }
};

}  // namespace

Graph autocast(const Graph& g, DType low) {
  if (low != DType::BF16 && low != DType::F16)
    throw InternalError(fmt::format("autocast to {}: only bf16 and f16 are low-precision types", dtype_name(low)));
  return Autocast(g, low).run();
}

}  // namespace modelc
