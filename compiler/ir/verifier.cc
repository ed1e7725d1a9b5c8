#include "compiler/ir/verifier.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <set>

#include "compiler/ir/op_registry.h"
#include "compiler/ir/printer.h"

namespace modelc {

namespace {

class Verifier {
 public:
  explicit Verifier(const Graph& g) : g_(g) {
    for (const DimDecl& d : g.dims) {
      if (!dims_.insert(d.name).second) report(fmt::format("dimension '{}' is declared twice", d.name));
    }
  }

  std::vector<std::string> run() {
    for (NodeId id = 0; id < g_.nodes.size(); ++id) check_node(id);
    check_list(g_.inputs, OpKind::Input, "inputs");
    check_list(g_.params, OpKind::Param, "params");
    check_listed();
    check_outputs();
    return std::move(problems_);
  }

 private:
  const Graph& g_;
  std::set<std::string> dims_;
  std::vector<std::string> problems_;

  void report(std::string msg) { problems_.push_back(std::move(msg)); }

  std::string where(NodeId id) const {
    const Node& n = g_.nodes[id];
    return fmt::format("%{} ({})", id, n.op < OpKind::NumOps ? op_name(n.op) : "?");
  }

  // Why `v` cannot be read at node `user` ("" if it can); user == kNoNode for outputs.
  std::string bad_value(Value v, NodeId user) const {
    if (v.node >= g_.nodes.size()) return fmt::format("%{}, which does not exist", v.node);
    if (user != kNoNode && v.node >= user)
      return fmt::format("{}, which is not defined before it", value_str(g_, v));
    size_t n = g_.nodes[v.node].outputs.size();
    if (v.index >= n) return fmt::format("%{}#{}, but %{} has {} output{}", v.node, v.index, v.node, n, n == 1 ? "" : "s");
    return "";
  }

  // Maps each input slot of a node to the parameter it fills: a `tensors` parameter takes
  // whatever the other tensor parameters leave. Returns false if the count cannot fit.
  static bool input_params(const OpInfo& op, size_t num_inputs, std::vector<const ParamSpec*>& slots) {
    size_t fixed = 0;
    bool list = false;
    for (const ParamSpec& p : op.params) {
      if (p.kind == ParamKind::Tensor || p.kind == ParamKind::OptTensor) ++fixed;
      if (p.kind == ParamKind::TensorList) list = true;
    }
    if (list ? num_inputs < fixed : num_inputs != fixed) return false;
    for (const ParamSpec& p : op.params) {
      if (p.kind == ParamKind::Tensor || p.kind == ParamKind::OptTensor) slots.push_back(&p);
      if (p.kind == ParamKind::TensorList)
        for (size_t k = 0; k < num_inputs - fixed; ++k) slots.push_back(&p);
    }
    return true;
  }

  void check_symbols(const std::string& what, const Shape& s, std::set<std::string>& reported) {
    for (const Dim& d : s)
      for (const std::string& sym : d.symbols())
        if (!dims_.count(sym) && reported.insert(sym).second)
          report(fmt::format("{}: symbol '{}' is not a dimension of the model", what, sym));
  }

  void check_node(NodeId id) {
    const Node& n = g_.nodes[id];
    if (n.op >= OpKind::NumOps) {
      report(fmt::format("%{}: unknown op kind {}", id, static_cast<unsigned>(n.op)));
      return;
    }
    const OpInfo& op = op_info(n.op);
    std::string at = where(id);

    std::set<std::string> reported;
    for (const TensorType& t : n.outputs) check_symbols(at, t.shape, reported);
    for (const auto& [name, v] : n.attrs.items())
      if (const Shape* s = std::get_if<Shape>(&v)) check_symbols(at, *s, reported);

    // Source nodes get their type from their declaration, not from a rule.
    if (op.fusion == FusionKind::Source) {
      if (!n.inputs.empty()) report(fmt::format("{}: has {} inputs, expected none", at, n.inputs.size()));
      if (n.outputs.size() != 1) report(fmt::format("{}: has {} outputs, expected 1", at, n.outputs.size()));
      return;
    }

    bool inputs_ok = true;
    std::vector<const ParamSpec*> slots;
    if (!input_params(op, n.inputs.size(), slots)) {
      report(fmt::format("{}: has {} inputs, which does not fit its signature ({})", at, n.inputs.size(),
                         op.signature_text));
      inputs_ok = false;
    }
    for (size_t i = 0; i < n.inputs.size(); ++i) {
      Value v = n.inputs[i];
      if (!v.valid()) {
        if (i < slots.size() && slots[i]->kind != ParamKind::OptTensor) {
          report(fmt::format("{}: input {} ({}) is missing", at, i, slots[i]->name));
          inputs_ok = false;
        }
        continue;
      }
      std::string why = bad_value(v, id);
      if (!why.empty()) {
        report(fmt::format("{}: input {} refers to {}", at, i, why));
        inputs_ok = false;
      }
    }
    if (inputs_ok && op.infer) check_types(id, op);
  }

