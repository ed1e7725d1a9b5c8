#include "compiler/ir/interpreter.h"

#include <fmt/format.h>

#include <algorithm>

namespace modelc {

std::string RefTensor::shape_str() const {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? "," : "") + std::to_string(shape[i]);
  return s + "]";
}

std::vector<int64_t> concrete_shape(const Shape& s, const std::map<std::string, int64_t>& dims) {
  std::vector<int64_t> out;
  for (const Dim& d : s) {
    auto v = d.evaluate(dims);
    if (!v) throw UserError(fmt::format("dimension {} has no value: bind it with -D or an input", d.str()));
    out.push_back(*v);
  }
  return out;
}

// Binds the symbols of `decl` from `actual`: first the dims that are a lone symbol, then
// checks that every dim evaluates to the actual extent.
static void bind_dims(const std::string& what, const TensorType& decl, const RefTensor& actual,
                      std::map<std::string, int64_t>& dims) {
  auto mismatch = [&] {
    return UserError(fmt::format("{}: expected {}, got {}{}", what, decl.str(),
                                 dtype_name(actual.dtype), actual.shape_str()));
  };
  if (decl.dtype != actual.dtype || decl.rank() != actual.rank()) throw mismatch();
  for (int i = 0; i < decl.rank(); ++i) {
    auto syms = decl.shape[i].symbols();
    if (syms.size() == 1 && decl.shape[i] == Dim::symbol(syms[0]) && !dims.count(syms[0]))
      dims[syms[0]] = actual.shape[i];
  }
  for (int i = 0; i < decl.rank(); ++i) {
    auto v = decl.shape[i].evaluate(dims);
    if (!v || *v != actual.shape[i]) throw mismatch();
  }
}

// The number of micro-batches of a train-step graph: 1 + the largest `micro` attribute of
// its inputs (1 when none has one).
static int64_t micro_batches(const Graph& g) {
  int64_t m = 1;
  for (NodeId id : g.inputs)
    if (g.node(id).attrs.has("micro")) m = std::max(m, g.node(id).attrs.i("micro") + 1);
  return m;
}

// Part `k` of `m` of `full` along dim 0.
static RefTensor micro_slice(const std::string& name, const RefTensor& full, int64_t k, int64_t m) {
  if (full.rank() == 0 || full.shape[0] % m != 0)
    throw UserError(fmt::format("input '{}': {}{} does not split along dim 0 into {} micro-batches", name,
                                dtype_name(full.dtype), full.shape_str(), m));
  RefTensor part(full.dtype, full.shape);
  part.shape[0] = full.shape[0] / m;
  int64_t n = RefTensor::numel_of(part.shape);
  part.data.assign(full.data.begin() + k * n, full.data.begin() + (k + 1) * n);
  return part;
}

InterpResult interpret(const Graph& g, const std::map<std::string, RefTensor>& feeds,
                       const InterpOptions& options) {
  InterpResult r;
  for (const DimDecl& d : g.dims)
    if (d.value) r.dims[d.name] = *d.value;
  auto kind_of = [](OpKind op) { return op == OpKind::Input ? "input" : op == OpKind::Param ? "param" : "state"; };
  const int64_t micros = micro_batches(g);
  std::map<NodeId, RefTensor> sliced;  // micro-batched inputs: their part of the feed
  auto feed = [&](NodeId id) -> const RefTensor& {
    const Node& n = g.node(id);
    if (auto s = sliced.find(id); s != sliced.end()) return s->second;
    auto it = feeds.find(n.name);
    if (it == feeds.end()) throw UserError(fmt::format("no value fed for {} '{}'", kind_of(n.op), n.name));
    if (n.op == OpKind::Input && n.attrs.has("micro"))
      return sliced[id] = micro_slice(n.name, it->second, n.attrs.i("micro"), micros);
    return it->second;
  };
  // Inputs first, so that every symbol is bound before any other shape is evaluated.
  for (NodeId id : g.inputs) bind_dims("input '" + g.node(id).name + "'", g.node(id).outputs[0], feed(id), r.dims);
  for (NodeId id : g.params) bind_dims("param '" + g.node(id).name + "'", g.node(id).outputs[0], feed(id), r.dims);
  for (NodeId id : g.states) bind_dims("state '" + g.node(id).name + "'", g.node(id).outputs[0], feed(id), r.dims);

  r.values.resize(g.nodes.size());
  for (NodeId id = 0; id < g.nodes.size(); ++id) {
    const Node& n = g.nodes[id];
    std::vector<RefTensor>& out = r.values[id];
    if (n.op == OpKind::Input || n.op == OpKind::Param || n.op == OpKind::State) {
      out.push_back(feed(id));
      continue;
    }
    for (const TensorType& t : n.outputs) out.emplace_back(t.dtype, concrete_shape(t.shape, r.dims));
    std::vector<const RefTensor*> in;
    for (const Value& v : n.inputs) in.push_back(v.valid() ? &r.values.at(v.node).at(v.index) : nullptr);
    RefCtx ctx{n, std::move(in), out, options};
    op_info(n.op).reference(ctx);
  }
  for (const Graph::Output& o : g.outputs) r.outputs[o.name] = r.values.at(o.value.node).at(o.value.index);
  for (const Graph::Update& u : g.updates) r.updates[g.node(u.target).name] = r.values.at(u.value.node).at(u.value.index);
  return r;
}

}  // namespace modelc
