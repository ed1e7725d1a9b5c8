// Top level of elaboration: globals, the chosen model, def calls with their argument
// types (shape patterns such as f32[..., I] bind I), and the warnings at the end.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <charconv>
#include <cmath>
#include <set>

#include "compiler/frontend/sema_impl.h"
#include "compiler/frontend/train_check.h"

namespace modelc {

namespace {

bool parse_define(const std::string& text, SVal& out) {
  int64_t i = 0;
  auto r = std::from_chars(text.data(), text.data() + text.size(), i);
  if (r.ec == std::errc() && r.ptr == text.data() + text.size()) {
    out = SVal::integer(i);
    return true;
  }
  double d = 0;
  auto rd = std::from_chars(text.data(), text.data() + text.size(), d);
  if (rd.ec == std::errc() && rd.ptr == text.data() + text.size() && std::isfinite(d)) {
    out = SVal::real(d);
    return true;
  }
  return false;
}

// A model dimension as a value: its bound size, or its symbol.
SVal dim_value(const DimDecl& d) { return SVal::integer(d.value ? Dim(*d.value) : Dim::symbol(d.name)); }

}  // namespace

// Checks a def argument against its declared type; binds pattern dimensions into `f`.
static bool match_arg(Sema& s, Sema::Frame& f, const ast::Def& def, const ast::Arg& arg, const CallArg& a) {
  const SVal& v = a.value;
  if (v.is_error()) return false;
  if (!arg.type) return true;
  const ast::TypeExpr& t = *arg.type;
  auto fail = [&](const std::string& want) {
    s.diags_.error(a.loc, fmt::format("argument '{}' of '{}' must be {}, got {}", arg.name, def.name, want, s.describe(v)));
    s.diags_.note(arg.loc, fmt::format("'{}' declared here", arg.name));
    return false;
  };
  if (t.name == "int") return v.kind == SVal::Kind::Int ? true : fail("an integer");
  if (t.name == "float") return v.kind == SVal::Kind::Float || (v.kind == SVal::Kind::Int && v.i.is_const()) ? true : fail("a number");
  if (t.name == "bool") return v.kind == SVal::Kind::Bool ? true : fail("true or false");
  if (t.name == "str") return v.kind == SVal::Kind::Str ? true : fail("a string");
  if (t.name == "dtype") return v.kind == SVal::Kind::DType ? true : fail("a dtype");
  auto dt = parse_dtype(t.name);
  if (t.name != "tensor" && !dt) {
    s.diags_.error(t.loc, fmt::format("unknown type '{}'; expected a tensor type (f32[...], i32[...], ...), int, float, bool, str or dtype", t.name));
    return false;
  }
  std::string pattern = t.name;
  if (t.has_dims) {
    pattern += "[";
    for (size_t k = 0; k < t.dims.size(); ++k) {
      pattern += k ? ", " : "";
      if (t.dims[k].ellipsis) pattern += "...";
      else if (t.dims[k].expr->kind == ast::Expr::Kind::Name) pattern += t.dims[k].expr->text;
      else if (t.dims[k].expr->kind == ast::Expr::Kind::Int) pattern += std::to_string(t.dims[k].expr->int_value);
      else pattern += "_";
    }
    pattern += "]";
  }
  if (v.kind != SVal::Kind::Tensor) return fail("a tensor " + pattern);
  const TensorType& tt = s.g_->type(v.t);
  if (dt && tt.dtype != *dt) return fail(pattern);
  if (!t.has_dims) return true;
  int ellipsis = -1;
  for (size_t k = 0; k < t.dims.size(); ++k) {
    if (!t.dims[k].ellipsis) continue;
    if (ellipsis >= 0) {
      s.diags_.error(t.dims[k].loc, "only one '...' is allowed in a shape");
      return false;
    }
    ellipsis = static_cast<int>(k);
  }
  int fixed = static_cast<int>(t.dims.size()) - (ellipsis >= 0 ? 1 : 0);
  if (ellipsis < 0 ? tt.rank() != fixed : tt.rank() < fixed) return fail(pattern);
  for (size_t k = 0; k < t.dims.size(); ++k) {
    if (t.dims[k].ellipsis) continue;
    int pos = ellipsis < 0 || static_cast<int>(k) < ellipsis ? static_cast<int>(k)
                                                              : tt.rank() - (static_cast<int>(t.dims.size()) - static_cast<int>(k));
    const Dim& actual = tt.shape[static_cast<size_t>(pos)];
    const ast::Expr& de = *t.dims[k].expr;
    if (de.kind == ast::Expr::Kind::Name && !f.vars.count(de.text)) {
      f.vars[de.text] = Sema::Binding{Sema::Binding::Kind::Dim, SVal::integer(actual), t.dims[k].loc, true};
      continue;
    }
    // A dimension already bound (by an earlier argument or this one) or an expression.
    s.frames_.push_back(std::move(f));
    SVal want = s.eval(de);
    f = std::move(s.frames_.back());
    s.frames_.pop_back();
    if (want.is_error()) return false;
    if (want.kind != SVal::Kind::Int || want.i != actual) {
      std::string why = want.kind == SVal::Kind::Int ? fmt::format(" ({} is {} here)", de.kind == ast::Expr::Kind::Name ? de.text : "the dimension", want.i.str()) : "";
      return fail(pattern + why);
    }
  }
  return true;
}

// Long by design: a call in the order it happens: bind the arguments, push a frame, run the body, check the result.
SVal Sema::call_def(const ast::Def& def, const std::vector<CallArg>& args, SourceLoc loc, bool checkpoint) {
  for (size_t k = 0; k < call_stack_.size(); ++k) {
    if (call_stack_[k].first != &def) continue;
    std::string chain;
    for (size_t j = k; j < call_stack_.size(); ++j) chain += call_stack_[j].first->name + " -> ";
    chain += def.name;
    diags_.error(loc, k + 1 == call_stack_.size()
                          ? fmt::format("recursive call to '{}' (defs are inlined, so they cannot call themselves)", def.name)
                          : fmt::format("recursive call to '{}' through {} (defs are inlined, so they cannot call themselves)", def.name, chain));
    diags_.note(def.loc, fmt::format("'{}' defined here", def.name));
    return SVal::error();
  }
  if (call_stack_.size() >= static_cast<size_t>(kMaxCallDepth)) {
    diags_.error(loc, fmt::format("def calls nested too deeply (the limit is {})", kMaxCallDepth));
    aborted_ = true;
    return SVal::error();
  }
  std::vector<std::string> names;
  std::vector<bool> required;
  for (const ast::Arg& a : def.args) {
    names.push_back(a.name);
    required.push_back(!a.default_value);
  }
  std::vector<const CallArg*> bound;
  if (!bind_names(def.name, names, required, args, loc, def.loc, bound)) return SVal::error();

  Frame callee;
  callee.def = &def;
  Frame& caller = frames_.back();
  int index = caller.call_counts[def.name]++;
  callee.scope = (caller.scope.empty() ? "" : caller.scope + "/") + def.name + "." + std::to_string(index);
  callee.checkpoint = caller.checkpoint || checkpoint || def.checkpoint;
  bool ok = true;
  std::vector<CallArg> defaults;  // keeps default values alive while matching
  defaults.reserve(def.args.size());
  for (size_t k = 0; k < def.args.size(); ++k) {
    const ast::Arg& a = def.args[k];
    const CallArg* given = bound[k];
    if (!given) {
      // Defaults are evaluated where the def is written: globals only.
      Frame empty;
      empty.scope = callee.scope;
      frames_.push_back(std::move(empty));
      SVal v = eval(*a.default_value);
      frames_.pop_back();
      defaults.push_back({v, a.default_value->loc, {}, {}});
      given = &defaults.back();
    }
    if (!match_arg(*this, callee, def, a, *given)) { ok = false; continue; }
    if (callee.vars.count(a.name) && callee.vars[a.name].kind != Binding::Kind::Dim) {
      diags_.error(a.loc, fmt::format("argument '{}' of '{}' is declared twice", a.name, def.name));
      ok = false;
      continue;
    }
    SVal v = given->value;
    v.name.clear();
    v.decl = {};
    if (a.type && a.type->name == "float" && v.kind == SVal::Kind::Int) v = SVal::real(static_cast<double>(v.i.const_value()));
    callee.vars[a.name] = Binding{Binding::Kind::Arg, v, a.loc, false};
  }
  if (!ok) return SVal::error();

  call_stack_.emplace_back(&def, loc);
  frames_.push_back(std::move(callee));
  diags_.push_context(loc, fmt::format("in the call of '{}' here", def.name));
  int errors_before = diags_.num_errors();
  exec_block(def.body);
  diags_.pop_context();
  Frame done = std::move(frames_.back());
  frames_.pop_back();
  call_stack_.pop_back();
  // A body that failed has said why; its result and unused names would only add noise.
  if (diags_.num_errors() > errors_before) return SVal::error();
  for (const auto& [name, b] : done.vars) {
    if (b.used || b.value.is_error()) continue;
    if (b.kind == Binding::Kind::Arg && done.params_declared.count(name) == 0)
      diags_.warning(b.decl, fmt::format("argument '{}' of '{}' is never used", name, def.name));
    else if (b.kind == Binding::Kind::Var)
      diags_.warning(b.decl, fmt::format("value assigned to '{}' is never used", name));
  }
  if (!done.returned) {
    SVal none{SVal::Kind::None};
    none.loc = loc;
    return none;
  }
  return done.result;
}

// Defs and models from every module, in order (imports after the main file; a name may be
// defined once); the models' names and places into `models_seen`.
void Sema::collect_decls(std::map<std::string, SourceLoc>& models_seen) {
  for (const ast::Module* m : modules_) {
    for (const ast::Def& d : m->defs) {
      if (auto it = defs_.find(d.name); it != defs_.end()) {
        diags_.error(d.loc, fmt::format("def '{}' is defined twice", d.name));
        diags_.note(it->second->loc, "first defined here");
        continue;
      }
      if (OpRegistry::get().find(d.name))
        diags_.warning(d.loc, fmt::format("def '{}' hides the built-in op of that name", d.name));
      for (size_t a = 0; a < d.args.size(); ++a) {
        for (size_t b = 0; b < a; ++b) {
          if (d.args[a].name != d.args[b].name) continue;
          diags_.error(d.args[a].loc, fmt::format("argument '{}' of '{}' is declared twice", d.args[a].name, d.name));
          diags_.note(d.args[b].loc, "first declared here");
          break;
        }
      }
      defs_[d.name] = &d;
    }
    for (const ast::Model& md : m->models) {
      if (auto it = models_seen.find(md.name); it != models_seen.end()) {
        diags_.error(md.loc, fmt::format("model '{}' is defined twice", md.name));
        diags_.note(it->second, "first defined here");
      }
      models_seen.emplace(md.name, md.loc);
    }
  }
}

// The global constants, imports first, with the -D overrides (those used into `used`).
void Sema::eval_globals(const std::map<std::string, std::string>& defines, std::set<std::string>& defines_used) {
  frames_.reserve(kMaxCallDepth + 8);  // references to frames stay valid while calls nest
  Graph scratch;  // global constants create no nodes, but eval needs a graph to describe values
  g_ = &scratch;
  frames_.emplace_back();  // global frame
  for (auto it = modules_.rbegin(); it != modules_.rend(); ++it) {  // imports first
    for (const ast::StmtPtr& l : (*it)->lets) {
      const std::string& name = l->names[0];
      if (auto g = globals_.find(name); g != globals_.end()) {
        diags_.error(l->name_locs[0], fmt::format("constant '{}' is defined twice", name));
        diags_.note(g->second.decl, "first defined here");
        continue;
      }
      SVal v = eval(*l->value);
      if (!v.is_error() && !is_compile_time(v)) {
        diags_.error(l->value->loc, fmt::format("'let' needs a compile-time value, got {}", describe(v)));
        v = SVal::error();
      }
      if (auto d = defines.find(name); d != defines.end()) {
        defines_used.insert(name);
        if (!parse_define(d->second, v))
          diags_.error({}, fmt::format("-D {}={}: the value must be a number", name, d->second));
      }
      globals_[name] = Binding{Binding::Kind::Global, v, l->name_locs[0], true};
    }
  }
  frames_.clear();
}

// The model to elaborate: --model's, or the main file's only one (null after an error).
const ast::Model* Sema::choose_model(const std::map<std::string, SourceLoc>& models_seen) {
  const ast::Model* model = nullptr;
  if (!opts_.model.empty()) {
    for (const ast::Module* m : modules_)
      for (const ast::Model& md : m->models)
        if (md.name == opts_.model) model = &md;
    if (!model) {
      std::vector<std::string> names;
      for (const auto& kv : models_seen) names.push_back(kv.first);
      diags_.error({}, fmt::format("no model named '{}' in {}{}", opts_.model, sm_.name(modules_[0]->file), suggest(opts_.model, names)));
      return nullptr;
    }
  } else {
    const auto& ms = modules_[0]->models;
    if (ms.empty()) {
      diags_.error(SourceLoc{modules_[0]->file, 0, 0}, "no model in this file (declare one with 'model NAME(...) { ... }')");
      return nullptr;
    }
    if (ms.size() > 1) {
      std::string list;
      for (const ast::Model& md : ms) list += (list.empty() ? "" : ", ") + md.name;
      diags_.error(SourceLoc{modules_[0]->file, 0, 0}, fmt::format("this file defines {} models ({}); choose one with --model", ms.size(), list));
      return nullptr;
    }
    model = &ms[0];
  }
  return model;
}

// The model's dims (with -D values and defaults) into the graph and the model's frame; a -D
// that names nothing is an error.
void Sema::bind_dims(const ast::Model& m, const std::map<std::string, std::string>& defines,
                     std::set<std::string>& defines_used) {
  const ast::Model* model = &m;
  frames_.emplace_back();
  Frame& mf = frames_.back();
  for (const ast::DimParam& d : model->dims) {
    if (mf.vars.count(d.name)) {
      diags_.error(d.loc, fmt::format("dimension '{}' is declared twice", d.name));
      diags_.note(mf.vars[d.name].decl, "first declared here");
      continue;
    }
    if (auto g = globals_.find(d.name); g != globals_.end()) {
      diags_.error(d.loc, fmt::format("dimension '{}' has the name of a global constant", d.name));
      diags_.note(g->second.decl, "the constant is defined here");
      continue;
    }
    DimDecl decl{d.name, std::nullopt, d.loc};
    if (auto it = defines.find(d.name); it != defines.end()) {
      defines_used.insert(d.name);
      int64_t v = 0;
      auto r = std::from_chars(it->second.data(), it->second.data() + it->second.size(), v);
      if (r.ec != std::errc() || r.ptr != it->second.data() + it->second.size() || v <= 0)
        diags_.error({}, fmt::format("-D {}={}: a dimension must be a positive integer", d.name, it->second));
      else decl.value = v;
    } else if (d.default_value) {
      auto v = eval_dim(*d.default_value, "a dimension's default");
      if (v && (v->is_symbolic() || v->const_value() <= 0)) {
        diags_.error(d.default_value->loc, fmt::format("a dimension's default must be a positive integer, got {}", v->str()));
      } else if (v) {
        decl.value = v->const_value();
      }
    }
    g_->dims.push_back(decl);
    mf.vars[d.name] = Binding{Binding::Kind::Dim, dim_value(decl), d.loc, true};
  }
  for (const auto& [name, value] : opts_.defines) {
    if (!defines_used.count(name)) {
      std::vector<std::string> names;
      for (const ast::DimParam& d : model->dims) names.push_back(d.name);
      for (const auto& kv : globals_) names.push_back(kv.first);
      diags_.error({}, fmt::format("-D {}={}: model '{}' has no dimension or constant named '{}'{}", name, value,
                                   model->name, name, suggest(name, names)));
    }
  }
}

// After the body: a model without outputs is an error, unused names, inputs and params warnings.
void Sema::check_unused(const ast::Model& m) {
  const ast::Model* model = &m;
  // Unused names, inputs and parameters are almost always a mistake; after an error they
  // are mostly noise (the uses may sit in the expressions that failed). Decided once here,
  // so that -Werror turning the first warning into an error does not hide the others.
  const bool clean = !diags_.has_errors();
  if (g_->outputs.empty() && clean)
    diags_.error(model->loc, fmt::format("model '{}' has no output (name its result with 'output NAME')", model->name));
  if (clean) {
    for (const auto& [name, b] : frames_.back().vars)
      if (b.kind == Binding::Kind::Var && !b.used && !b.value.is_error())
        diags_.warning(b.decl, fmt::format("value assigned to '{}' is never used", name));
    std::vector<bool> used(g_->nodes.size(), false);
    for (const Node& n : g_->nodes)
      for (const Value& v : n.inputs)
        if (v.valid()) used[v.node] = true;
    for (const Graph::Output& o : g_->outputs) used[o.value.node] = true;
    for (NodeId id : g_->inputs)
      if (!used[id]) diags_.warning(g_->nodes[id].loc, fmt::format("input '{}' is never used", g_->nodes[id].name));
    for (NodeId id : g_->params)
      if (!used[id]) diags_.warning(g_->nodes[id].loc, fmt::format("parameter '{}' is never used", g_->nodes[id].name));
    for (const Graph::Update& u : g_->updates) used[u.target] = true;
    for (NodeId id : g_->states)
      if (!used[id]) diags_.warning(g_->nodes[id].loc, fmt::format("buffer '{}' is never used or updated", g_->nodes[id].name));
  }
}

// ElaborateOptions::outputs: the named tensors of the model's body replace its outputs; a
// name that is not one is an error listing those that are.
void Sema::outputs_by_name(const ast::Model& m) {
  std::vector<std::string> tensors;
  for (const auto& [name, b] : frames_.back().vars)
    if (b.value.kind == SVal::Kind::Tensor && !b.value.is_error()) tensors.push_back(name);
  std::vector<Graph::Output> outs;
  for (const std::string& name : opts_.outputs) {
    auto it = frames_.back().vars.find(name);
    if (it == frames_.back().vars.end() || it->second.value.kind != SVal::Kind::Tensor || it->second.value.is_error()) {
      diags_.error(m.loc, fmt::format("--output {}: model '{}' has no tensor named '{}' (its tensors: {}){}", name, m.name,
                                      name, fmt::join(tensors, ", "), suggest(name, tensors)));
      continue;
    }
    bool dup = false;
    for (const Graph::Output& o : outs) dup |= o.name == name;
    if (!dup) outs.push_back({name, it->second.value.t, it->second.decl});
  }
  g_->outputs = std::move(outs);
}

// The train section of the model, if any, checked into out.train; one for an unknown model
// is an error.
void Sema::find_train(const ast::Model& md, const std::map<std::string, SourceLoc>& models_seen, Elaborated& out) {
  const ast::Model* model = &md;
  for (const ast::Module* m : modules_) {
    for (const ast::Train& t : m->trains) {
      if (!models_seen.count(t.name)) {
        std::vector<std::string> names;
        for (const auto& kv : models_seen) names.push_back(kv.first);
        diags_.error(t.loc, fmt::format("train section for unknown model '{}'{}", t.name, suggest(t.name, names)));
        continue;
      }
      if (t.name != model->name) continue;
      if (out.train) {
        diags_.error(t.loc, fmt::format("model '{}' has two train sections", t.name));
        diags_.note(out.train->loc, "the first one is here");
        continue;
      }
      frames_.emplace_back();
      for (const DimDecl& d : g_->dims)
        frames_.back().vars[d.name] = Binding{Binding::Kind::Dim, dim_value(d), d.loc, true};
      TrainConfig cfg;
      if (check_train(*this, t, cfg)) out.train = std::move(cfg);
      frames_.clear();
    }
  }
}

Elaborated Sema::run() {
  Elaborated out;
  std::map<std::string, SourceLoc> models_seen;
  collect_decls(models_seen);
  const std::map<std::string, std::string> defines(opts_.defines.begin(), opts_.defines.end());
  std::set<std::string> defines_used;
  eval_globals(defines, defines_used);
  if (diags_.has_errors()) return out;
  const ast::Model* model = choose_model(models_seen);
  if (!model || diags_.has_errors()) return out;
  auto graph = std::make_unique<Graph>();
  g_ = graph.get();
  g_->name = model->name;
  bind_dims(*model, defines, defines_used);
  if (diags_.has_errors()) return out;
  exec_block(model->body);
  if (stopped()) return out;
  if (opts_.outputs.empty()) check_unused(*model);
  else outputs_by_name(*model);
  if (diags_.has_errors()) return out;
  frames_.clear();
  find_train(*model, models_seen, out);
  if (diags_.has_errors()) return out;
  out.graph = std::move(graph);
  return out;
}

Elaborated elaborate(const std::vector<const ast::Module*>& modules, const ElaborateOptions& opts,
                     const SourceManager& sm, DiagnosticEngine& diags) {
  Sema s(modules, opts, sm, diags);
  return s.run();
}

}  // namespace modelc
