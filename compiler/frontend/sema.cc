// Declarations, statements and def calls. See sema.h for what elaboration guarantees.
#include <fmt/format.h>

#include "compiler/frontend/sema_impl.h"
#include "compiler/frontend/train_check.h"

namespace modelc {

Sema::Sema(const std::vector<const ast::Module*>& modules, const ElaborateOptions& opts,
           const SourceManager& sm, DiagnosticEngine& diags)
    : sm_(sm), diags_(diags), modules_(modules), opts_(opts) {}

Sema::Binding* Sema::lookup(const std::string& name) {
  if (!frames_.empty()) {
    auto it = frames_.back().vars.find(name);
    if (it != frames_.back().vars.end()) return &it->second;
  }
  auto it = globals_.find(name);
  return it == globals_.end() ? nullptr : &it->second;
}

void Sema::bind(const std::string& name, SVal v, SourceLoc decl, Binding::Kind kind) {
  Frame& f = frames_.back();
  auto it = f.vars.find(name);
  if (it != f.vars.end() && it->second.kind == Binding::Kind::Var && !it->second.used &&
      !it->second.value.is_error() && kind == Binding::Kind::Var)
    diags_.warning(it->second.decl, fmt::format("value assigned to '{}' is never used", name));
  v.name.clear();
  v.decl = {};
  f.vars[name] = Binding{kind, std::move(v), decl, false};
}

Node& Sema::new_node_defaults(Node& n, SourceLoc loc) {
  n.loc = loc;
  n.scope = frames_.back().scope;
  n.checkpoint = n.checkpoint || frames_.back().checkpoint;
  if (g_->nodes.size() >= kMaxNodes && !aborted_) {
    diags_.error(loc, fmt::format("the model grows past {} nodes after inlining and unrolling", kMaxNodes));
    aborted_ = true;
  }
  return n;
}

void Sema::exec_block(const std::vector<ast::StmtPtr>& body) {
  for (const ast::StmtPtr& s : body) {
    if (stopped() || frames_.back().returned) return;
    exec(*s);
  }
}

bool Sema::declared_twice(const std::string& name, SourceLoc loc) {
  Frame& f = frames_.back();
  if (auto it = f.vars.find(name); it != f.vars.end() && it->second.kind != Binding::Kind::Var) {
    diags_.error(loc, fmt::format("'{}' is already declared", name));
    diags_.note(it->second.decl, fmt::format("'{}' declared here", name));
    return true;
  }
  return false;
}

// One function per statement kind; evaluation may push frames (def calls), so no reference
// to frames_.back() is held across an eval: each use reads it afresh.
void Sema::exec(const ast::Stmt& s) {
  using K = ast::Stmt::Kind;
  const bool in_def = frames_.back().def != nullptr;
  switch (s.kind) {
    case K::Let: return exec_let(s);
    case K::Input: return exec_input(s, in_def);
    case K::Param: return exec_param(s, false);
    case K::Buffer: return exec_param(s, true);
    case K::Update: return exec_update(s);
    case K::Output: return exec_output(s, in_def);
    case K::Return: return exec_return(s, in_def);
    case K::For: return exec_for(s);
    case K::Assign: return exec_assign(s);
    case K::If: return exec_if(s);
  }
}

void Sema::exec_let(const ast::Stmt& s) {
  SVal v = eval(*s.value);
  if (!v.is_error() && !is_compile_time(v)) {
    diags_.error(s.value->loc, fmt::format("'let' needs a compile-time value, got {}; use '{} = ...' for tensors",
                                           describe(v), s.names[0]));
    v = SVal::error();
  }
  if (declared_twice(s.names[0], s.name_locs[0])) return;
  if (auto g = globals_.find(s.names[0]); g != globals_.end()) {
    diags_.warning(s.name_locs[0], fmt::format("constant '{}' hides the global constant of that name", s.names[0]));
    diags_.note(g->second.decl, "the global constant is defined here");
  }
  if (frames_.back().vars.count(s.names[0])) {
    diags_.error(s.name_locs[0], fmt::format("'{}' is already a variable; a constant needs a new name", s.names[0]));
    return;
  }
  bind(s.names[0], v, s.name_locs[0], Binding::Kind::Const);
  frames_.back().vars[s.names[0]].used = true;  // constants are not worth an unused warning
}

void Sema::exec_input(const ast::Stmt& s, bool in_def) {
  if (in_def) {
    diags_.error(s.loc, "'input' is only allowed in a model, not in a def");
    bind(s.names[0], SVal::error(), s.name_locs[0], Binding::Kind::Arg);  // no follow-on errors
    return;
  }
  Frame& f = frames_.back();
  if (declared_twice(s.names[0], s.name_locs[0]) || f.vars.count(s.names[0])) {
    if (f.vars.count(s.names[0]) && f.vars[s.names[0]].kind == Binding::Kind::Var) {
      diags_.error(s.name_locs[0], fmt::format("'{}' is already declared", s.names[0]));
      diags_.note(f.vars[s.names[0]].decl, fmt::format("'{}' declared here", s.names[0]));
    }
    return;
  }
  auto t = eval_type(*s.type, "an input");
  if (!t) { bind(s.names[0], SVal::error(), s.name_locs[0], Binding::Kind::Const); return; }
  Node n;
  n.op = OpKind::Input;
  n.name = s.names[0];
  n.outputs = {*t};
  new_node_defaults(n, s.name_locs[0]);
  NodeId id = g_->add(std::move(n));
  g_->inputs.push_back(id);
  bind(s.names[0], SVal::tensor(Value{id, 0}), s.name_locs[0], Binding::Kind::Arg);
}

// `param` and `buffer` (buffer: a state node marked `buffer`, graph.h): the same checks,
// worded for each.
void Sema::exec_param(const ast::Stmt& s, bool buffer) {
  const std::string& name = s.names[0];
  const char* what = buffer ? "buffer" : "parameter";
  Frame& f = frames_.back();
  if (auto it = f.params_declared.find(name); it != f.params_declared.end()) {
    if (it->second == s.name_locs[0]) {
      diags_.error(s.name_locs[0], fmt::format("{} '{}' is declared again in every iteration of the loop; "
                                               "declare it in a def called from the loop, or before the loop", what, name));
    } else {
      diags_.error(s.name_locs[0], fmt::format("duplicate {} '{}'", what, name));
      diags_.note(it->second, "first declared here");
    }
    return;
  }
  if (declared_twice(name, s.name_locs[0])) return;
  f.params_declared[name] = s.name_locs[0];
  auto t = eval_type(*s.type, buffer ? "a buffer" : "a parameter");
  SVal result = SVal::error();
  if (t) {
    Attrs init;
    bool ok = true;
    for (const Dim& d : t->shape) {
      if (d.is_symbolic()) {
        diags_.error(s.type->loc, fmt::format("{} '{}' must have a known shape, got {}", what, name, t->str()));
        ok = false;
        break;
      }
    }
    int64_t count = 1;
    for (const Dim& d : t->shape) {
      if (!ok) break;
      if (__builtin_mul_overflow(count, d.const_value(), &count) || count > kMaxParamElements) {
        diags_.error(s.type->loc, fmt::format("{} '{}' is too large: {} has more than {} elements", what, name, t->str(), kMaxParamElements));
        ok = false;
      }
    }
    if (ok && !is_float(t->dtype)) {
      diags_.error(s.type->loc, fmt::format("{} '{}' must have a floating-point type, got {}", what, name, t->str()));
      ok = false;
    }
    if (ok && !s.value) {
      diags_.error(s.name_locs[0], fmt::format("{} '{}' needs an initializer, e.g. '= {}'", what, name,
                                               buffer ? "zeros()' or '= ones()" : "normal(std = 0.02)' or '= zeros()"));
      ok = false;
    }
    if (ok) ok = check_initializer(*this, *s.value, *t, init);
    if (ok) {
      Node n;
      n.op = buffer ? OpKind::State : OpKind::Param;
      const std::string& scope = frames_.back().scope;
      n.name = scope.empty() ? name : scope + "/" + name;
      for (char& c : n.name)
        if (c == '/') c = '.';
      n.attrs = std::move(init);
      if (buffer) n.attrs.set("buffer", int64_t{1});
      n.outputs = {*t};
      new_node_defaults(n, s.name_locs[0]);
      n.checkpoint = false;  // parameters and buffers are kept, never recomputed
      NodeId id = g_->add(std::move(n));
      (buffer ? g_->states : g_->params).push_back(id);
      if (buffer) frames_.back().buffers[name] = id;
      result = SVal::tensor(Value{id, 0});
    }
  }
  bind(name, result, s.name_locs[0], Binding::Kind::Arg);
}

void Sema::exec_output(const ast::Stmt& s, bool in_def) {
  if (in_def) {
    diags_.error(s.loc, "'output' is only allowed in a model; a def returns its result with 'return'");
    for (const std::string& name : s.names)
      if (Binding* b = lookup(name)) b->used = true;
    return;
  }
  for (size_t k = 0; k < s.names.size(); ++k) {
    const std::string& name = s.names[k];
    Binding* b = lookup(name);
    if (!b) {
      std::vector<std::string> names;
      for (const auto& kv : frames_.back().vars) names.push_back(kv.first);
      diags_.error(s.name_locs[k], fmt::format("unknown name '{}'{}", name, suggest(name, names)));
      continue;
    }
    b->used = true;
    if (b->value.is_error()) continue;
    if (b->value.kind != SVal::Kind::Tensor) {
      diags_.error(s.name_locs[k], fmt::format("output '{}' must be a tensor, got {}", name, describe(b->value)));
      continue;
    }
    bool dup = false;
    for (const Graph::Output& o : g_->outputs) {
      if (o.name == name) {
        diags_.error(s.name_locs[k], fmt::format("'{}' is already an output", name));
        diags_.note(o.loc, "first listed here");
        dup = true;
      }
    }
    if (!dup) g_->outputs.push_back({name, b->value.t, s.name_locs[k]});
  }
}

void Sema::exec_return(const ast::Stmt& s, bool in_def) {
  if (!in_def) {
    diags_.error(s.loc, "'return' is only allowed in a def; a model names its results with 'output'");
    return;
  }
  SVal result;
  if (s.values.size() == 1) {
    result = eval(*s.values[0]);
  } else {
    result.kind = SVal::Kind::Tuple;
    for (const auto& e : s.values) {
      SVal v = eval(*e);
      if (v.is_error()) result = SVal::error();
      if (!result.is_error()) result.items.push_back(v);
    }
  }
  frames_.back().result = result;
  frames_.back().returned = true;
}

void Sema::exec_for(const ast::Stmt& s) {
  auto lo = eval_dim(*s.lo, "a loop bound");
  auto hi = eval_dim(*s.hi, "a loop bound");
  if (!lo || !hi) return;
  for (const auto& [d, e] : {std::pair{*lo, s.lo.get()}, std::pair{*hi, s.hi.get()}}) {
    if (d.is_symbolic()) {
      diags_.error(e->loc, fmt::format("loop bound must be a known integer, got symbolic dimension {}", d.str()));
      return;
    }
  }
  int64_t a = lo->const_value(), b = hi->const_value();
  if (b < a) {
    diags_.error(s.lo->loc, fmt::format("loop range {}..{} is reversed (the end must not be less than the start)", a, b));
    return;
  }
  if (b - a > kMaxLoopTrips) {
    diags_.error(s.lo->loc, fmt::format("loop of {} iterations is too long to unroll (the limit is {})", b - a, kMaxLoopTrips));
    return;
  }
  const std::string& var = s.names[0];
  if (lookup(var)) {
    diags_.error(s.name_locs[0], fmt::format("loop variable '{}' hides an existing name", var));
    if (Binding* old = lookup(var)) diags_.note(old->decl, fmt::format("'{}' declared here", var));
    return;
  }
  for (int64_t i = a; i < b && !stopped() && !frames_.back().returned; ++i) {
    frames_.back().vars[var] = Binding{Binding::Kind::LoopVar, SVal::integer(i), s.name_locs[0], true};
    exec_block(s.body);
  }
  frames_.back().vars.erase(var);
}

// Only the branch taken is elaborated (as C++'s `if constexpr`): the other one may use
// names and shapes that exist only when it is taken. Names bound in the branch stay bound
// after it, as a loop's do.
void Sema::exec_if(const ast::Stmt& s) {
  if (s.value->kind == ast::Expr::Kind::Name && s.value->text == "training" && !lookup("training"))
    return exec_mode_if(s);
  const SVal c = eval(*s.value);
  if (c.is_error()) return;
  if (c.kind != SVal::Kind::Bool) {
    diags_.error(s.value->loc, fmt::format("the condition of 'if' must be a bool known when the model is compiled "
                                           "(a bool argument, a comparison of known dims), got {}{}", describe(c),
                                           c.kind == SVal::Kind::Tensor ? "; a choice that depends on the data is "
                                                                          "where(cond, a, b)" : ""));
    return;
  }
  exec_block(c.b ? s.body : s.else_body);
}

void Sema::exec_assign(const ast::Stmt& s) {
  SVal v = eval(*s.value);
  for (size_t k = 0; k < s.names.size(); ++k) {
    Binding* b = lookup(s.names[k]);
    if (b && b->kind != Binding::Kind::Var && b->kind != Binding::Kind::Arg) {
      diags_.error(s.name_locs[k], fmt::format("cannot assign to '{}': it is a {}", s.names[k],
                                               b->kind == Binding::Kind::LoopVar ? "loop variable"
                                               : b->kind == Binding::Kind::Dim  ? "dimension"
                                                                                : "constant"));
      diags_.note(b->decl, fmt::format("'{}' declared here", s.names[k]));
      return;
    }
  }
  if (s.names.size() == 1) {
    if (v.kind == SVal::Kind::Tuple) {
      diags_.error(s.name_locs[0], fmt::format("the right side gives {} values; unpack them into as many names", v.items.size()));
      v = SVal::error();
    } else if (v.kind == SVal::Kind::None) {
      diags_.error(s.value->loc, "the right side gives no value");
      v = SVal::error();
    }
    bind(s.names[0], v, s.name_locs[0], Binding::Kind::Var);
    return;
  }
  if (!v.is_error() && (v.kind != SVal::Kind::Tuple || v.items.size() != s.names.size())) {
    size_t n = v.kind == SVal::Kind::Tuple ? v.items.size() : 1;
    diags_.error(s.name_locs[0], fmt::format("cannot unpack {} value{} into {} names", n, n == 1 ? "" : "s", s.names.size()));
    v = SVal::error();
  }
  for (size_t k = 0; k < s.names.size(); ++k)
    bind(s.names[k], v.is_error() ? SVal::error() : v.items[k], s.name_locs[k], Binding::Kind::Var);
}

}  // namespace modelc
