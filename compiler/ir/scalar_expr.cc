// The scalar-expression language: parser, printer, binding to a node, double evaluator.
#include "compiler/ir/scalar_expr.h"

#include <cctype>
#include <cmath>
#include <cstdlib>
#include <limits>

#include <fmt/format.h>

#include "compiler/ir/op_registry.h"

namespace modelc {
namespace {

using Op = ScalarExpr::Op;

struct FnSpec {
  std::string_view name;
  Op op;
  size_t arity;
};
constexpr FnSpec kFns[] = {
    {"exp", Op::Exp, 1},   {"log", Op::Log, 1},   {"log1p", Op::Log1p, 1}, {"expm1", Op::Expm1, 1},
    {"sqrt", Op::Sqrt, 1}, {"tanh", Op::Tanh, 1}, {"erf", Op::Erf, 1},     {"abs", Op::Abs, 1},
    {"neg", Op::Neg, 1},   {"sin", Op::Sin, 1},   {"cos", Op::Cos, 1},     {"floor", Op::Floor, 1},
    {"ceil", Op::Ceil, 1}, {"round", Op::Round, 1}, {"max", Op::Max, 2},   {"min", Op::Min, 2},
    {"pow", Op::Pow, 2},   {"select", Op::Select, 3}};

class Parser {
 public:
  explicit Parser(std::string_view text) : s_(text) {}

  ScalarExpr parse() {
    ScalarExpr e = cmp();
    skip();
    if (p_ != s_.size()) fail("unexpected text");
    return e;
  }

 private:
  std::string_view s_;
  size_t p_ = 0;

  [[noreturn]] void fail(std::string_view what) {
    throw InternalError(fmt::format("scalar definition '{}': {} at offset {}", s_, what, p_));
  }
  void skip() {
    while (p_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[p_]))) ++p_;
  }
  bool eat(std::string_view tok) {
    skip();
    if (s_.substr(p_, tok.size()) != tok) return false;
    p_ += tok.size();
    return true;
  }
  static ScalarExpr node(Op op, std::vector<ScalarExpr> args) {
    ScalarExpr e;
    e.op = op;
    e.args = std::move(args);
    return e;
  }
  ScalarExpr cmp() {
    ScalarExpr l = sum();
    // Two-character operators first, so that "<=" is not read as "<".
    static const std::pair<std::string_view, Op> ops[] = {{"<=", Op::Le}, {">=", Op::Ge}, {"==", Op::Eq},
                                                          {"!=", Op::Ne}, {"<", Op::Lt},  {">", Op::Gt}};
    for (auto [tok, op] : ops)
      if (eat(tok)) return node(op, {std::move(l), sum()});
    return l;
  }
  ScalarExpr sum() {
    ScalarExpr l = prod();
    for (;;) {
      if (eat("+")) l = node(Op::Add, {std::move(l), prod()});
      else if (eat("-")) l = node(Op::Sub, {std::move(l), prod()});
      else return l;
    }
  }
  ScalarExpr prod() {
    ScalarExpr l = unary();
    for (;;) {
      if (eat("*")) l = node(Op::Mul, {std::move(l), unary()});
      else if (eat("/")) l = node(Op::Div, {std::move(l), unary()});
      else return l;
    }
  }
  std::vector<ScalarExpr> call_args() {
    std::vector<ScalarExpr> args;
    if (!eat(")")) {
      do args.push_back(cmp());
      while (eat(","));
      if (!eat(")")) fail("expected ')' or ','");
    }
    return args;
  }
  ScalarExpr unary() {
    if (eat("-")) {
      ScalarExpr e = unary();
      if (e.op == Op::Const) {  // -0.5 is a constant, so that gradients build no neg of one
        e.value = -e.value;
        return e;
      }
      return node(Op::Neg, {std::move(e)});
    }
    if (eat("(")) {
      ScalarExpr e = cmp();
      if (!eat(")")) fail("expected ')'");
      return e;
    }
    skip();
    if (p_ < s_.size() && (std::isdigit(static_cast<unsigned char>(s_[p_])) || s_[p_] == '.')) {
      std::string rest(s_.substr(p_));
      char* end = nullptr;
      ScalarExpr e;
      e.value = std::strtod(rest.c_str(), &end);
      p_ += static_cast<size_t>(end - rest.c_str());
      return e;
    }
    size_t start = p_;
    while (p_ < s_.size() && (std::isalnum(static_cast<unsigned char>(s_[p_])) || s_[p_] == '_')) ++p_;
    std::string_view id = s_.substr(start, p_ - start);
    if (id.empty()) fail("expected an operand");
    if (eat("(")) {
      std::vector<ScalarExpr> args = call_args();
      for (const FnSpec& f : kFns) {
        if (f.name != id) continue;
        if (args.size() != f.arity) fail(fmt::format("{} takes {} arguments", id, f.arity));
        return node(f.op, std::move(args));
      }
      ScalarExpr e = node(Op::Call, std::move(args));  // an op of the registry, checked when bound
      e.var = std::string(id);
      return e;
    }
    ScalarExpr e;
    if (id == "inf") e.value = std::numeric_limits<double>::infinity();
    else if (id == "nan") e.value = std::numeric_limits<double>::quiet_NaN();
    else {
      e.op = Op::Var;
      e.var = std::string(id);
    }
    return e;
  }
};

