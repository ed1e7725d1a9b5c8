// --emit=ast: the tree, one declaration or statement a line, expressions fully
// parenthesised so that precedence is visible, each line tagged with its position.
#include <fmt/format.h>

#include "compiler/frontend/ast.h"

namespace modelc::ast {
namespace {

std::string quote(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if (c == '\n') { out += "\\n"; continue; }
    if (c == '\t') { out += "\\t"; continue; }
    out += c;
  }
  return out + "\"";
}

std::string expr_str(const Expr* e) {
  if (!e) return "<none>";
  using K = Expr::Kind;
  switch (e->kind) {
    case K::Name: return e->text;
    case K::Int: return std::to_string(e->int_value);
    case K::Float: {
      std::string s = fmt::format("{}", e->float_value);
      return s.find_first_of(".eEn") == std::string::npos ? s + ".0" : s;
    }
    case K::Str: return quote(e->text);
    case K::Bool: return e->bool_value ? "true" : "false";
    case K::List: {
      std::string s = "[";
      for (size_t i = 0; i < e->items.size(); ++i) s += (i ? ", " : "") + expr_str(e->items[i].get());
      return s + "]";
    }
    case K::Call: {
      std::string s = (e->checkpoint ? "@checkpoint " : "") + e->text + "(";
      bool first = true;
      for (const auto& a : e->items) { s += (first ? "" : ", ") + expr_str(a.get()); first = false; }
      for (const auto& k : e->keywords) { s += (first ? "" : ", ") + k.name + " = " + expr_str(k.value.get()); first = false; }
      return s + ")";
    }
    case K::Unary: return "(" + e->text + expr_str(e->items[0].get()) + ")";
    case K::Binary: return "(" + expr_str(e->items[0].get()) + " " + e->text + " " + expr_str(e->items[1].get()) + ")";
  }
  return "?";
}

std::string type_str(const TypeExpr& t) {
  std::string s = t.name;
  if (!t.has_dims) return s;
  s += "[";
  for (size_t i = 0; i < t.dims.size(); ++i)
    s += (i ? ", " : "") + (t.dims[i].ellipsis ? std::string("...") : expr_str(t.dims[i].expr.get()));
  return s + "]";
}

struct Printer {
  const SourceManager& sm;
  std::string out;

  void line(int indent, SourceLoc loc, const std::string& text) {
    out += fmt::format("{:{}}{}  # {}:{}\n", "", indent * 2, text, loc.line, loc.col);
  }

  void stmts(int indent, const std::vector<StmtPtr>& body) {
    for (const StmtPtr& s : body) stmt(indent, *s);
  }

  std::string names(const Stmt& s) {
    std::string r;
    for (size_t i = 0; i < s.names.size(); ++i) r += (i ? ", " : "") + s.names[i];
    return r;
  }

  void stmt(int indent, const Stmt& s) {
    using K = Stmt::Kind;
    switch (s.kind) {
      case K::Let: line(indent, s.loc, "let " + s.names[0] + " = " + expr_str(s.value.get())); break;
      case K::Param:
        line(indent, s.loc, "param " + s.names[0] + ": " + type_str(*s.type) +
                                (s.value ? " = " + expr_str(s.value.get()) : ""));
        break;
      case K::Buffer:
        line(indent, s.loc, "buffer " + s.names[0] + ": " + type_str(*s.type) +
                                (s.value ? " = " + expr_str(s.value.get()) : ""));
        break;
      case K::Update: line(indent, s.loc, "update " + s.names[0] + " = " + expr_str(s.value.get())); break;
      case K::Input: line(indent, s.loc, "input " + s.names[0] + ": " + type_str(*s.type)); break;
      case K::Output: line(indent, s.loc, "output " + names(s)); break;
      case K::Return: {
        std::string r = "return ";
        for (size_t i = 0; i < s.values.size(); ++i) r += (i ? ", " : "") + expr_str(s.values[i].get());
        line(indent, s.loc, r);
        break;
      }
      case K::For:
        line(indent, s.loc, "for " + s.names[0] + " in " + expr_str(s.lo.get()) + ".." + expr_str(s.hi.get()));
        stmts(indent + 1, s.body);
        break;
      case K::Assign: line(indent, s.loc, names(s) + " = " + expr_str(s.value.get())); break;
      case K::If:
        line(indent, s.loc, "if " + expr_str(s.value.get()));
        stmts(indent + 1, s.body);
        if (!s.else_body.empty()) {
          line(indent, s.loc, "else");
          stmts(indent + 1, s.else_body);
        }
        break;
    }
  }
};

}  // namespace

std::string print_module(const Module& m, const SourceManager& sm) {
  Printer p{sm, {}};
  p.out = "module " + sm.name(m.file) + "\n";
  for (const Import& i : m.imports) p.line(1, i.loc, "import " + quote(i.path));
  for (const StmtPtr& l : m.lets) p.stmt(1, *l);
  for (const Def& d : m.defs) {
    std::string args;
    for (size_t i = 0; i < d.args.size(); ++i) {
      const Arg& a = d.args[i];
      args += (i ? ", " : "") + a.name + (a.type ? ": " + type_str(*a.type) : "") +
              (a.default_value ? " = " + expr_str(a.default_value.get()) : "");
    }
    p.line(1, d.loc, std::string(d.checkpoint ? "@checkpoint " : "") + "def " + d.name + "(" + args + ")");
    p.stmts(2, d.body);
  }
  for (const Model& md : m.models) {
    std::string dims;
    for (size_t i = 0; i < md.dims.size(); ++i)
      dims += (i ? ", " : "") + md.dims[i].name +
              (md.dims[i].default_value ? " = " + expr_str(md.dims[i].default_value.get()) : "");
    p.line(1, md.loc, "model " + md.name + "(" + dims + ")");
    p.stmts(2, md.body);
  }
  for (const Train& t : m.trains) {
    p.line(1, t.loc, "train " + t.name);
    for (const TrainEntry& e : t.entries) p.line(2, e.loc, e.key + " = " + expr_str(e.value.get()));
  }
  return p.out;
}

}  // namespace modelc::ast
