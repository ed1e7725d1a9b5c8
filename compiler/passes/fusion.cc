#include "compiler/passes/fusion.h"

#include <algorithm>
#include <fmt/format.h>
#include <map>
#include <optional>
#include <set>

#include "compiler/ir/op_registry.h"
#include "compiler/passes/library_epilogue.h"

namespace modelc {
namespace {

enum class Role { Buffer, Leaf, Elem, Reduce, Row, Library };

bool one_element(const Shape& s) {
  return std::all_of(s.begin(), s.end(), [](const Dim& d) { return d == Dim(1); });
}

class Planner {
 public:
  Planner(const Graph& g, const FusionOptions& o) : g_(g), o_(o), n_(g.nodes.size()) {
    role_.resize(n_);
    users_.resize(n_);
    sink_.assign(n_, false);
    group_of_.assign(n_, -1);
    plan_.inlined.assign(n_, false);
    for (NodeId id = 0; id < n_; ++id) {
      role_[id] = role(id);
      for (uint32_t k = 0; k < g.nodes[id].inputs.size(); ++k)
        if (const Value& v = g.nodes[id].inputs[k]; v.valid()) users_[v.node].push_back({id, k});
    }
    for (const Graph::Output& out : g.outputs) sink_[out.value.node] = true;
    for (const Graph::Update& u : g.updates) sink_[u.value.node] = true;
    bound_inline_cones();
  }

  FusionPlan run() {
    plan_epilogues();
    for (NodeId id = n_; id-- > 0;) assign(id);
    // Groups were created from the last node backwards; a group's root is its last member
    // and every value another group reads is a root, so ordering by root is topological.
    std::vector<size_t> order(groups_.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return groups_[a].root < groups_[b].root; });
    for (size_t i : order) {
      FusionGroup& grp = groups_[i];
      finish(grp);
      plan_.groups.push_back(std::move(grp));
    }
    return std::move(plan_);
  }

 private:
  struct Use {
    NodeId user;
    uint32_t input;
  };

  const Shape& shape(NodeId id) const { return g_.nodes[id].outputs.at(0).shape; }

  Role role(NodeId id) const {
    const Node& n = g_.nodes[id];
    const FusionKind k = op_info(n.op).fusion;
    const bool emit = o_.can_emit && o_.can_emit(g_, id);
    if (k == FusionKind::Source) return emit ? Role::Leaf : Role::Buffer;
    if (!emit) return Role::Library;
    if (k == FusionKind::Reduction) return Role::Reduce;
    if (k == FusionKind::Row) return Role::Row;
    return Role::Elem;
  }

  // Cheap enough to recompute wherever it is read, whatever its inputs.
  bool cheap(NodeId id) const {
    return role_[id] == Role::Leaf || (role_[id] == Role::Elem && one_element(shape(id)));
  }

  // Recomputed wherever it is read instead of being stored.
  bool inlinable(NodeId id) const { return o_.enabled && cheap(id) && !materialised_[id]; }

  // A cheap node read more than once whose recomputation would repeat more than
  // kMaxInlineCone nodes is stored instead (fusion.h). cone: the nodes an inlined read
  // re-emits (shared inputs counted once per path: an upper bound).
  void bound_inline_cones() {
    materialised_.assign(n_, false);
    std::vector<size_t> cone(n_, 0);
    for (NodeId id = 0; id < n_; ++id) {
      if (!cheap(id)) continue;
      size_t c = 1;
      for (const Value& v : g_.nodes[id].inputs)
        if (v.valid()) c += cone[v.node];
      if (c > kMaxInlineCone && users_[id].size() > 1) materialised_[id] = true;
      else cone[id] = c;
    }
  }

  int new_group(NodeId id, FusionGroup::Kind kind) {
    FusionGroup grp;
    grp.kind = kind;
    grp.root = id;
    if (kind != FusionGroup::Kind::Loop) grp.anchor = id;
    grp.nodes.push_back(id);
    groups_.push_back(std::move(grp));
    group_of_[id] = static_cast<int>(groups_.size() - 1);
    return group_of_[id];
  }

  static FusionGroup::Kind kind_of(Role r) {
    if (r == Role::Reduce) return FusionGroup::Kind::Reduce;
    if (r == Role::Row) return FusionGroup::Kind::Row;
    if (r == Role::Library) return FusionGroup::Kind::Library;
    return FusionGroup::Kind::Loop;
  }