  // Runs the shape rule again on a copy of the attributes (rules may canonicalise them)
  // and compares what it gives with the stored types.
  void check_types(NodeId id, const OpInfo& op) {
    const Node& n = g_.nodes[id];
    std::string at = where(id);
    Attrs attrs = n.attrs;
    apply_defaults(op, attrs);
    InferCtx ctx{{}, attrs, {}, {}, -1, {}};
    for (const Value& v : n.inputs) ctx.in.push_back(v.valid() ? &g_.type(v) : nullptr);
    try {
      op.infer(ctx);
    } catch (const std::exception& e) {
      // A missing or mistyped attribute: the rule cannot run at all.
      report(fmt::format("{}: the shape rule cannot run: {}", at, e.what()));
      return;
    }
    if (ctx.failed()) {
      report(fmt::format("{}: the shape rule rejects it: {}", at, *ctx.error));
      return;
    }
    if (ctx.out.size() != n.outputs.size()) {
      report(fmt::format("{}: stored {} outputs but the rule gives {}", at, n.outputs.size(), ctx.out.size()));
      return;
    }
    for (size_t k = 0; k < ctx.out.size(); ++k) {
      if (ctx.out[k] == n.outputs[k]) continue;
      std::string which = n.outputs.size() == 1 ? at : fmt::format("%{}#{} ({})", id, k, op.name);
      report(fmt::format("{}: stored type {} but the rule gives {}", which, n.outputs[k].str(), ctx.out[k].str()));
    }
  }

  // g.inputs / g.params: existing nodes of the right op, each listed once.
  void check_list(const std::vector<NodeId>& list, OpKind want, const char* what) {
    std::set<NodeId> seen;
    for (NodeId id : list) {
      if (id >= g_.nodes.size()) {
        report(fmt::format("graph {} list %{}, which does not exist", what, id));
        continue;
      }
      if (g_.nodes[id].op != want)
        report(fmt::format("graph {} list {}, which is not {} node", what, where(id), want == OpKind::Input ? "an input" : "a param"));
      if (!seen.insert(id).second) report(fmt::format("graph {} list %{} twice", what, id));
    }
  }

  // Every input / param node is listed, and names are unique across inputs and params
  // (the interpreter and the runtime feed both by name from one namespace).
  void check_listed() {
    std::map<std::string, NodeId> names;
    for (NodeId id = 0; id < g_.nodes.size(); ++id) {
      const Node& n = g_.nodes[id];
      bool is_input = n.op == OpKind::Input, is_param = n.op == OpKind::Param;
      if (!is_input && !is_param) continue;
      const auto& list = is_input ? g_.inputs : g_.params;
      if (std::find(list.begin(), list.end(), id) == list.end())
        report(fmt::format("{} \"{}\" is not in the graph's {} list", where(id), n.name, is_input ? "inputs" : "params"));
      if (n.name.empty()) {
        report(fmt::format("{}: has no name", where(id)));
        continue;
      }
      auto [it, fresh] = names.emplace(n.name, id);
      if (!fresh) report(fmt::format("duplicate name \"{}\": {} and {}", n.name, where(it->second), where(id)));
    }
  }

  void check_outputs() {
    std::set<std::string> names;
    for (const Graph::Output& o : g_.outputs) {
      if (!names.insert(o.name).second) report(fmt::format("duplicate output name \"{}\"", o.name));
      if (!o.value.valid()) {
        report(fmt::format("output \"{}\" has no value", o.name));
        continue;
      }
      std::string why = bad_value(o.value, kNoNode);
      if (!why.empty()) report(fmt::format("output \"{}\" refers to {}", o.name, why));
    }
  }
};

}  // namespace

std::vector<std::string> verify_graph(const Graph& g) { return Verifier(g).run(); }

}  // namespace modelc
