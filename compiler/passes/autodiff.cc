// Reverse-mode automatic differentiation (see autodiff.h).
//
// Only the nodes on a path from a requested value to the loss are differentiated: those
// the loss depends on and that depend, through floating-point values, on a value of
// `wrt`. They are visited in reverse topological order (the graph is already in
// topological order), each calling its op's registered rule with the summed gradients of
// its outputs; a rule is asked only for the float inputs on such a path. Integer and bool
// values carry no gradient.
#include "compiler/passes/autodiff.h"

#include <fmt/format.h>

#include "compiler/ir/grad.h"
#include "compiler/ir/op_registry.h"
#include "compiler/support/diagnostics.h"

namespace modelc {

namespace {

Value add_constant(Graph& g, double value, const TensorType& t, const Node& at) {
  Node n;
  n.op = OpKind::Constant;
  n.attrs.set("value", value);
  n.outputs = {t};
  n.loc = at.loc;
  n.scope = at.scope;
  return Value{g.add(std::move(n)), 0};
}

std::string describe(const Graph& g, NodeId id) {
  const Node& n = g.node(id);
  std::string s = fmt::format("%{}", id);
  if (n.loc.line) s += fmt::format(" at line {}, column {}", n.loc.line, n.loc.col);
  if (!n.scope.empty()) s += fmt::format(" in {}", n.scope);
  return s;
}

// The error for node `id`, on the path but without a gradient rule: at its call in the
// source when it has one (the diagnostic shows where), naming the node otherwise, with the
// reason its record gives.
[[noreturn]] void no_gradient(const Graph& g, NodeId id) {
  const Node& n = g.node(id);
  const OpInfo& op = op_info(n.op);
  const std::string where = n.loc.valid() ? (n.scope.empty() ? "" : " in " + n.scope) : " (" + describe(g, id) + ")";
  throw SourceError(n.loc, fmt::format("autodiff: the loss cannot be differentiated through op '{}'{}: {}", op.name,
                                       where, op.no_grad));
}

}  // namespace

std::vector<Value> append_gradients(Graph& g, Value loss, const std::vector<Value>& wrt) {
  const size_t n0 = g.nodes.size();
  auto valid = [&](Value v) { return v.valid() && v.node < n0 && v.index < g.nodes[v.node].outputs.size(); };
  MODELC_CHECK(valid(loss), "autodiff: the loss is not a value of the graph");
  for (Value w : wrt) MODELC_CHECK(valid(w), "autodiff: a requested value is not a value of the graph");
  const TensorType& lt = g.type(loss);
  if (!is_float(lt.dtype) || lt.rank() != 0)
    throw UserError(fmt::format("autodiff: the loss must be a float scalar, got {} (%{} {})", lt.str(), loss.node,
                                op_name(g.node(loss.node).op)));

  // The nodes the loss depends on, and those that depend on a requested float value.
  std::vector<bool> to_loss(n0, false), from_wrt(n0, false);
  to_loss[loss.node] = true;
  for (size_t id = loss.node + 1; id-- > 0;)
    if (to_loss[id])
      for (Value v : g.nodes[id].inputs)
        if (v.valid()) to_loss[v.node] = true;
  for (Value w : wrt)
    if (is_float(g.type(w).dtype)) from_wrt[w.node] = true;
  for (size_t id = 0; id < n0; ++id)
    for (Value v : g.nodes[id].inputs)
      if (v.valid() && from_wrt[v.node] && is_float(g.type(v).dtype)) from_wrt[id] = true;

  std::vector<std::vector<Value>> grads(n0);
  for (size_t id = 0; id < n0; ++id) grads[id].resize(g.nodes[id].outputs.size());
  grads[loss.node][loss.index] = add_constant(g, 1.0, lt, g.nodes[loss.node]);

  for (size_t id = loss.node + 1; id-- > 0;) {
    if (!to_loss[id] || !from_wrt[id]) continue;
    const OpInfo& op = op_info(g.nodes[id].op);
    if (op.fusion == FusionKind::Source) continue;  // a leaf
    bool reached = false;
    for (Value v : grads[id]) reached |= v.valid();
    std::vector<bool> needed;
    bool any = false;
    for (Value v : g.nodes[id].inputs) {
      bool n = v.valid() && is_float(g.type(v).dtype) && to_loss[v.node] && from_wrt[v.node];
      needed.push_back(n);
      any |= n;
    }
    if (!reached || !any) continue;
    if (!op.grad) no_gradient(g, static_cast<NodeId>(id));
    GradCtx ctx{g, static_cast<NodeId>(id), g.nodes[id], grads[id], {}, needed};
    op.grad(ctx);
    const Node& node = ctx.node;
    MODELC_CHECK(ctx.in_grads.size() <= node.inputs.size(),
                 fmt::format("the gradient rule of {} gives {} input gradients for {} inputs", op.name,
                             ctx.in_grads.size(), node.inputs.size()));
    for (size_t i = 0; i < node.inputs.size(); ++i) {
      if (!needed[i]) continue;
      Value gi = i < ctx.in_grads.size() ? ctx.in_grads[i] : Value{};
      MODELC_CHECK(gi.valid(), fmt::format("the gradient rule of {} gives no gradient for input {}", op.name, i));
      Value in = node.inputs[i];
      MODELC_CHECK(g.type(gi) == g.type(in),
                   fmt::format("the gradient rule of {} gives {} for input {} of type {}", op.name,
                               g.type(gi).str(), i, g.type(in).str()));
      Value& acc = grads[in.node][in.index];
      if (!acc.valid()) {
        acc = gi;
        continue;
      }
      auto sum = add_op(g, OpKind::Add, {acc, gi}, {}, node.loc);
      MODELC_CHECK(sum.has_value(), "autodiff: cannot add two gradients of one value");
      g.nodes[*sum].scope = node.scope;
      acc = Value{*sum, 0};
    }
  }

  std::vector<Value> out;
  for (Value w : wrt) {
    Value gw = grads[w.node][w.index];
    out.push_back(gw.valid() ? gw : add_constant(g, 0.0, g.type(w), g.nodes[w.node]));
  }
  return out;
}

}  // namespace modelc
