// Horizontal fusion of the optimizer's update groups (compiler/passes/fusion.h).
#include <set>

#include "compiler/passes/fusion.h"

namespace modelc {

void plan_horizontal(const Graph& g, FusionPlan& plan) {
  std::set<std::pair<NodeId, uint32_t>> updates;
  for (const Graph::Update& u : g.updates) updates.insert({u.value.node, u.value.index});
  std::vector<std::vector<NodeId>> readers(g.nodes.size());
  for (NodeId id = 0; id < g.nodes.size(); ++id)
    for (const Value& v : g.nodes[id].inputs)
      if (v.valid()) readers[v.node].push_back(id);
  // An update group: a loop group whose every output is an update that nothing outside the
  // group reads (so the groups of a run cannot depend on each other).
  auto update_group = [&](const FusionGroup& grp) {
    if (grp.kind != FusionGroup::Kind::Loop || grp.outputs.empty()) return false;
    const std::set<NodeId> members(grp.nodes.begin(), grp.nodes.end());
    for (const Value& v : grp.outputs) {
      if (!updates.count({v.node, v.index})) return false;
      for (NodeId r : readers[v.node])
        if (!members.count(r) || (plan.inlined[r] && r != grp.root)) return false;
    }
    return true;
  };
  // The segments of one kernel run concurrently (different threads take different parts
  // of its work items), so a group may not read a value another group of its run writes
  // in place (plan_in_place): such a group starts a new run.
  auto overwritten = [&](const FusionGroup& grp) {
    std::set<std::pair<NodeId, uint32_t>> s;
    for (size_t k = 0; k < grp.overwrites.size(); ++k)
      if (grp.overwrites[k] >= 0) {
        const Value& v = grp.inputs.at(static_cast<size_t>(grp.overwrites[k]));
        s.insert({v.node, v.index});
      }
    return s;
  };
  plan.horizontal.clear();
  std::vector<size_t> run;
  std::set<std::pair<NodeId, uint32_t>> read, written;
  auto close = [&] {
    if (run.size() >= 2) plan.horizontal.push_back(run);
    run.clear();
    read.clear();
    written.clear();
  };
  for (size_t gi = 0; gi < plan.groups.size(); ++gi) {
    const FusionGroup& grp = plan.groups[gi];
    if (!update_group(grp)) {
      close();
      continue;
    }
    const auto mine = overwritten(grp);
    bool conflict = false;
    for (const Value& v : grp.inputs)
      conflict |= written.count({v.node, v.index}) && !mine.count({v.node, v.index});
    for (const auto& v : mine) conflict |= read.count(v) > 0;
    if (conflict) close();
    run.push_back(gi);
    for (const Value& v : grp.inputs) read.insert({v.node, v.index});
    written.insert(mine.begin(), mine.end());
  }
  close();
}

}  // namespace modelc
