#include "compiler/ir/printer.h"

#include <fmt/format.h>

#include "compiler/ir/op_registry.h"

namespace modelc {

std::string value_str(const Graph& g, Value v) {
  if (!v.valid()) return "_";
  // A broken graph may refer to a node that does not exist: print the index anyway (the
  // verifier's messages and a dump of the broken graph should agree).
  bool single = v.node < g.nodes.size() && g.nodes[v.node].outputs.size() == 1 && v.index == 0;
  return single ? fmt::format("%{}", v.node) : fmt::format("%{}#{}", v.node, v.index);
}

static std::string attrs_str(const Attrs& a) {
  std::string s = "{";
  for (const auto& [k, v] : a.items()) {
    if (s.size() > 1) s += ", ";
    s += k + " = " + attr_str(v);
  }
  return s + "}";
}

static std::string op_str(OpKind k) {
  // Printing must not throw on a corrupt node: the verifier reports it.
  if (k >= OpKind::NumOps) return fmt::format("<op {}>", static_cast<unsigned>(k));
  return std::string(op_name(k));
}

std::string print_graph(const Graph& g, const SourceManager* sm) {
  std::string out = "model " + g.name + "(";
  for (size_t i = 0; i < g.dims.size(); ++i) {
    if (i) out += ", ";
    out += g.dims[i].name;
    if (g.dims[i].value) out += fmt::format(" = {}", *g.dims[i].value);
  }
  out += ")\n";
  for (NodeId id = 0; id < g.nodes.size(); ++id) {
    const Node& n = g.nodes[id];
    std::string line = fmt::format("  %{}", id);
    if (n.outputs.size() != 1) line += fmt::format(":{}", n.outputs.size());
    line += " = " + op_str(n.op);
    // Inputs and params are known by their names; their attributes (initializers) read
    // better after the type.
    bool named = !n.name.empty() && n.inputs.empty();
    if (named) {
      line += " \"" + n.name + "\"";
    } else {
      line += "(";
      for (size_t i = 0; i < n.inputs.size(); ++i) line += (i ? ", " : "") + value_str(g, n.inputs[i]);
      line += ")";
      if (!n.attrs.empty()) line += " " + attrs_str(n.attrs);
    }
    line += " : ";
    if (n.outputs.size() == 1) {
      line += n.outputs[0].str();
    } else {
      line += "(";
      for (size_t i = 0; i < n.outputs.size(); ++i) line += (i ? ", " : "") + n.outputs[i].str();
      line += ")";
    }
    if (named && !n.attrs.empty()) line += " " + attrs_str(n.attrs);
    if (!n.scope.empty()) line += "  @" + n.scope;
    if (n.checkpoint) line += " [checkpoint]";
    if (sm && n.loc.valid()) line += "  # " + sm->describe(n.loc);
    out += line + "\n";
  }
  for (const Graph::Output& o : g.outputs) out += "  output " + o.name + " = " + value_str(g, o.value) + "\n";
  for (const Graph::Update& u : g.updates) {
    // A broken graph may name a target that does not exist: print its index (the verifier reports it).
    std::string target = u.target < g.nodes.size() ? g.nodes[u.target].name : fmt::format("%{}", u.target);
    out += "  update " + target + " <- " + value_str(g, u.value) + "\n";
  }
  return out;
}

}  // namespace modelc
