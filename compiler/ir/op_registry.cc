#include "compiler/ir/op_registry.h"

#include <cctype>
#include <charconv>
#include <cmath>
#include <fmt/format.h>

#include "compiler/ir/grad.h"
#include "compiler/ir/scalar_expr.h"

namespace modelc {

void attr_missing(std::string_view name) {
  throw InternalError(fmt::format("internal error: attribute '{}' missing or of the wrong type", name));
}

double Attrs::f(std::string_view name) const {
  const AttrValue* v = find(name);
  if (v && std::holds_alternative<double>(*v)) return std::get<double>(*v);
  if (v && std::holds_alternative<int64_t>(*v)) return static_cast<double>(std::get<int64_t>(*v));
  attr_missing(name);
}

static std::string float_str(double d) {
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  if (std::isnan(d)) return "nan";
  std::string s = fmt::format("{}", d);  // shortest round-trip form
  if (s.find_first_of(".eEn") == std::string::npos) s += ".0";
  return s;
}

std::string attr_str(const AttrValue& v) {
  struct V {
    std::string operator()(int64_t x) const { return std::to_string(x); }
    std::string operator()(double x) const { return float_str(x); }
    std::string operator()(bool x) const { return x ? "true" : "false"; }
    std::string operator()(const std::string& x) const { return "\"" + x + "\""; }
    std::string operator()(const Ints& x) const {
      std::string s = "[";
      for (size_t i = 0; i < x.size(); ++i) s += (i ? ", " : "") + std::to_string(x[i]);
      return s + "]";
    }
    std::string operator()(const Shape& x) const {
      std::string s = "[";
      for (size_t i = 0; i < x.size(); ++i) s += (i ? ", " : "") + x[i].str();
      return s + "]";
    }
    std::string operator()(DType x) const { return std::string(dtype_name(x)); }
  };
  return std::visit(V{}, v);
}

// --- signatures -----------------------------------------------------------------------

static ParamKind parse_kind(std::string_view k, std::string_view spec) {
  static const std::pair<std::string_view, ParamKind> kinds[] = {
      {"tensor", ParamKind::Tensor}, {"tensor?", ParamKind::OptTensor},
      {"tensors", ParamKind::TensorList}, {"int", ParamKind::Int},
      {"float", ParamKind::Float}, {"bool", ParamKind::Bool},
      {"ints", ParamKind::Ints}, {"shape", ParamKind::Shape},
      {"str", ParamKind::Str}, {"dtype", ParamKind::DType}};
  for (auto [n, kind] : kinds)
    if (n == k) return kind;
  throw InternalError(fmt::format("bad kind '{}' in op signature '{}'", k, spec));
}

static std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

static AttrValue parse_default(std::string_view text, ParamKind kind, std::string_view spec) {
  auto bad = [&] { return InternalError(fmt::format("bad default '{}' in op signature '{}'", text, spec)); };
  switch (kind) {
    case ParamKind::Int: {
      int64_t v = 0;
      auto r = std::from_chars(text.data(), text.data() + text.size(), v);
      if (r.ec != std::errc() || r.ptr != text.data() + text.size()) throw bad();
      return v;
    }
    case ParamKind::Float: return std::stod(std::string(text));
    case ParamKind::Bool:
      if (text == "true") return true;
      if (text == "false") return false;
      throw bad();
    case ParamKind::Str:
      if (text.size() < 2 || text.front() != '"' || text.back() != '"') throw bad();
      return std::string(text.substr(1, text.size() - 2));
    case ParamKind::DType: {
      auto t = parse_dtype(text);
      if (!t) throw bad();
      return *t;
    }
    case ParamKind::Ints: {
      if (text.size() < 2 || text.front() != '[' || text.back() != ']') throw bad();
      Ints v;
      std::string_view body = trim(text.substr(1, text.size() - 2));
      while (!body.empty()) {
        size_t c = body.find(',');
        std::string_view item = trim(body.substr(0, c));
        v.push_back(std::stoll(std::string(item)));
        body = c == std::string_view::npos ? std::string_view() : body.substr(c + 1);
      }
      return v;
    }
    default: throw bad();
  }
}

std::vector<ParamSpec> parse_signature(std::string_view spec) {
  std::vector<ParamSpec> out;
  std::string_view rest = spec;
  while (!trim(rest).empty()) {
    // split at the next top-level comma (defaults may hold [..] lists)
    size_t i = 0;
    int depth = 0;
    for (; i < rest.size(); ++i) {
      if (rest[i] == '[') ++depth;
      if (rest[i] == ']') --depth;
      if (rest[i] == ',' && depth == 0) break;
    }
    std::string_view item = trim(rest.substr(0, i));
    rest = i < rest.size() ? rest.substr(i + 1) : std::string_view();
    size_t colon = item.find(':');
    if (colon == std::string_view::npos)
      throw InternalError(fmt::format("missing ':' in op signature '{}'", spec));
    ParamSpec p;
    p.name = std::string(trim(item.substr(0, colon)));
    std::string_view type = trim(item.substr(colon + 1));
    size_t eq = type.find('=');
    std::string_view def;
    if (eq != std::string_view::npos) {
      def = trim(type.substr(eq + 1));
      type = trim(type.substr(0, eq));
    }
    p.kind = parse_kind(type, spec);
    if (!def.empty()) {
      p.has_default = true;
      if (def != "none") p.default_value = parse_default(def, p.kind, spec);
      else if (p.kind != ParamKind::OptTensor)
        throw InternalError(fmt::format("only tensor? takes 'none' in '{}'", spec));
    }
    out.push_back(std::move(p));
  }
  return out;
}

static std::string_view kind_str(ParamKind k) {
  switch (k) {
    case ParamKind::Tensor: return "tensor";
    case ParamKind::OptTensor: return "tensor?";
    case ParamKind::TensorList: return "tensors";
    case ParamKind::Int: return "int";
    case ParamKind::Float: return "float";
    case ParamKind::Bool: return "bool";
    case ParamKind::Ints: return "ints";
    case ParamKind::Shape: return "shape";
    case ParamKind::Str: return "str";
    case ParamKind::DType: return "dtype";
  }
  return "?";
}

std::string signature_str(const std::vector<ParamSpec>& params) {
  std::string s;
  for (const ParamSpec& p : params) {
    if (!s.empty()) s += ", ";
    s += p.name + ": " + std::string(kind_str(p.kind));
    if (p.has_default) s += " = " + (p.default_value ? attr_str(*p.default_value) : "none");
  }
  return s;
}

// --- the registry ---------------------------------------------------------------------

OpRegistry::Builder& OpRegistry::Builder::signature(std::string_view spec) {
  info_.signature_text = std::string(spec);
  info_.params = parse_signature(spec);
  return *this;
}

OpRegistry::Builder& OpRegistry::Builder::math(std::string expr) {
  parse_scalar(expr);  // a malformed definition fails when the registry is built
  return scalar([expr = std::move(expr)](const Attrs&) { return expr; });
}

// An expression "none: REASON" says the op has no gradient in that input, and why.
OpRegistry::Builder& OpRegistry::Builder::grad_exprs(std::vector<std::string> exprs) {
  std::string reason;
  for (std::string& e : exprs) {
    if (e.rfind("none: ", 0) == 0) {
      reason = e.substr(6);
      e.clear();
    }
    if (!e.empty()) parse_scalar(e);
  }
  info_.grad_exprs = exprs;
  bool any = false;
  for (const std::string& e : exprs) any |= !e.empty();
  info_.grad = any ? expression_grad(std::move(exprs)) : GradFn{};
  if (!any) info_.no_grad = reason.empty() ? "its result is bool" : reason;
  return *this;
}

OpRegistry::OpRegistry() {
  ops_.resize(static_cast<size_t>(OpKind::NumOps));
  static const char* const names[] = {
#define OP(E, N) N,
#define UNARY(E, N, ...) N,
#define BINARY(E, N, ...) N,
#include "compiler/ir/ops.def"
#undef OP
#undef UNARY
#undef BINARY
  };
  for (size_t i = 0; i < ops_.size(); ++i) {
    ops_[i].kind = static_cast<OpKind>(i);
    ops_[i].name = names[i];
  }
  register_source_ops(*this);
  register_elementwise_ops(*this);
  register_reduce_ops(*this);
  register_shape_ops(*this);
  register_nn_ops(*this);
  register_conv_ops(*this);
  register_grad_ops(*this);
  register_loss_ops(*this);
  register_class_loss_ops(*this);
  register_composite_ops(*this);
  register_random_ops(*this);
  register_attention_ops(*this);
  register_metric_ops(*this);
  for (const OpInfo& op : ops_) {
    if (!op.infer || !op.reference)
      throw InternalError(fmt::format("op '{}' is registered without a shape rule or reference", op.name));
    if ((op.math == MathKind::Scalar) != static_cast<bool>(op.scalar))
      throw InternalError(fmt::format("op '{}': a scalar definition goes with MathKind::Scalar", op.name));
    if ((op.math == MathKind::Composite) != static_cast<bool>(op.expand))
      throw InternalError(fmt::format("op '{}': an expansion goes with MathKind::Composite", op.name));
    // A composite differentiates as its parts do (it has no rule), unless its result is not
    // differentiable at all (argmax's integer positions), which no_grad then says.
    if (op.math == MathKind::Composite ? static_cast<bool>(op.grad)
                                       : static_cast<bool>(op.grad) == !op.no_grad.empty())
      throw InternalError(fmt::format("op '{}' needs a gradient rule or the reason it has none (no_grad)", op.name));
  }
}

const OpRegistry& OpRegistry::get() {
  static const OpRegistry registry;
  return registry;
}

const OpInfo* OpRegistry::find(std::string_view name) const {
  for (const OpInfo& op : ops_)
    if (op.callable && op.name == name) return &op;
  return nullptr;
}

void apply_defaults(const OpInfo& op, Attrs& attrs) {
  for (const ParamSpec& p : op.params)
    if (p.default_value && !attrs.has(p.name)) attrs.set(p.name, *p.default_value);
}

std::optional<NodeId> add_op(Graph& g, OpKind op, std::vector<Value> inputs, Attrs attrs,
                             SourceLoc loc, InferFailure* error, std::vector<Value>* results) {
  const OpInfo& info = op_info(op);
  apply_defaults(info, attrs);
  InferCtx ctx{{}, attrs, {}, {}, -1, {}};
  for (const Value& v : inputs) ctx.in.push_back(v.valid() ? &g.type(v) : nullptr);
  info.infer(ctx);
  if (ctx.failed()) {
    if (error) *error = {*ctx.error, ctx.error_input, ctx.error_attr};
    return std::nullopt;
  }
  if (info.math == MathKind::Composite) {
    if (ctx.out.empty()) throw InternalError(fmt::format("composite op '{}' has no result", info.name));
    const size_t first = g.nodes.size();
    ExpandCtx x{g, inputs, attrs, ctx.out[0], loc};
    std::vector<Value> all{info.expand(x)};
    all.insert(all.end(), x.more.begin(), x.more.end());
    bool ok = all.size() == ctx.out.size();
    for (size_t k = 0; ok && k < all.size(); ++k) {
      const Value v = all[k];
      // The first result is output 0 of its node (the id returned); a node may have more
      // outputs than the call's results (sdpa's statistics, which only its gradient reads).
      ok = (k > 0 || v.index == 0) && v.node >= first && v.node < g.nodes.size() &&
           v.index < g.node(v.node).outputs.size() && g.type(v) == ctx.out[k];
    }
    if (!ok)
      throw InternalError(fmt::format("the expansion of '{}' does not end in {} new node(s) of its result types", info.name,
                                      ctx.out.size()));
    if (results) *results = all;
    return all[0].node;
  }
  Node n;
  n.op = op;
  n.inputs = std::move(inputs);
  n.attrs = std::move(attrs);
  n.outputs = std::move(ctx.out);
  n.loc = loc;
  const NodeId id = g.add(std::move(n));
  if (results) {
    results->clear();
    for (uint32_t k = 0; k < g.node(id).outputs.size(); ++k) results->push_back(Value{id, k});
  }
  return id;
}

Value ExpandCtx::op(OpKind k, std::vector<Value> inputs, Attrs attrs) {
  InferFailure why;
  const std::optional<NodeId> id = add_op(g, k, std::move(inputs), std::move(attrs), loc, &why);
  if (!id) throw InternalError(fmt::format("a composite's part '{}' refuses its call: {}", op_name(k), why.message));
  return Value{*id, 0};
}

Value ExpandCtx::op(OpKind k, std::vector<Value> inputs, std::initializer_list<std::pair<const char*, AttrValue>> attrs) {
  Attrs a;
  for (const auto& [name, value] : attrs) a.set(name, value);
  return op(k, std::move(inputs), std::move(a));
}

Value ExpandCtx::number(double v, DType t) {
  Node n;
  n.op = OpKind::Constant;
  n.attrs.set("value", v);
  n.outputs = {TensorType{t, {}}};
  n.loc = loc;
  return Value{g.add(std::move(n)), 0};
}

bool normalize_axis(int64_t& axis, int rank) {
  if (axis < -rank || axis >= rank) return false;
  if (axis < 0) axis += rank;
  return true;
}

std::optional<Shape> broadcast_shapes(const Shape& a, const Shape& b, std::string* why) {
  size_t n = std::max(a.size(), b.size());
  Shape out(n);
  for (size_t i = 0; i < n; ++i) {
    const Dim* da = i < a.size() ? &a[a.size() - 1 - i] : nullptr;
    const Dim* db = i < b.size() ? &b[b.size() - 1 - i] : nullptr;
    Dim& o = out[n - 1 - i];
    if (!da) o = *db;
    else if (!db) o = *da;
    else if (*da == *db) o = *da;
    else if (*da == Dim(1)) o = *db;
    else if (*db == Dim(1)) o = *da;
    else {
      if (why) *why = fmt::format("dimension {} from the end: {} vs {}", i + 1, da->str(), db->str());
      return std::nullopt;
    }
  }
  return out;
}

}  // namespace modelc
