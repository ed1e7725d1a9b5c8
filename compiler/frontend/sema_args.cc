// Argument binding: arity and keyword checks shared by defs, built-in ops, parameter
// initializers and train settings, and conversion of compile-time values to attributes.
#include <fmt/format.h>

#include <algorithm>

#include "compiler/frontend/sema_impl.h"
#include "compiler/support/suggest.h"

namespace modelc {

std::string Sema::suggest(const std::string& name, const std::vector<std::string>& candidates) const {
  std::string best = closest_name(name, candidates);
  return best.empty() ? "" : fmt::format(" (did you mean '{}'?)", best);
}

bool Sema::bind_names(const std::string& callee, const std::vector<std::string>& names,
                      const std::vector<bool>& required, const std::vector<CallArg>& args,
                      SourceLoc call_loc, SourceLoc callee_decl, std::vector<const CallArg*>& out) {
  out.assign(names.size(), nullptr);
  bool ok = true;
  auto note_decl = [&] {
    if (callee_decl.valid()) diags_.note(callee_decl, fmt::format("'{}' defined here", callee));
  };
  size_t positional = 0;
  for (const CallArg& a : args) {
    if (!a.keyword.empty()) continue;
    if (positional >= names.size()) {
      diags_.error(a.loc, fmt::format("too many arguments to '{}': it takes {} but {} were given", callee,
                                      names.size(), std::count_if(args.begin(), args.end(), [](const CallArg& x) { return x.keyword.empty(); })));
      note_decl();
      return false;
    }
    out[positional++] = &a;
  }
  for (const CallArg& a : args) {
    if (a.keyword.empty()) continue;
    auto it = std::find(names.begin(), names.end(), a.keyword);
    if (it == names.end()) {
      diags_.error(a.keyword_loc, fmt::format("'{}' has no argument named '{}'{}", callee, a.keyword,
                                              suggest(a.keyword, names)));
      note_decl();
      ok = false;
      continue;
    }
    size_t k = static_cast<size_t>(it - names.begin());
    if (out[k]) {
      diags_.error(a.keyword_loc, fmt::format("argument '{}' of '{}' is given twice", a.keyword, callee));
      ok = false;
      continue;
    }
    out[k] = &a;
  }
  if (!ok) return false;
  for (size_t k = 0; k < names.size(); ++k) {
    if (!out[k] && required[k]) {
      diags_.error(call_loc, fmt::format("missing argument '{}' in call to '{}'", names[k], callee));
      note_decl();
      return false;
    }
  }
  return true;
}

std::optional<AttrValue> Sema::to_attr(const CallArg& a, const ParamSpec& p, const std::string& callee) {
  const SVal& v = a.value;
  if (v.is_error()) return std::nullopt;
  auto fail = [&](const char* want) -> std::optional<AttrValue> {
    diags_.error(a.loc, fmt::format("argument '{}' of '{}' must be {}, got {}", p.name, callee, want, describe(v)));
    return std::nullopt;
  };
  auto fail_item = [&](const SVal& item, const char* want) -> std::optional<AttrValue> {
    diags_.error(item.loc.valid() ? item.loc : a.loc,
                 fmt::format("each entry of argument '{}' of '{}' must be {}, got {}", p.name, callee, want, describe(item)));
    return std::nullopt;
  };
  auto known_int = [&](const SVal& x, int64_t& out) {
    if (x.kind != SVal::Kind::Int || !x.i.is_const()) return false;
    out = x.i.const_value();
    return true;
  };
  switch (p.kind) {
    case ParamKind::Int: {
      int64_t x;
      if (!known_int(v, x)) return fail(v.kind == SVal::Kind::Int ? "a known integer" : "an integer");
      return x;
    }
    case ParamKind::Float:
      if (v.kind == SVal::Kind::Int && v.i.is_const()) return static_cast<double>(v.i.const_value());
      if (v.kind == SVal::Kind::Float) return v.f;
      return fail("a number");
    case ParamKind::Bool:
      if (v.kind == SVal::Kind::Bool) return v.b;
      return fail("true or false");
    case ParamKind::Str:
      if (v.kind == SVal::Kind::Str) return v.s;
      return fail("a string");
    case ParamKind::DType:
      if (v.kind == SVal::Kind::DType) return v.dt;
      return fail("a dtype (f32, f16, bf16, i32, bool)");
    case ParamKind::Ints: {
      int64_t x;
      if (known_int(v, x)) return Ints{x};
      if (v.kind != SVal::Kind::List) return fail("a list of integers");
      Ints out;
      for (const SVal& item : v.items) {
        if (!known_int(item, x)) return fail_item(item, "a known integer");
        out.push_back(x);
      }
      return out;
    }
    case ParamKind::Shape: {
      if (v.kind == SVal::Kind::Int) return Shape{v.i};
      if (v.kind != SVal::Kind::List) return fail("a list of dimensions");
      Shape out;
      for (const SVal& item : v.items) {
        if (item.kind != SVal::Kind::Int) return fail_item(item, "an integer dimension");
        out.push_back(item.i);
      }
      return out;
    }
    default: return fail("a compile-time value");
  }
}

bool Sema::bind_specs(const std::string& callee, const std::vector<ParamSpec>& sig, const std::vector<CallArg>& args,
                      SourceLoc call_loc, std::vector<const CallArg*>& out) {
  std::vector<std::string> names;
  std::vector<bool> required;
  for (const ParamSpec& p : sig) {
    names.push_back(p.name);
    required.push_back(!p.has_default);
  }
  return bind_names(callee, names, required, args, call_loc, {}, out);
}

bool Sema::bind_attrs(const std::string& callee, const std::vector<ParamSpec>& sig,
                      const std::vector<CallArg>& args, SourceLoc call_loc, Attrs& out) {
  std::vector<const CallArg*> bound;
  if (!bind_specs(callee, sig, args, call_loc, bound)) return false;
  bool ok = true;
  for (size_t k = 0; k < sig.size(); ++k) {
    if (!bound[k]) {
      if (sig[k].default_value) out.set(sig[k].name, *sig[k].default_value);
      continue;
    }
    auto v = to_attr(*bound[k], sig[k], callee);
    if (!v) { ok = false; continue; }
    out.set(sig[k].name, std::move(*v));
  }
  return ok;
}

}  // namespace modelc
