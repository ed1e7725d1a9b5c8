#include "compiler/passes/simplify.h"

#include <map>
#include <tuple>

#include "compiler/ir/op_registry.h"

namespace modelc {

namespace {

bool is_source(OpKind op) { return op == OpKind::Input || op == OpKind::Param || op == OpKind::State; }

// The constant `n` folds to, when every input is a constant (see simplify.h).
std::optional<double> fold(const Graph& g, const Node& n) {
  if (n.inputs.empty() || n.outputs.size() != 1) return std::nullopt;
  std::vector<double> values;
  for (const Value& v : n.inputs) {
    if (!v.valid() || g.node(v.node).op != OpKind::Constant || !g.node(v.node).attrs.has("value")) return std::nullopt;
    values.push_back(g.node(v.node).attrs.f("value"));
  }
  const OpInfo& info = op_info(n.op);
  if (info.pointwise) return round_to_dtype(info.pointwise(values.data(), n.attrs), n.outputs[0].dtype);
  if (info.fusion == FusionKind::Broadcast && values.size() == 1 && g.type(n.inputs[0]).dtype == n.outputs[0].dtype)
    return values[0];
  return std::nullopt;
}

// Dead nodes: what no output, update or live node reads; sources stay (inputs only with
// keep_inputs). `to`: where each node's value lives after merging (merged nodes are dead).
Graph without_dead(const Graph& g, const std::vector<NodeId>& to, bool keep_inputs, SimplifyStats& s) {
  std::vector<char> live(g.nodes.size(), 0);
  for (const Graph::Output& o : g.outputs) live[o.value.node] = 1;
  for (const Graph::Update& u : g.updates) live[u.value.node] = live[u.target] = 1;
  for (NodeId id = static_cast<NodeId>(g.nodes.size()); id-- > 0;) {
    const OpKind op = g.nodes[id].op;
    if (is_source(op) && to[id] == id && (keep_inputs || op != OpKind::Input)) live[id] = 1;
    if (!live[id]) continue;
    for (const Value& v : g.nodes[id].inputs)
      if (v.valid()) live[v.node] = 1;
  }
  Graph out = g;
  out.nodes.clear();
  std::vector<NodeId> renum(g.nodes.size(), kNoNode);
  for (NodeId id = 0; id < g.nodes.size(); ++id) {
    if (!live[id]) {
      s.removed += to[id] == id;  // merged nodes are counted as merged
      continue;
    }
    Node n = g.nodes[id];
    for (Value& v : n.inputs)
      if (v.valid()) v.node = renum.at(v.node);
    renum[id] = out.add(std::move(n));
  }
  auto remap = [&](std::vector<NodeId>& ids) {
    for (NodeId& id : ids) id = renum.at(id);
  };
  std::erase_if(out.inputs, [&](NodeId id) { return renum[id] == kNoNode; });  // unread, without keep_inputs
  remap(out.inputs);
  remap(out.params);
  remap(out.states);
  for (Graph::Output& o : out.outputs) o.value.node = renum.at(o.value.node);
  for (Graph::Update& u : out.updates) {
    u.value.node = renum.at(u.value.node);
    u.target = renum.at(u.target);
  }
  return out;
}

}  // namespace

Graph simplify(const Graph& in, SimplifyStats* stats, bool keep_inputs) {
  SimplifyStats s;
  // Folding and merging, in node order: `to[id]` is where node id's value now lives.
  Graph g = in;
  std::vector<NodeId> to(g.nodes.size());
  std::map<std::tuple<OpKind, std::vector<std::pair<NodeId, uint32_t>>>, std::vector<NodeId>> seen;
  for (NodeId id = 0; id < g.nodes.size(); ++id) {
    Node& n = g.nodes[id];
    for (Value& v : n.inputs)
      if (v.valid()) v.node = to[v.node];
    to[id] = id;
    if (is_source(n.op)) continue;
    if (std::optional<double> c = fold(g, n)) {
      n.op = OpKind::Constant;
      n.inputs.clear();
      n.attrs = Attrs();
      n.attrs.set("value", *c);
      ++s.folded;
    }
    // Elementwise and movement duplicates are left to fusion, which computes them inside each
    // consumer's codelet for free (merged, they would be written out and read back), and
    // constants, which codelets inline, keep their own source lines.
    const FusionKind kind = op_info(n.op).fusion;
    if (kind != FusionKind::Reduction && kind != FusionKind::Row && kind != FusionKind::Opaque) continue;
    std::vector<std::pair<NodeId, uint32_t>> key;
    for (const Value& v : n.inputs) key.emplace_back(v.node, v.index);
    std::vector<NodeId>& same = seen[{n.op, std::move(key)}];
    bool merged = false;
    for (NodeId other : same) {
      Node& o = g.nodes[other];
      if (o.attrs == n.attrs && o.outputs == n.outputs) {
        to[id] = other;
        o.checkpoint = o.checkpoint && n.checkpoint;  // recompute it only if both asked to
        merged = true;
        ++s.merged;
        break;
      }
    }
    if (!merged) same.push_back(id);
  }
  for (Graph::Output& o : g.outputs) o.value.node = to[o.value.node];
  for (Graph::Update& u : g.updates) u.value.node = to[u.value.node];

  Graph out = without_dead(g, to, keep_inputs, s);
  if (stats) *stats = s;
  return out;
}

}  // namespace modelc
