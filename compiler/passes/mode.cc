#include "compiler/passes/mode.h"

#include "compiler/ir/op_registry.h"

namespace modelc {

Graph specialize_mode(const Graph& g, Mode mode) {
  Graph out = g;
  // What each value reads as: a replaced node's value is the chosen input's (already
  // resolved, since inputs come before their readers).
  std::vector<std::vector<Value>> as(out.nodes.size());
  auto resolve = [&as](Value v) { return v.valid() && !as[v.node].empty() ? as[v.node][v.index] : v; };
  for (NodeId id = 0; id < out.nodes.size(); ++id) {
    Node& n = out.nodes[id];
    for (Value& v : n.inputs) v = resolve(v);
    if (n.op == OpKind::ModeSelect) as[id] = {n.inputs[mode == Mode::Train ? 0 : 1]};
    else if (mode == Mode::Eval) {
      // What the op's record says it is in eval (dropout: its input; fused attention: its
      // kernels' dropout rate 0).
      const OpInfo& info = op_info(n.op);
      if (info.eval_identity) as[id] = {n.inputs[0]};
      for (const auto& [name, v] : info.eval_attrs.items()) n.attrs.set(name, v);
    }
  }
  for (Graph::Output& o : out.outputs) o.value = resolve(o.value);
  for (Graph::Update& u : out.updates) u.value = resolve(u.value);
  if (mode == Mode::Eval) out.updates.clear();
  return out;
}

}  // namespace modelc