std::string_view op_token(Op op) {
  switch (op) {
    case Op::Add: return "+";
    case Op::Sub: return "-";
    case Op::Mul: return "*";
    case Op::Div: return "/";
    case Op::Lt: return "<";
    case Op::Le: return "<=";
    case Op::Gt: return ">";
    case Op::Ge: return ">=";
    case Op::Eq: return "==";
    case Op::Ne: return "!=";
    default: return "";
  }
}

// Replaces every name of `bind` by its expression (the arguments of an inlined call).
ScalarExpr substitute(const ScalarExpr& e, const std::map<std::string, ScalarExpr>& bind) {
  if (e.op == Op::Var) {
    auto it = bind.find(e.var);
    if (it == bind.end()) throw InternalError(fmt::format("scalar definition: unbound name '{}'", e.var));
    return it->second;
  }
  ScalarExpr r = e;
  for (ScalarExpr& a : r.args) a = substitute(a, bind);
  return r;
}

ScalarExpr resolve(const ScalarExpr& e, const Attrs& attrs, const std::vector<std::string>& vars, int depth) {
  if (depth > 16) throw InternalError("scalar definition: calls nested too deeply (a definition calls itself?)");
  if (e.op == Op::Var) {
    for (const std::string& v : vars)
      if (v == e.var) return e;
    const AttrValue* a = attrs.find(e.var);
    if (!a || !(std::holds_alternative<double>(*a) || std::holds_alternative<int64_t>(*a)))
      throw InternalError(fmt::format("scalar definition: '{}' is neither an input nor a numeric attribute", e.var));
    ScalarExpr c;
    c.value = attrs.f(e.var);
    return c;
  }
  ScalarExpr r = e;
  for (ScalarExpr& a : r.args) a = resolve(a, attrs, vars, depth);
  if (e.op != Op::Call) return r;
  const OpInfo* callee = OpRegistry::get().find(e.var);
  if (!callee || !callee->scalar)
    throw InternalError(fmt::format("scalar definition: '{}' is neither a primitive nor an elementwise op", e.var));
  const std::vector<std::string>& params = scalar_vars(r.args.size());
  Attrs defaults;
  apply_defaults(*callee, defaults);
  ScalarExpr body = resolve(parse_scalar(callee->scalar(defaults)), defaults, params, depth + 1);
  std::map<std::string, ScalarExpr> bind;
  for (size_t i = 0; i < params.size(); ++i) bind[params[i]] = r.args[i];
  return substitute(body, bind);
}

}  // namespace

ScalarExpr parse_scalar(std::string_view text) { return Parser(text).parse(); }

std::string_view scalar_fn_name(Op op) {
  for (const FnSpec& f : kFns)
    if (f.op == op) return f.name;
  return "";
}

