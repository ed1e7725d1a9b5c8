// Expressions: names, literals, lists, operators (compile-time arithmetic on numbers and
// dimensions, IR ops on tensors) and calls (defs are inlined, built-ins become nodes).
#include <fmt/format.h>

#include <cmath>

#include "compiler/frontend/sema_impl.h"

namespace modelc {

std::string describe_kind(SVal::Kind k) {
  switch (k) {
    case SVal::Kind::Error: return "an invalid value";
    case SVal::Kind::None: return "no value";
    case SVal::Kind::Int: return "an integer";
    case SVal::Kind::Float: return "a float";
    case SVal::Kind::Bool: return "a bool";
    case SVal::Kind::Str: return "a string";
    case SVal::Kind::DType: return "a dtype";
    case SVal::Kind::List: return "a list";
    case SVal::Kind::Tuple: return "several values";
    case SVal::Kind::Tensor: return "a tensor";
  }
  return "?";
}

std::string describe_value(const SVal& v, const Graph& g) {
  switch (v.kind) {
    case SVal::Kind::Int: return v.i.is_const() ? "integer " + v.i.str() : "symbolic dimension " + v.i.str();
    case SVal::Kind::Float: return "float " + attr_str(v.f);
    case SVal::Kind::Bool: return v.b ? "true" : "false";
    case SVal::Kind::Str: return "a string";
    case SVal::Kind::DType: return "dtype " + std::string(dtype_name(v.dt));
    case SVal::Kind::Tensor: return "tensor " + g.type(v.t).str();
    case SVal::Kind::Tuple: return fmt::format("{} values", v.items.size());
    default: return describe_kind(v.kind);
  }
}

static const std::map<std::string, OpKind>& binary_ops() {
  static const std::map<std::string, OpKind> m = {
      {"+", OpKind::Add}, {"-", OpKind::Sub}, {"*", OpKind::Mul}, {"/", OpKind::Div},
      {"**", OpKind::Pow}, {"@", OpKind::Matmul}, {"<", OpKind::Lt}, {"<=", OpKind::Le},
      {">", OpKind::Gt}, {">=", OpKind::Ge}, {"==", OpKind::Eq}, {"!=", OpKind::Ne}};
  return m;
}

// Compile-time arithmetic on two numbers (Int operands stay exact dimensions).
static SVal fold_numbers(const std::string& op, const SVal& a, const SVal& b, SourceLoc loc,
                         DiagnosticEngine& diags) {
  using K = SVal::Kind;
  if (a.kind == K::Bool || b.kind == K::Bool) {
    if (op == "==" || op == "!=") return SVal::boolean((a.number() == b.number()) == (op == "=="), loc);
    diags.error(loc, fmt::format("'{}' cannot be applied to a bool", op));
    return SVal::error();
  }
  if (a.kind == K::Int && b.kind == K::Int) {
    const Dim &x = a.i, &y = b.i;
    bool known = x.is_const() && y.is_const();
    int64_t r = 0;
    if (op == "+" || op == "-" || op == "*") {
      if (known) {
        int64_t p = x.const_value(), q = y.const_value();
        bool over = op == "+" ? __builtin_add_overflow(p, q, &r)
                  : op == "-" ? __builtin_sub_overflow(p, q, &r) : __builtin_mul_overflow(p, q, &r);
        if (over) {
          diags.error(loc, fmt::format("integer overflow in {} {} {}", p, op, q));
          return SVal::error();
        }
        return SVal::integer(r, loc);
      }
      return SVal::integer(op == "+" ? x + y : op == "-" ? x - y : x * y, loc);
    }
    if (op == "/") {
      if (y == Dim(0)) {
        diags.error(loc, "division by zero");
        return SVal::error();
      }
      if (auto q = Dim::divide(x, y)) return SVal::integer(*q, loc);
      if (known) return SVal::real(static_cast<double>(x.const_value()) / static_cast<double>(y.const_value()), loc);
      diags.error(loc, fmt::format("{} / {} is not a whole dimension", x.str(), y.str()));
      return SVal::error();
    }
    if (op == "**" && y.is_const() && y.const_value() >= 0 && y.const_value() <= 64) {
      Dim p(1);
      for (int64_t k = 0; k < y.const_value(); ++k) {
        if (known && __builtin_mul_overflow(p.const_value(), x.const_value(), &r)) {
          diags.error(loc, fmt::format("integer overflow in {} ** {}", x.str(), y.str()));
          return SVal::error();
        }
        p = p * x;
      }
      return SVal::integer(p, loc);
    }
    if (op == "==" || op == "!=") return SVal::boolean((x == y) == (op == "=="), loc);
    if (!known) {
      diags.error(loc, fmt::format("'{}' needs known integers, got {} and {}", op, x.str(), y.str()));
      return SVal::error();
    }
  }
  if (op == "@") {
    diags.error(loc, "'@' (matmul) needs tensors, got numbers");
    return SVal::error();
  }
  if ((a.kind == K::Int && a.i.is_symbolic()) || (b.kind == K::Int && b.i.is_symbolic())) {
    diags.error(loc, fmt::format("symbolic dimension {} cannot be used in float arithmetic",
                                 a.kind == K::Int && a.i.is_symbolic() ? a.i.str() : b.i.str()));
    return SVal::error();
  }
  double p = a.number(), q = b.number();
  if (op == "+") return SVal::real(p + q, loc);
  if (op == "-") return SVal::real(p - q, loc);
  if (op == "*") return SVal::real(p * q, loc);
  if (op == "/") {
    if (q == 0) {
      diags.error(loc, "division by zero");
      return SVal::error();
    }
    return SVal::real(p / q, loc);
  }
  if (op == "**") return SVal::real(std::pow(p, q), loc);
  if (op == "<") return SVal::boolean(p < q, loc);
  if (op == "<=") return SVal::boolean(p <= q, loc);
  if (op == ">") return SVal::boolean(p > q, loc);
  if (op == ">=") return SVal::boolean(p >= q, loc);
  if (op == "==") return SVal::boolean(p == q, loc);
  return SVal::boolean(p != q, loc);
}

SVal Sema::binary(const std::string& op, SVal a, SVal b, SourceLoc loc) {
  if (a.is_error() || b.is_error()) return SVal::error();
  if (a.is_number() && b.is_number()) {
    try {
      return fold_numbers(op, a, b, loc, diags_);
    } catch (const DimOverflow& e) {
      diags_.error(loc, e.what());
      return SVal::error();
    }
  }
  auto usable = [](const SVal& v) { return v.is_number() || v.kind == SVal::Kind::Tensor; };
  if (!usable(a) || !usable(b)) {
    const SVal& bad = usable(a) ? b : a;
    diags_.error(bad.loc.valid() ? bad.loc : loc,
                 fmt::format("operator '{}' cannot be applied to {}", op, describe(bad)));
    return SVal::error();
  }
  const OpInfo& info = op_info(binary_ops().at(op));
  std::vector<CallArg> args = {{a, a.loc.valid() ? a.loc : loc, {}, {}}, {b, b.loc.valid() ? b.loc : loc, {}, {}}};
  return apply_op(info, args, loc, false);
}

SVal Sema::make_constant(double v, DType t, SourceLoc loc) {
  Node n;
  n.op = OpKind::Constant;
  n.attrs.set("value", v);
  n.outputs = {TensorType{t, {}}};
  new_node_defaults(n, loc);
  return SVal::tensor(Value{g_->add(std::move(n)), 0}, loc);
}

// apply_op's tensor inputs: tensors as they are, numbers as constants of `partner`'s dtype
// (or their own), lists one input per item. False after an error.
bool Sema::op_inputs(const OpInfo& op, const std::vector<const CallArg*>& tensor_args, std::optional<DType> partner,
                     std::vector<Value>& inputs, std::vector<const CallArg*>& input_args) {
  auto to_tensor = [&](const CallArg* a, const SVal& v) -> std::optional<Value> {
    if (v.kind == SVal::Kind::Tensor) return v.t;
    if (v.is_number()) {
      if (v.kind == SVal::Kind::Int && v.i.is_symbolic()) {
        diags_.error(a->loc, fmt::format("symbolic dimension {} cannot be used as a value", v.i.str()));
        return std::nullopt;
      }
      if (v.kind == SVal::Kind::Bool && partner && *partner != DType::Bool) {
        diags_.error(v.loc.valid() ? v.loc : a->loc, fmt::format("'{}' cannot mix true/false with a {} tensor", op.name, dtype_name(*partner)));
        return std::nullopt;
      }
      DType t = partner ? *partner : v.kind == SVal::Kind::Float ? DType::F32 : v.kind == SVal::Kind::Bool ? DType::Bool : DType::I32;
      return make_constant(v.number(), t, v.loc.valid() ? v.loc : a->loc).t;
    }
    diags_.error(v.loc.valid() ? v.loc : a->loc, fmt::format("expected a tensor in '{}', got {}", op.name, describe(v)));
    return std::nullopt;
  };
  for (const CallArg* a : tensor_args) {
    if (!a) { inputs.push_back(Value{}); input_args.push_back(nullptr); continue; }
    if (a->value.kind == SVal::Kind::List) {
      if (a->value.items.empty()) {
        diags_.error(a->loc, fmt::format("'{}' needs at least one tensor", op.name));
        return false;
      }
      for (const SVal& item : a->value.items) {
        auto v = to_tensor(a, item);
        if (!v) return false;
        inputs.push_back(*v);
        input_args.push_back(a);
      }
      continue;
    }
    auto v = to_tensor(a, a->value);
    if (!v) return false;
    inputs.push_back(*v);
    input_args.push_back(a);
  }
  return true;
}

// apply_op's compile-time arguments as attributes, and a dropout's RNG key. False after an error.
bool Sema::op_attrs(const OpInfo& op, const std::vector<const CallArg*>& bound, Attrs& attrs) {
  for (size_t k = 0; k < op.params.size(); ++k) {
    const ParamSpec& p = op.params[k];
    if (p.kind == ParamKind::Tensor || p.kind == ParamKind::OptTensor || p.kind == ParamKind::TensorList) continue;
    if (!bound[k]) continue;  // add_op fills the default
    auto v = to_attr(*bound[k], p, op.name);
    if (!v) return false;
    attrs.set(p.name, std::move(*v));
  }
  if (op.keyed) {
    // The op's RNG stream is keyed by where the call sits in the model, so that a
    // recomputation (and a re-compilation) draws the same numbers. Dropout's keys are
    // counted apart from the other draws', so that adding a rand_like keeps every mask.
    Frame& f = frames_.back();
    std::string key_text = op.kind == OpKind::Dropout ? f.scope + "/dropout." + std::to_string(f.dropouts++)
                                                      : f.scope + "/" + op.name + "." + std::to_string(f.draws++);
    uint64_t h = 1469598103934665603ull;
    for (unsigned char c : key_text) h = (h ^ c) * 1099511628211ull;
    attrs.set("key", static_cast<int64_t>(h >> 1));
  }
  return true;
}

// The error of a call the op's shape rule refused, at the argument it blames.
void Sema::report_infer_failure(const OpInfo& op, const InferFailure& why, SourceLoc loc,
                                const std::vector<const CallArg*>& bound, const std::vector<const CallArg*>& tensor_args,
                                const std::vector<const CallArg*>& input_args) {
  SourceLoc at = loc;
  const CallArg* blamed = why.input >= 0 && static_cast<size_t>(why.input) < input_args.size() ? input_args[static_cast<size_t>(why.input)] : nullptr;
  if (blamed) at = blamed->loc;
  if (!why.attr.empty()) {
    for (size_t k = 0; k < op.params.size(); ++k)
      if (op.params[k].name == why.attr && bound[k]) at = bound[k]->loc;
  }
  diags_.error(at, why.message);
  if (!why.attr.empty()) return;  // the attribute is to blame, not the tensors
  for (const CallArg* a : tensor_args) {
    if (!a || (blamed && a != blamed) || !a->value.decl.valid()) continue;
    diags_.note(a->value.decl, fmt::format("'{}' declared here", a->value.name));
  }
}

SVal Sema::apply_op(const OpInfo& op, const std::vector<CallArg>& args, SourceLoc loc, bool checkpoint) {
  std::vector<const CallArg*> bound;
  if (!bind_specs(op.name, op.params, args, loc, bound)) return SVal::error();
  for (const CallArg& a : args)
    if (a.value.is_error()) return SVal::error();

  // Tensor arguments; numbers in tensor positions become constants of the dtype of the
  // call's first real tensor argument (as in `x * 0.5`), or fold when there is none.
  std::vector<const CallArg*> tensor_args;  // in input order
  std::optional<DType> partner;
  for (size_t k = 0; k < op.params.size(); ++k) {
    const ParamSpec& p = op.params[k];
    if (p.kind != ParamKind::Tensor && p.kind != ParamKind::OptTensor && p.kind != ParamKind::TensorList) continue;
    const CallArg* a = bound[k];
    if (!a) { tensor_args.push_back(nullptr); continue; }
    if (p.kind == ParamKind::TensorList) {
      if (a->value.kind != SVal::Kind::List) {
        diags_.error(a->loc, fmt::format("argument '{}' of '{}' must be a list of tensors, got {}", p.name, op.name, describe(a->value)));
        return SVal::error();
      }
    } else if (a->value.kind == SVal::Kind::Tensor) {
      DType t = g_->type(a->value.t).dtype;
      if (!partner || (*partner == DType::Bool && t != DType::Bool)) partner = t;
    } else if (!a->value.is_number()) {
      diags_.error(a->loc, fmt::format("argument '{}' of '{}' must be a tensor, got {}", p.name, op.name, describe(a->value)));
      return SVal::error();
    }
    tensor_args.push_back(a);
  }
  bool attributes = false;  // a call's attributes are not bound yet: fold only ops without any
  for (const ParamSpec& p : op.params) attributes |= p.kind != ParamKind::Tensor;
  if (!partner && op.pointwise && !attributes && tensor_args.size() <= 2) {
    // Numbers only: evaluate now with the op's own scalar definition.
    std::vector<double> xs;
    for (const CallArg* a : tensor_args) {
      if (a->value.kind == SVal::Kind::Int && a->value.i.is_symbolic()) {
        diags_.error(a->loc, fmt::format("symbolic dimension {} cannot be used as a value", a->value.i.str()));
        return SVal::error();
      }
      xs.push_back(a->value.number());
    }
    return SVal::real(op.pointwise(xs.data(), Attrs{}), loc);
  }
  std::vector<Value> inputs;
  std::vector<const CallArg*> input_args;  // the argument each input came from
  if (!op_inputs(op, tensor_args, partner, inputs, input_args)) return SVal::error();
  Attrs attrs;
  if (!op_attrs(op, bound, attrs)) return SVal::error();
  InferFailure why;
  std::optional<NodeId> id;
  std::vector<Value> results;
  const size_t first = g_->nodes.size();  // a composite op adds several nodes
  try {
    id = add_op(*g_, op.kind, inputs, std::move(attrs), loc, &why, &results);
  } catch (const DimOverflow& e) {
    diags_.error(loc, fmt::format("{} in '{}'", e.what(), op.name));
    return SVal::error();
  }
  if (!id) {
    report_infer_failure(op, why, loc, bound, tensor_args, input_args);
    return SVal::error();
  }
  for (size_t k = first; k < g_->nodes.size(); ++k) {
    Node& part = new_node_defaults(g_->nodes[k], loc);
    part.checkpoint = part.checkpoint || checkpoint;
  }
  if (results.size() == 1) return SVal::tensor(results[0], loc);
  SVal tuple{SVal::Kind::Tuple};
  tuple.loc = loc;
  for (const Value& v : results) tuple.items.push_back(SVal::tensor(v, loc));
  return tuple;
}

// Long by design: one switch over the expression kinds, a few lines each.
SVal Sema::eval(const ast::Expr& e) {
  using K = ast::Expr::Kind;
  switch (e.kind) {
    case K::Int: return SVal::integer(e.int_value, e.loc);
    case K::Float: return SVal::real(e.float_value, e.loc);
    case K::Bool: return SVal::boolean(e.bool_value, e.loc);
    case K::Str: {
      SVal v{SVal::Kind::Str};
      v.s = e.text;
      v.loc = e.loc;
      return v;
    }
    case K::Name: {
      if (Binding* b = lookup(e.text)) {
        b->used = true;
        SVal v = b->value;
        v.loc = e.loc;
        v.name = e.text;
        v.decl = b->decl;
        return v;
      }
      if (auto t = parse_dtype(e.text)) {
        SVal v{SVal::Kind::DType};
        v.dt = *t;
        v.loc = e.loc;
        return v;
      }
      if (e.text == "training") {
        diags_.error(e.loc, "'training' is only the condition of an 'if' (if training { ... } else { ... }): the "
                            "train step runs the first branch, eval the second");
        return SVal::error();
      }
      if (auto m = frames_.back().one_mode.find(e.text); m != frames_.back().one_mode.end()) {
        diags_.error(e.loc, fmt::format("'{}' is set only in the {} branch of 'if training'; set it in both to use it "
                                        "after", e.text, m->second.first));
        diags_.note(m->second.second, fmt::format("'{}' set here", e.text));
        return SVal::error();
      }
      std::vector<std::string> names;
      for (const auto& f : {&frames_.back().vars, &globals_})
        for (const auto& kv : *f) names.push_back(kv.first);
      for (DType t : {DType::F32, DType::F16, DType::BF16, DType::I32, DType::Bool}) names.emplace_back(dtype_name(t));
      std::string hint = suggest(e.text, names);
      if (defs_.count(e.text) || OpRegistry::get().find(e.text))
        hint = fmt::format(" ('{}' is a function; call it with parentheses)", e.text);
      diags_.error(e.loc, fmt::format("unknown name '{}'{}", e.text, hint));
      return SVal::error();
    }
    case K::List: {
      SVal v{SVal::Kind::List};
      v.loc = e.loc;
      for (const auto& item : e.items) {
        SVal x = eval(*item);
        if (x.is_error()) return x;
        v.items.push_back(std::move(x));
      }
      return v;
    }
    case K::Unary: {
      SVal x = eval(*e.items[0]);
      if (x.is_error() || e.text == "+") return x;
      if (x.kind == SVal::Kind::Int) {
        if (x.i.is_const() && x.i.const_value() == INT64_MIN) {
          diags_.error(e.loc, "integer overflow in negation");
          return SVal::error();
        }
        try {
          return SVal::integer(-x.i, e.loc);
        } catch (const DimOverflow& err) {
          diags_.error(e.loc, err.what());
          return SVal::error();
        }
      }
      if (x.kind == SVal::Kind::Float) return SVal::real(-x.f, e.loc);
      if (x.kind == SVal::Kind::Tensor)
        return apply_op(op_info(OpKind::Neg), {{x, x.loc, {}, {}}}, e.loc, false);
      diags_.error(e.loc, fmt::format("unary '-' cannot be applied to {}", describe(x)));
      return SVal::error();
    }
    case K::Binary: {
      SVal a = eval(*e.items[0]);
      SVal b = eval(*e.items[1]);
      return binary(e.text, std::move(a), std::move(b), e.loc);
    }
    case K::Call: {
      std::vector<CallArg> args;
      for (const auto& a : e.items) args.push_back({eval(*a), a->loc, {}, {}});
      for (const auto& k : e.keywords) args.push_back({eval(*k.value), k.value->loc, k.name, k.loc});
      if (auto it = defs_.find(e.text); it != defs_.end()) return call_def(*it->second, args, e.loc, e.checkpoint);
      if (const OpInfo* op = OpRegistry::get().find(e.text)) return apply_op(*op, args, e.loc, e.checkpoint || frames_.back().checkpoint);
      std::vector<std::string> names;
      for (const auto& d : defs_) names.push_back(d.first);
      for (const OpInfo& op : OpRegistry::get().all())
        if (op.callable) names.push_back(op.name);
      std::string hint = suggest(e.text, names);
      if (lookup(e.text)) hint = fmt::format(" ('{}' is a variable, not a function)", e.text);
      diags_.error(e.loc, fmt::format("unknown function '{}'{}", e.text, hint));
      return SVal::error();
    }
  }
  return SVal::error();
}

std::optional<Dim> Sema::eval_dim(const ast::Expr& e, const char* what) {
  SVal v = eval(e);
  if (v.is_error()) return std::nullopt;
  if (v.kind != SVal::Kind::Int) {
    diags_.error(e.loc, fmt::format("{} must be an integer, got {}", what, describe(v)));
    return std::nullopt;
  }
  return v.i;
}

std::optional<TensorType> Sema::eval_type(const ast::TypeExpr& t, const char* what) {
  auto dt = parse_dtype(t.name);
  if (!dt) {
    diags_.error(t.loc, fmt::format("unknown tensor type '{}'; expected f32, f16, bf16, i32 or bool", t.name));
    return std::nullopt;
  }
  TensorType out{*dt, {}};
  if (!t.has_dims) {
    diags_.error(t.loc, fmt::format("{} needs a shape, e.g. {}[B, 10] ([] for a scalar)", what, t.name));
    return std::nullopt;
  }
  for (const ast::DimItem& d : t.dims) {
    if (d.ellipsis) {
      diags_.error(d.loc, fmt::format("'...' is only allowed in the type of a def argument"));
      return std::nullopt;
    }
    auto v = eval_dim(*d.expr, "a dimension");
    if (!v) return std::nullopt;
    if (v->is_const() && v->const_value() <= 0) {
      diags_.error(d.loc, fmt::format("dimension must be positive, got {}", v->str()));
      return std::nullopt;
    }
    out.shape.push_back(*v);
  }
  return out;
}

}  // namespace modelc
