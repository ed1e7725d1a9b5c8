#include "compiler/passes/predict.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <vector>

#include "compiler/passes/simplify.h"
#include "compiler/support/diagnostics.h"

namespace modelc {

namespace {

// For each node, the first target input it reads ("" for none); nodes are in topological order.
std::vector<std::string> target_reads(const Graph& g, const std::set<std::string>& targets) {
  std::vector<std::string> reads(g.nodes.size());
  for (NodeId id = 0; id < g.nodes.size(); ++id) {
    const Node& n = g.nodes[id];
    if (n.op == OpKind::Input && targets.count(n.name)) reads[id] = n.name;
    for (const Value& v : n.inputs)
      if (v.valid() && reads[id].empty()) reads[id] = reads[v.node];
  }
  return reads;
}

}  // namespace

Graph predict_graph(const Graph& g, const std::set<std::string>& targets, bool requested) {
  const std::vector<std::string> reads = target_reads(g, targets);
  Graph out = g;
  out.outputs.clear();
  std::vector<std::string> dropped;
  std::string target;  // the target the dropped outputs read
  SourceLoc at;        // the first of them
  for (const Graph::Output& o : g.outputs) {
    const std::string& t = reads[o.value.node];
    if (t.empty()) {
      out.outputs.push_back(o);
    } else if (requested) {
      throw SourceError(o.loc, fmt::format("--output {}: '{}' of model '{}' depends on its target input '{}', which prediction "
                                  "is not given; name a value computed before the loss (such as its logits)",
                                  o.name, o.name, g.name, t));
    } else {
      dropped.push_back(o.name);
      if (target.empty()) {
        target = t;
        at = o.loc;
      }
    }
  }
  if (out.outputs.empty())
    throw SourceError(at, fmt::format("model '{}' has nothing to predict: every output ({}) depends on the target input "
                                "'{}'; name the value to predict with --output NAME, a tensor of the model's body "
                                "computed before the loss (such as its logits)",
                                g.name, fmt::join(dropped, ", "), target));
  return simplify(out, nullptr, /*keep_inputs=*/false);
}

}  // namespace modelc
