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
    check_list(g_.states, OpKind::State, "states");
    check_listed();
    check_outputs();
    check_updates();
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

  // g.inputs / g.params / g.states: existing nodes of the right op, each listed once.
  void check_list(const std::vector<NodeId>& list, OpKind want, const char* what) {
    std::set<NodeId> seen;
    for (NodeId id : list) {
      if (id >= g_.nodes.size()) {
        report(fmt::format("graph {} list %{}, which does not exist", what, id));
        continue;
      }
      if (g_.nodes[id].op != want)
        report(fmt::format("graph {} list {}, which is not {} node", what, where(id),
                           want == OpKind::Input ? "an input" : want == OpKind::Param ? "a param" : "a state"));
      if (!seen.insert(id).second) report(fmt::format("graph {} list %{} twice", what, id));
    }
  }

  // The micro-batch of an input of a train step (attribute `micro`); -1 when it has none.
  int64_t micro_of(NodeId id) {
    const Node& n = g_.nodes[id];
    const AttrValue* m = n.op == OpKind::Input ? n.attrs.find("micro") : nullptr;
    if (!m) return -1;
    const int64_t* k = std::get_if<int64_t>(m);
    if (!k || *k < 0) {
      report(fmt::format("{} \"{}\": attribute micro must be a non-negative int, got {}", where(id), n.name, attr_str(*m)));
      return -1;
    }
    return *k;
  }

  // Every input / param / state node is listed, and names are unique across inputs, params
  // and states (the interpreter and the runtime feed them by name from one namespace); the
  // exception are a train step's inputs, one per micro-batch, which share their name and
  // differ in their attribute `micro`.
  void check_listed() {
    struct Named {
      NodeId first;
      std::set<int64_t> micros;  // all micro-batched inputs so far: their micro-batches
      bool micro_only = true;
    };
    std::map<std::string, Named> names;
    for (NodeId id = 0; id < g_.nodes.size(); ++id) {
      const Node& n = g_.nodes[id];
      bool is_input = n.op == OpKind::Input, is_param = n.op == OpKind::Param, is_state = n.op == OpKind::State;
      if (!is_input && !is_param && !is_state) continue;
      const auto& list = is_input ? g_.inputs : is_param ? g_.params : g_.states;
      if (std::find(list.begin(), list.end(), id) == list.end())
        report(fmt::format("{} \"{}\" is not in the graph's {} list", where(id), n.name,
                           is_input ? "inputs" : is_param ? "params" : "states"));
      int64_t micro = micro_of(id);
      if (n.name.empty()) {
        report(fmt::format("{}: has no name", where(id)));
        continue;
      }
      auto [it, fresh] = names.emplace(n.name, Named{id, {}, true});
      Named& seen = it->second;
      bool ok = fresh || (micro >= 0 && seen.micro_only && !seen.micros.count(micro));
      if (!ok) report(fmt::format("duplicate name \"{}\": {} and {}", n.name, where(seen.first), where(id)));
      if (micro >= 0) seen.micros.insert(micro);
      else seen.micro_only = false;
    }
  }

  // Each update targets an existing param or state node, at most once, with a value of
  // the target's type.
  void check_updates() {
    std::set<NodeId> updated;
    for (const Graph::Update& u : g_.updates) {
      if (u.target >= g_.nodes.size()) {
        report(fmt::format("update of %{}, which does not exist", u.target));
        continue;
      }
      const Node& t = g_.nodes[u.target];
      std::string what = fmt::format("update of {} \"{}\"", where(u.target), t.name);
      if (t.op != OpKind::Param && t.op != OpKind::State) report(what + ": not a param or state node");
      if (!updated.insert(u.target).second) report(what + ": updated twice");
      if (!u.value.valid()) {
        report(what + ": has no value");
        continue;
      }
      std::string why = bad_value(u.value, kNoNode);
      if (!why.empty()) {
        report(fmt::format("{}: refers to {}", what, why));
        continue;
      }
      if (t.outputs.size() == 1 && g_.type(u.value) != t.outputs[0])
        report(fmt::format("{}: value {} has type {}, the target {}", what, value_str(g_, u.value),
                           g_.type(u.value).str(), t.outputs[0].str()));
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
