// Rematerialization (recompute.h): splitting a train step into forward and rest, cloning
// dropped forward nodes in front of their first backward reader, their cost, and the
// annotated and sqrt(n) placement policies.
#include "compiler/passes/recompute.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <set>
#include <utility>

#include "compiler/ir/op_registry.h"
#include "compiler/ir/verifier.h"

namespace modelc {

namespace {

// Inputs, params and states: fed, never recomputed.
std::vector<bool> sources_of(const Graph& g) {
  std::vector<bool> s(g.nodes.size(), false);
  for (const auto* list : {&g.inputs, &g.params, &g.states})
    for (NodeId id : *list)
      if (id < s.size()) s[id] = true;
  return s;
}

// Nodes whose value a graph output or update reads (kept to the end of the step anyway).
std::vector<bool> read_by_results(const Graph& g) {
  std::vector<bool> r(g.nodes.size(), false);
  for (const Graph::Output& o : g.outputs)
    if (o.value.valid()) r.at(o.value.node) = true;
  for (const Graph::Update& u : g.updates)
    if (u.value.valid()) r.at(u.value.node) = true;
  return r;
}

// The scope's prefixes by components, shortest first: "a.0/b.1" -> "", "a.0", "a.0/b.1".
std::vector<std::string> scope_prefixes(const std::string& scope) {
  std::vector<std::string> p{""};
  if (scope.empty()) return p;
  for (size_t at = scope.find('/'); at != std::string::npos; at = scope.find('/', at + 1)) p.push_back(scope.substr(0, at));
  p.push_back(scope);
  return p;
}

}  // namespace

StepParts split_step(const Graph& step) {
  StepParts p;
  const Graph::Output* loss = nullptr;
  for (const Graph::Output& o : step.outputs)
    if (o.name == "loss") loss = &o;
  if (!loss || !loss->value.valid() || loss->value.node >= step.nodes.size())
    throw InternalError(fmt::format("internal error: '{}' is not a train step: it has no output 'loss'", step.name));
  p.loss = loss->value;
  p.forward.assign(step.nodes.size(), false);
  p.forward[p.loss.node] = true;
  for (NodeId id = p.loss.node + 1; id-- > 0;) {
    if (!p.forward[id]) continue;
    for (const Value& v : step.nodes[id].inputs)
      if (v.valid()) p.forward.at(v.node) = true;
  }
  std::vector<bool> src = sources_of(step), saved(step.nodes.size(), false);
  for (NodeId id = 0; id < step.nodes.size(); ++id) {
    (p.forward[id] ? p.forward_nodes : p.rest).push_back(id);
    if (p.forward[id]) continue;
    for (const Value& v : step.nodes[id].inputs)
      if (v.valid() && p.forward.at(v.node) && !src[v.node]) saved[v.node] = true;
  }
  for (NodeId id = 0; id < step.nodes.size(); ++id)
    if (saved[id]) p.saved.push_back(id);
  return p;
}

// Long by design: one graph rewrite over shared maps (clone, place, rewire).
Recomputed recompute(const Graph& step, const std::vector<NodeId>& drop) {
  StepParts parts = split_step(step);
  const size_t n = step.nodes.size();
  std::vector<bool> src = sources_of(step), dropped(n, false);
  for (NodeId id : drop) {
    if (id >= n)
      throw InternalError(fmt::format("internal error: recompute: node %{} is not in '{}' ({} nodes)", id, step.name, n));
    const Node& node = step.nodes[id];
    if (src[id])
      throw InternalError(fmt::format("internal error: recompute: %{} ({} '{}') is an input, param or state of '{}' "
                                      "and cannot be recomputed",
                                      id, op_name(node.op), node.name, step.name));
    if (!parts.forward[id])
      throw InternalError(fmt::format("internal error: recompute: %{} ({}) is not a forward node of '{}' (not an "
                                      "ancestor of its loss)",
                                      id, op_name(node.op), step.name));
    dropped[id] = true;
  }

  Recomputed r;
  Graph& g = r.graph;
  g.name = step.name;
  g.dims = step.dims;
  r.new_id.assign(n, kNoNode);
  std::vector<NodeId> clone(n, kNoNode);
  std::vector<bool> queued(n, false);
  auto add_remapped = [&](Node c, bool use_clones) {
    for (Value& v : c.inputs) {
      if (!v.valid()) continue;
      NodeId to = use_clones && dropped[v.node] ? clone[v.node] : r.new_id[v.node];
      MODELC_CHECK(to != kNoNode, "recompute: an input was not emitted before its reader");
      v.node = to;
    }
    return g.add(std::move(c));
  };
  for (NodeId id = 0; id < n; ++id) {
    const Node& node = step.nodes[id];
    if (!parts.forward[id]) {
      // The dropped nodes this reader needs that have no clone yet, with the dropped nodes
      // those need in turn; emitted in original (topological) order.
      std::vector<NodeId> need, stack;
      auto want = [&](const Value& v) {
        if (v.valid() && dropped[v.node] && clone[v.node] == kNoNode && !queued[v.node]) {
          queued[v.node] = true;
          need.push_back(v.node);
          stack.push_back(v.node);
        }
      };
      for (const Value& v : node.inputs) want(v);
      while (!stack.empty()) {
        NodeId d = stack.back();
        stack.pop_back();
        for (const Value& v : step.nodes[d].inputs) want(v);
      }
      std::sort(need.begin(), need.end());
      for (NodeId d : need) {
        clone[d] = add_remapped(step.nodes[d], true);
        r.original.emplace(clone[d], d);
      }
    }
    // Forward nodes read the originals; the rest read clones of dropped values.
    r.new_id[id] = add_remapped(node, !parts.forward[id]);
  }

  auto remap = [&](std::vector<NodeId>& to, const std::vector<NodeId>& from) {
    for (NodeId id : from) to.push_back(r.new_id.at(id));
  };
  remap(g.inputs, step.inputs);
  remap(g.params, step.params);
  remap(g.states, step.states);
  for (Graph::Output o : step.outputs) {
    if (o.value.valid()) o.value.node = r.new_id.at(o.value.node);
    g.outputs.push_back(std::move(o));
  }
  for (Graph::Update u : step.updates) {
    u.target = r.new_id.at(u.target);
    if (u.value.valid()) u.value.node = r.new_id.at(u.value.node);
    g.updates.push_back(u);
  }
  auto problems = verify_graph(g);
  if (!problems.empty())
    throw InternalError(fmt::format("internal error: recompute made '{}' malformed: {}", step.name, problems.front()));
  return r;
}

ByteSize bytes_under(std::map<std::string, int64_t> dims) {
  return [dims = std::move(dims)](const TensorType& t) -> int64_t {
    int64_t n = dtype_bytes(t.dtype);
    for (const Dim& d : t.shape) {
      std::optional<int64_t> v = d.evaluate(dims);
      if (!v) throw InternalError(fmt::format("internal error: sizing {}: dimension {} is not bound", t.str(), d.str()));
      n *= *v;
    }
    return n;
  };
}

std::vector<NodeId> annotated_drop(const Graph& step) {
  StepParts parts = split_step(step);
  std::vector<bool> src = sources_of(step), results = read_by_results(step);
  auto marked = [&](NodeId id) { return parts.forward[id] && step.nodes[id].checkpoint && !src[id]; };
  // Scopes that hold an unmarked forward node (and their enclosing scopes).
  std::set<std::string> impure;
  for (NodeId id : parts.forward_nodes)
    if (!src[id] && !marked(id))
      for (std::string& p : scope_prefixes(step.nodes[id].scope)) impure.insert(std::move(p));
  // Region of each marked node: its shortest pure scope prefix, or "" for a one-node region
  // (kept apart from the others by the node id).
  std::vector<std::string> region(step.nodes.size());
  std::vector<bool> alone(step.nodes.size(), false);
  for (NodeId id : parts.forward_nodes) {
    if (!marked(id)) continue;
    alone[id] = true;
    for (std::string& p : scope_prefixes(step.nodes[id].scope))
      if (!impure.count(p)) {
        region[id] = std::move(p);
        alone[id] = false;
        break;
      }
  }
  // Boundaries: marked nodes a forward node outside their region reads, or a result reads.
  std::vector<bool> boundary(step.nodes.size(), false);
  for (NodeId id : parts.forward_nodes)
    for (const Value& v : step.nodes[id].inputs) {
      if (!v.valid() || !marked(v.node) || alone[v.node]) continue;
      bool same = marked(id) && !alone[id] && region[id] == region[v.node];
      if (!same) boundary[v.node] = true;
    }
  std::vector<NodeId> drop;
  for (NodeId id : parts.forward_nodes)
    if (marked(id) && (alone[id] || (!boundary[id] && !results[id]))) drop.push_back(id);
  return drop;
}

std::vector<NodeId> sqrt_n_drop(const Graph& step, const ByteSize& bytes) {
  const size_t n = split_step(step).saved.size();
  return segment_drop(step, bytes, std::max<int64_t>(1, std::llround(std::sqrt(static_cast<double>(n)))));
}

std::vector<NodeId> segment_drop(const Graph& step, const ByteSize& bytes, int64_t segments) {
  StepParts parts = split_step(step);
  if (parts.saved.empty()) return {};
  std::vector<bool> src = sources_of(step), results = read_by_results(step);
  std::vector<bool> saved(step.nodes.size(), false);
  for (NodeId id : parts.saved) saved[id] = true;

  // Each candidate's weight: its output bytes, or 1 when no candidate has a size.
  std::vector<int64_t> weight(step.nodes.size(), 0);
  int64_t total = 0;
  for (NodeId id : parts.saved) {
    for (const TensorType& t : step.nodes[id].outputs) weight[id] += bytes(t);
    total += weight[id];
  }
  if (total == 0) {
    for (NodeId id : parts.saved) weight[id] = 1;
    total = static_cast<int64_t>(parts.saved.size());
  }
  const int64_t k = std::max<int64_t>(1, segments);

  // The schedule and its cuts: segment s ends after the node at which the candidate bytes
  // so far reach s * total / k (s = 1 .. k-1). `segment` numbers every scheduled node.
  std::vector<NodeId> schedule;
  for (NodeId id : parts.forward_nodes)
    if (!src[id]) schedule.push_back(id);
  std::vector<int64_t> segment(step.nodes.size(), -1);
  int64_t seg = 0, sum = 0;
  for (NodeId id : schedule) {
    segment[id] = seg;
    sum += weight[id];
    // sum * k >= (seg + 1) * total, in doubles: the product of bytes and k may be large.
    while (seg + 1 < k && static_cast<double>(sum) * static_cast<double>(k) >= static_cast<double>(seg + 1) * static_cast<double>(total))
      ++seg;
  }
  // Kept: values a forward node of a later segment reads, values results read, and the
  // last segment (the backward starts with it: recomputing it would save nothing).
  std::vector<bool> keep = results;
  for (NodeId id : schedule) {
    if (segment[id] == segment[schedule.back()]) keep[id] = true;
  }
  for (NodeId id : schedule)
    for (const Value& v : step.nodes[id].inputs)
      if (v.valid() && !src[v.node] && segment[v.node] < segment[id]) keep[v.node] = true;
  std::vector<NodeId> drop;
  for (NodeId id : schedule)
    if (!keep[id]) drop.push_back(id);
  return drop;
}

}  // namespace modelc