  void assign(NodeId id) {
    const Role r = role_[id];
    if (r == Role::Buffer) return;
    if (absorb_epilogue(id)) return;
    if (inlinable(id)) {
      plan_.inlined[id] = true;
      // Materialised too when a library call or the graph's outputs read it.
      bool needed = sink_[id];
      for (const Use& u : users_[id]) needed |= role_[u.user] == Role::Library;
      if (needed) new_group(id, FusionGroup::Kind::Loop);
      return;
    }
    if (r == Role::Library || !o_.enabled) {
      new_group(id, kind_of(r));
      return;
    }
    if (int gi = fusible_into(id); gi >= 0) {
      FusionGroup& grp = groups_[static_cast<size_t>(gi)];
      grp.nodes.push_back(id);
      group_of_[id] = gi;
      if (r == Role::Reduce || r == Role::Row) {
        grp.anchor = id;
        grp.kind = kind_of(r);
      }
      return;
    }
    new_group(id, kind_of(r));
  }

  // The group `id` can join (every user in it, read element for element), or -1.
  int fusible_into(NodeId id) const {
    const std::vector<Use>& us = users_[id];
    if (us.empty()) return -1;
    int gi = -1;
    for (const Use& u : us) {
      if (plan_.inlined[u.user]) return -1;  // an inlined user would recompute it: keep it in memory
      int ug = group_of_[u.user];
      if (ug < 0 || (gi >= 0 && ug != gi)) return -1;
      gi = ug;
    }
    const FusionGroup& grp = groups_[static_cast<size_t>(gi)];
    if (grp.kind == FusionGroup::Kind::Library) return -1;
    for (const Use& u : us) {
      const bool anchor_input = u.user == grp.anchor && u.input == 0;
      if (u.user == grp.anchor && !anchor_input) return -1;  // layer_norm's weight, the targets
      if (!anchor_input && shape(u.user) != shape(id)) return -1;  // broadcast or one_hot: not element for element
    }
    if (sink_[id] && shape(id) != shape(grp.root)) return -1;  // an output is stored at the loop's index
    if (role_[id] == Role::Reduce || role_[id] == Role::Row) {
      if (grp.anchor != kNoNode) return -1;
      for (NodeId m : grp.nodes)
        if (!plan_.inlined[m] && shape(m) != shape(id)) return -1;
    }
    return gi;
  }