std::string scalar_str(const ScalarExpr& e) {
  switch (e.op) {
    case Op::Const: return fmt::format("{}", e.value);
    case Op::Var: return e.var;
    default: break;
  }
  std::string_view tok = op_token(e.op);
  if (!tok.empty()) return fmt::format("({} {} {})", scalar_str(e.args[0]), tok, scalar_str(e.args[1]));
  std::string s = e.op == Op::Call ? e.var : std::string(scalar_fn_name(e.op));
  s += "(";
  for (size_t i = 0; i < e.args.size(); ++i) s += (i ? ", " : "") + scalar_str(e.args[i]);
  return s + ")";
}

ScalarExpr resolve_scalar(const ScalarExpr& e, const Attrs& attrs, const std::vector<std::string>& vars) {
  return resolve(e, attrs, vars, 0);
}

ScalarExpr node_scalar(const Node& n) {
  const OpInfo& info = op_info(n.op);
  if (!info.scalar) throw InternalError(fmt::format("op '{}' has no scalar definition", info.name));
  return resolve_scalar(parse_scalar(info.scalar(n.attrs)), n.attrs, scalar_vars(n.inputs.size()));
}

double eval_scalar(const ScalarExpr& e, const std::map<std::string, double>& vars) {
  auto arg = [&](size_t i) { return eval_scalar(e.args[i], vars); };
  const double nan = std::numeric_limits<double>::quiet_NaN();
  switch (e.op) {
    case Op::Const: return e.value;
    case Op::Var: {
      auto it = vars.find(e.var);
      if (it == vars.end()) throw InternalError(fmt::format("scalar definition: unbound variable '{}'", e.var));
      return it->second;
    }
    case Op::Call: throw InternalError(fmt::format("scalar definition: unresolved call of '{}'", e.var));
    case Op::Add: return arg(0) + arg(1);
    case Op::Sub: return arg(0) - arg(1);
    case Op::Mul: return arg(0) * arg(1);
    case Op::Div: return arg(0) / arg(1);
    case Op::Neg: return -arg(0);
    case Op::Exp: return std::exp(arg(0));
    case Op::Log: return std::log(arg(0));
    case Op::Log1p: return std::log1p(arg(0));
    case Op::Expm1: return std::expm1(arg(0));
    case Op::Sqrt: return std::sqrt(arg(0));
    case Op::Tanh: return std::tanh(arg(0));
    case Op::Erf: return std::erf(arg(0));
    case Op::Abs: return std::fabs(arg(0));
    case Op::Sin: return std::sin(arg(0));
    case Op::Cos: return std::cos(arg(0));
    case Op::Floor: return std::floor(arg(0));
    case Op::Ceil: return std::ceil(arg(0));
    case Op::Round: return std::nearbyint(arg(0));  // the default rounding mode: half to even
    case Op::Pow: return std::pow(arg(0), arg(1));
    case Op::Max: case Op::Min: {
      double a = arg(0), b = arg(1);
      if (std::isnan(a) || std::isnan(b)) return nan;
      return e.op == Op::Max ? (a > b ? a : b) : (a < b ? a : b);
    }
    case Op::Lt: return arg(0) < arg(1);
    case Op::Le: return arg(0) <= arg(1);
    case Op::Gt: return arg(0) > arg(1);
    case Op::Ge: return arg(0) >= arg(1);
    case Op::Eq: return arg(0) == arg(1);
    case Op::Ne: return arg(0) != arg(1);
    case Op::Select: return arg(0) != 0 ? arg(1) : arg(2);
  }
  throw InternalError("scalar definition: unknown primitive");
}

const std::vector<std::string>& scalar_vars(size_t num_inputs) {
  static const std::vector<std::string> vars[] = {{}, {"x"}, {"a", "b"}, {"c", "a", "b"}};
  if (num_inputs > 3) throw InternalError(fmt::format("scalar definition with {} inputs", num_inputs));
  return vars[num_inputs];
}

}  // namespace modelc
