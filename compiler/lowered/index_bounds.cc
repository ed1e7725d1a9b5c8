#include "compiler/lowered/index_bounds.h"

#include <fmt/format.h>

#include <deque>
#include <set>

#include "compiler/ir/op_registry.h"

namespace modelc {

namespace {

std::string at(const Node& n, const std::function<std::string(SourceLoc)>& describe) {
  std::string w = describe && n.loc.valid() ? describe(n.loc) : "";
  return w.empty() ? "" : " at " + w;
}

// The nearest parameter upstream of `v` (breadth first, a bounded search) that has a dim
// equal to `limit`: where the user wrote the number the limit is.
std::string declared_by(const Graph& g, Value v, int64_t limit, const std::function<std::string(SourceLoc)>& describe) {
  std::deque<NodeId> queue{v.node};
  std::set<NodeId> seen{v.node};
  for (int visits = 0; !queue.empty() && visits < 64; ++visits) {
    const Node& n = g.nodes.at(queue.front());
    queue.pop_front();
    if (n.op == OpKind::Param)
      for (const Dim& d : n.outputs.at(0).shape)
        if (d.as_const() == limit) return fmt::format("; {} is a dim of parameter '{}' {}{}", limit, n.name, n.outputs[0].str(),
                                                      at(n, describe).empty() ? "" : " declared" + at(n, describe));
    for (const Value& in : n.inputs)
      if (in.valid() && seen.insert(in.node).second) queue.push_back(in.node);
  }
  return "";
}

}  // namespace

std::map<NodeId, IndexBound> input_index_bounds(const Graph& g, const std::function<std::string(SourceLoc)>& describe) {
  std::map<NodeId, IndexBound> out;
  // Per input, whether each use ignores one value, and which (nullopt: some use ignores none).
  std::map<NodeId, std::optional<int64_t>> ignored;
  for (const Node& n : g.nodes) {
    const OpInfo& info = op_info(n.op);
    for (const IndexOperand& io : info.index_operands) {
      const auto operand = static_cast<size_t>(io.operand);
      if (operand >= n.inputs.size() || !n.inputs[operand].valid()) continue;
      std::optional<int64_t> limit;
      std::string source;
      if (io.of >= 0) {
        const Value of = n.inputs.at(static_cast<size_t>(io.of));
        const Shape& s = g.type(of).shape;
        const int64_t d = io.dim < 0 ? static_cast<int64_t>(s.size()) + io.dim : io.dim;
        if (d < 0 || d >= static_cast<int64_t>(s.size())) continue;
        limit = s[static_cast<size_t>(d)].as_const();
        if (limit) source = declared_by(g, of, *limit, describe);
      } else if (n.attrs.has(io.attr)) {
        limit = n.attrs.i(io.attr);
      }
      if (!limit || *limit < 1) continue;
      std::optional<int64_t> ignore;
      if (!io.ignore_attr.empty() && n.attrs.has(io.ignore_attr)) ignore = n.attrs.i(io.ignore_attr);
      const std::string op = !io.op_attr.empty() && n.attrs.has(io.op_attr) ? n.attrs.s(io.op_attr) : info.name;
      const std::string note = fmt::format("the {} of {}{}{}", io.what, op, at(n, describe), source);
      // Back from the operand through the value movers to the inputs.
      std::vector<Value> stack{n.inputs[operand]};
      std::set<NodeId> seen;
      while (!stack.empty()) {
        const Value v = stack.back();
        stack.pop_back();
        if (!seen.insert(v.node).second) continue;
        const Node& m = g.nodes.at(v.node);
        if (m.op == OpKind::Input) {
          auto [it, fresh] = out.try_emplace(v.node, IndexBound{*limit, note, {}});
          if (!fresh && *limit < it->second.limit) it->second = IndexBound{*limit, note, {}};
          auto [ig, first] = ignored.try_emplace(v.node, ignore);
          if (!first && ig->second != ignore) ig->second.reset();
        } else if (op_info(m.op).moves_values) {
          for (const Value& in : m.inputs)
            if (in.valid()) stack.push_back(in);
        }
      }
    }
  }
  // An ignored value inside the tightest range is an index like the others.
  for (auto& [id, b] : out)
    if (const std::optional<int64_t>& ig = ignored.at(id); ig && (*ig < 0 || *ig >= b.limit)) b.ignore = ig;
  return out;
}

}  // namespace modelc