  // Members in order, inlined nodes the members read, inputs and outputs.
  void finish(FusionGroup& grp) {
    std::set<NodeId> members(grp.nodes.begin(), grp.nodes.end());
    std::set<NodeId> seen;
    std::vector<NodeId> inl;
    std::vector<std::pair<NodeId, Value>> reads;  // (reader, value), to order inputs by first use
    std::function<void(NodeId)> visit = [&](NodeId id) {
      for (const Value& v : g_.nodes[id].inputs) {
        if (!v.valid()) continue;
        if (members.count(v.node)) continue;
        if (plan_.inlined[v.node] && grp.kind != FusionGroup::Kind::Library) {
          if (seen.insert(v.node).second) {
            inl.push_back(v.node);
            visit(v.node);
          }
          continue;
        }
        reads.emplace_back(id, v);
      }
    };
    std::vector<NodeId> sorted(members.begin(), members.end());
    for (NodeId id : sorted) visit(id);
    // A materialised inlined node is its own group's member (its root), not an input.
    sorted.insert(sorted.end(), inl.begin(), inl.end());
    std::sort(sorted.begin(), sorted.end());
    sorted.erase(std::unique(sorted.begin(), sorted.end()), sorted.end());
    grp.nodes = sorted;
    std::stable_sort(reads.begin(), reads.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    for (const auto& [reader, v] : reads)
      if (std::find(grp.inputs.begin(), grp.inputs.end(), v) == grp.inputs.end()) grp.inputs.push_back(v);
    for (NodeId id : members) {
      bool out = id == grp.root || sink_[id];
      for (const Use& u : users_[id]) out |= !members.count(u.user);
      if (!out) continue;
      for (uint32_t k = 0; k < g_.nodes[id].outputs.size(); ++k) grp.outputs.push_back({id, k});
    }
  }

  // ------------------------------------------------------------ library epilogues
  // A matmul or conv2d (a library call) absorbs a following bias add and then an activation
  // (compiler/passes/library_epilogue.h), each only when it is the one reader of the value
  // before it and that value is no graph output. Decided before the backward walk, which
  // meets the activation before the op.
  struct Epilogue {
    NodeId op = kNoNode, add = kNoNode, activation = kNoNode;
    Value bias;
  };

  // The emittable elementwise node that is the only reader of `id` (reading it once), or
  // kNoNode when there is none, another reader, or `id` is an output.
  NodeId sole_user(NodeId id) const {
    if (sink_[id] || users_[id].size() != 1 || g_.nodes[id].outputs.size() != 1) return kNoNode;
    const NodeId u = users_[id][0].user;
    return role_[u] == Role::Elem && epilogue_tail_[u] == kNoNode ? u : kNoNode;
  }

  void plan_epilogues() {
    epilogue_tail_.assign(n_, kNoNode);
    if (!o_.enabled || !o_.library_epilogues) return;
    for (NodeId id = 0; id < n_; ++id) {
      if (role_[id] != Role::Library) continue;
      const std::optional<EpilogueAnchor> anchor = epilogue_anchor(g_, id);
      if (!anchor) continue;
      Epilogue e;
      e.op = id;
      NodeId tail = id;
      if (NodeId add = sole_user(tail); add != kNoNode && anchor->takes_bias) {
        // The bias is read from memory: a recomputed (inlined) value would need a kernel.
        if (Value b = epilogue_bias(g_, add, tail, anchor->bias_axis); b.valid() && !inlinable(b.node)) {
          e.add = add, e.bias = b;
          tail = add;
        }
      }
      if (NodeId act = sole_user(tail); act != kNoNode && shape(act) == shape(tail) &&
                                        epilogue_activation(g_, act) != rt::EpilogueActivation::None) {
        e.activation = act;
        tail = act;
      }
      if (tail == id) continue;
      for (NodeId m : {e.op, e.add, e.activation})
        if (m != kNoNode) epilogue_tail_[m] = tail;
      epilogues_[tail] = e;
    }
  }

  // Places a member of an epilogue chain: its last node opens the library group (the walk
  // is backwards), the others join it. False for every other node.
  bool absorb_epilogue(NodeId id) {
    const NodeId tail = epilogue_tail_[id];
    if (tail == kNoNode) return false;
    if (id == tail) {
      const Epilogue& e = epilogues_.at(tail);
      FusionGroup& grp = groups_[static_cast<size_t>(new_group(id, FusionGroup::Kind::Library))];
      grp.anchor = e.op;
      grp.epilogue_bias = e.bias;
      grp.epilogue_activation = e.activation;
    } else {
      const int gi = group_of_[tail];
      groups_[static_cast<size_t>(gi)].nodes.push_back(id);
      group_of_[id] = gi;
    }
    return true;
  }

  std::vector<NodeId> epilogue_tail_;      // per node: the last node of its epilogue chain
  std::map<NodeId, Epilogue> epilogues_;   // by last node

  const Graph& g_;
  const FusionOptions& o_;
  const NodeId n_;
  std::vector<Role> role_;
  std::vector<std::vector<Use>> users_;
  std::vector<bool> sink_;
  std::vector<bool> materialised_;  // cheap, but stored (bound_inline_cones)
  std::vector<int> group_of_;
  std::vector<FusionGroup> groups_;
  FusionPlan plan_;
};

const char* kind_name(FusionGroup::Kind k) {
  switch (k) {
    case FusionGroup::Kind::Loop: return "loop";
    case FusionGroup::Kind::Reduce: return "reduce";
    case FusionGroup::Kind::Row: return "row";
    case FusionGroup::Kind::Library: return "library";
  }
  return "?";
}

std::string value_str(const Value& v) { return v.index ? fmt::format("%{}.{}", v.node, v.index) : fmt::format("%{}", v.node); }

// "bias + relu", "bias", "gelu_tanh": what a library group's epilogue applies.
std::string epilogue_str(const Graph& g, const FusionGroup& grp) {
  std::string s = grp.epilogue_bias.valid() ? "bias" : "";
  if (grp.epilogue_activation != kNoNode)
    s += std::string(s.empty() ? "" : " + ") + rt::epilogue_activation_name(epilogue_activation(g, grp.epilogue_activation));
  return s;
}

}  // namespace

FusionPlan plan_fusion(const Graph& g, const FusionOptions& options) {
  FusionPlan plan = Planner(g, options).run();
  if (options.enabled && options.in_place) plan_in_place(g, plan);
  if (options.enabled && options.horizontal) plan_horizontal(g, plan);
  for (FusionGroup& grp : plan.groups) grp.overwrites.resize(grp.outputs.size(), -1);
  return plan;
}

std::string print_fusion(const Graph& g, const FusionPlan& plan,
                         const std::function<std::string(SourceLoc)>& describe) {
  size_t kernels = 0, fused = 0;
  for (const FusionGroup& grp : plan.groups) {
    if (grp.kind == FusionGroup::Kind::Library) continue;
    ++kernels;
    fused += grp.nodes.size();
  }
  std::string s = fmt::format("fusion of model {}: {} kernels for {} nodes, {} library calls", g.name, kernels,
                              fused, plan.groups.size() - kernels);
  // Horizontal runs: their groups' numbers as printed.
  std::vector<size_t> number(plan.groups.size(), 0);
  for (size_t gi = 0, k = 0; gi < plan.groups.size(); ++gi)
    if (plan.groups[gi].kind != FusionGroup::Kind::Library) number[gi] = k++;
  std::vector<std::string> horizontal(plan.groups.size());
  for (size_t r = 0; r < plan.horizontal.size(); ++r) {
    const std::vector<size_t>& run = plan.horizontal[r];
    for (size_t gi : run)
      horizontal[gi] = fmt::format("  horizontal: one kernel with groups {} to {}\n", number[run.front()], number[run.back()]);
    s += fmt::format("{}groups {} to {} as one kernel", r == 0 ? " (" : ", ", number[run.front()], number[run.back()]);
  }
  s += plan.horizontal.empty() ? "\n" : ")\n";
  size_t k = 0;
  for (size_t gi = 0; gi < plan.groups.size(); ++gi) {
    const FusionGroup& grp = plan.groups[gi];
    if (grp.kind == FusionGroup::Kind::Library && grp.nodes.size() == 1) continue;
    if (grp.kind == FusionGroup::Kind::Library) s += "\nlibrary call (epilogue " + epilogue_str(g, grp);  // no kernel
    else s += fmt::format("\ngroup {} ({}", k++, kind_name(grp.kind));
    if (grp.anchor != kNoNode) s += fmt::format(", anchor %{} {}", grp.anchor, op_name(g.nodes[grp.anchor].op));
    s += fmt::format(", {} node{})\n", grp.nodes.size(), grp.nodes.size() == 1 ? "" : "s");
    s += "  nodes:";
    for (NodeId id : grp.nodes)
      s += fmt::format(" %{}{}{}", id, plan.inlined[id] && id != grp.root ? "*" : "", fmt::format(":{}", op_name(g.nodes[id].op)));
    s += "\n  reads:";
    if (grp.inputs.empty()) s += " (nothing)";
    for (const Value& v : grp.inputs) s += " " + value_str(v);
    s += "\n  writes:";
    for (size_t o = 0; o < grp.outputs.size(); ++o) {
      const Value& v = grp.outputs[o];
      s += fmt::format(" {} {}", value_str(v), g.type(v).str());
      if (o < grp.overwrites.size() && grp.overwrites[o] >= 0)
        s += fmt::format(" (over {})", value_str(grp.inputs.at(static_cast<size_t>(grp.overwrites[o]))));
    }
    s += "\n" + horizontal[gi];
    // The source lines the members came from, in order, each once.
    std::vector<std::string> where;
    for (NodeId id : grp.nodes) {
      const SourceLoc& loc = g.nodes[id].loc;
      if (!loc.valid() || !describe) continue;
      std::string d = describe(loc);
      if (auto colon = d.rfind(':'); colon != std::string::npos) d.resize(colon);  // file:line
      if (std::find(where.begin(), where.end(), d) == where.end()) where.push_back(std::move(d));
    }
    if (!where.empty()) {
      s += "  from:";
      for (const std::string& w : where) s += " " + w;
      s += "\n";
    }
  }
  return s;
}

}  // namespace modelc
