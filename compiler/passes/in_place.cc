// In-place updates: the new values of parameters and optimizer state written over the old
// ones (compiler/passes/fusion.h, plan_in_place).
#include <algorithm>

#include "compiler/passes/fusion.h"

namespace modelc {

void plan_in_place(const Graph& g, FusionPlan& plan) {
  const size_t n = g.nodes.size();
  std::vector<int> group_of(n, -1);
  for (size_t gi = 0; gi < plan.groups.size(); ++gi)
    for (NodeId id : plan.groups[gi].nodes)
      if (!plan.inlined.at(id) || id == plan.groups[gi].root) group_of[id] = static_cast<int>(gi);
  std::vector<std::vector<NodeId>> readers(n);
  for (NodeId id = 0; id < n; ++id)
    for (const Value& v : g.nodes[id].inputs)
      if (v.valid()) readers[v.node].push_back(id);
  std::vector<bool> output(n, false);
  for (const Graph::Output& o : g.outputs) output[o.value.node] = true;

  for (FusionGroup& grp : plan.groups) grp.overwrites.assign(grp.outputs.size(), -1);
  for (const Graph::Update& u : g.updates) {
    const NodeId old = u.target;
    const int gi = group_of.at(u.value.node);
    if (gi < 0 || output[old]) continue;
    FusionGroup& grp = plan.groups[static_cast<size_t>(gi)];
    if (grp.kind != FusionGroup::Kind::Loop) continue;
    auto out = std::find(grp.outputs.begin(), grp.outputs.end(), u.value);
    auto in = std::find(grp.inputs.begin(), grp.inputs.end(), Value{old, 0});
    if (out == grp.outputs.end() || in == grp.inputs.end() || g.type(u.value) != g.type(Value{old, 0})) continue;
    const Shape& shape = g.type(Value{old, 0}).shape;
    bool safe = true;
    for (NodeId r : readers[old]) {
      if (plan.inlined[r]) safe = false;  // recomputed wherever it is read, perhaps later
      else if (group_of[r] == gi) safe = safe && g.nodes[r].outputs.at(0).shape == shape;  // reads its own element
      else safe = safe && group_of[r] >= 0 && group_of[r] < gi;
    }
    // A second output of this group over the same old value cannot exist (one update per
    // target), and no other output may take this input's place.
    if (!safe) continue;
    grp.overwrites[static_cast<size_t>(out - grp.outputs.begin())] = static_cast<int>(in - grp.inputs.begin());
  }
}

}  // namespace modelc
