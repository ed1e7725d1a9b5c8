#include "compiler/frontend/ast_builder.h"

#include <fmt/format.h>

#include <charconv>
#include <cmath>

#include "ModelParser.h"

namespace modelc {

using P = modelc_grammar::ModelParser;

namespace {

// Deepest AST the builder makes (nesting plus chains of binary operators), so that every
// later recursive walk of the tree, and its destruction, stays within the stack.
constexpr int kMaxAstDepth = 1000;

// The parse tree's node kinds are classes; comparing their exact type is much cheaper than
// a dynamic_cast, which matters on inputs of millions of tokens.
template <class T, class U>
T* as(U* node) {
  return node && typeid(*node) == typeid(T) ? static_cast<T*>(node) : nullptr;
}

class Builder {
 public:
  Builder(uint32_t file, DiagnosticEngine& d) : file_(file), diags_(d) {}

  std::unique_ptr<ast::Module> module(P::FileContext* f) {
    auto m = std::make_unique<ast::Module>();
    m->file = file_;
    for (P::TopItemContext* item : f->topItem()) {
      if (auto* i = item->importDecl()) {
        m->imports.push_back({decode_string(i->STRING()->getSymbol()), loc(i->getStart())});
      } else if (auto* l = item->letStmt()) {
        auto s = std::make_unique<ast::Stmt>();
        s->kind = ast::Stmt::Kind::Let;
        s->loc = loc(l->getStart());
        s->names.push_back(l->IDENT()->getText());
        s->name_locs.push_back(loc(l->IDENT()->getSymbol()));
        s->value = expr(l->expr(), 0);
        m->lets.push_back(std::move(s));
      } else if (auto* d = item->defDecl()) {
        m->defs.push_back(def(d));
      } else if (auto* md = item->modelDecl()) {
        m->models.push_back(model(md));
      } else if (auto* t = item->trainDecl()) {
        ast::Train tr;
        tr.name = t->IDENT()->getText();
        tr.loc = loc(t->IDENT()->getSymbol());
        for (P::TrainEntryContext* e : t->trainEntry())
          tr.entries.push_back({e->IDENT()->getText(), loc(e->IDENT()->getSymbol()), expr(e->expr(), 0)});
        m->trains.push_back(std::move(tr));
      }
    }
    return m;
  }

 private:
  uint32_t file_;
  DiagnosticEngine& diags_;
  bool depth_reported_ = false;

  SourceLoc loc(const antlr4::Token* t) const {
    return SourceLoc{file_, static_cast<uint32_t>(t->getLine()),
                     static_cast<uint32_t>(t->getCharPositionInLine() + 1)};
  }

  std::string decode_string(const antlr4::Token* t) {
    std::string raw = t->getText();
    std::string out;
    for (size_t i = 1; i + 1 < raw.size(); ++i) {
      if (raw[i] != '\\') { out += raw[i]; continue; }
      char c = raw[++i];
      switch (c) {
        case 'n': out += '\n'; break;
        case 't': out += '\t'; break;
        case '\\': out += '\\'; break;
        case '"': out += '"'; break;
        default: {
          SourceLoc l = loc(t);
          l.col += static_cast<uint32_t>(i - 1);
          diags_.error(l, fmt::format("unknown escape sequence '\\{}' in string", c));
        }
      }
    }
    return out;
  }

  ast::Def def(P::DefDeclContext* d) {
    ast::Def out;
    out.name = d->IDENT()->getText();
    out.loc = loc(d->IDENT()->getSymbol());
    out.checkpoint = !d->decorator().empty();
    if (auto* al = d->argList()) {
      for (P::ArgContext* a : al->arg()) {
        ast::Arg arg;
        if (auto* ta = as<P::TypedArgContext>(a)) {
          arg.name = ta->IDENT()->getText();
          arg.loc = loc(ta->IDENT()->getSymbol());
          arg.type = type(ta->typeExpr());
          if (ta->expr()) arg.default_value = expr(ta->expr(), 0);
        } else if (auto* ua = as<P::UntypedArgContext>(a)) {
          arg.name = ua->IDENT()->getText();
          arg.loc = loc(ua->IDENT()->getSymbol());
          if (ua->expr()) arg.default_value = expr(ua->expr(), 0);
        }
        out.args.push_back(std::move(arg));
      }
    }
    out.body = block(d->block(), 0);
    return out;
  }

  ast::Model model(P::ModelDeclContext* md) {
    ast::Model out;
    out.name = md->IDENT()->getText();
    out.loc = loc(md->IDENT()->getSymbol());
    if (auto* dp = md->dimParams())
      for (P::DimParamContext* p : dp->dimParam())
        out.dims.push_back({p->IDENT()->getText(), loc(p->IDENT()->getSymbol()),
                            p->expr() ? expr(p->expr(), 0) : nullptr});
    out.body = block(md->block(), 0);
    return out;
  }

  ast::TypeExpr type(P::TypeExprContext* t) {
    ast::TypeExpr out;
    out.name = t->IDENT()->getText();
    out.loc = loc(t->getStart());
    out.has_dims = t->children.size() > 1;
    if (auto* dl = t->dimList()) {
      for (P::DimItemContext* item : dl->dimItem()) {
        ast::DimItem d;
        d.loc = loc(item->getStart());
        if (auto* e = as<P::ExprDimContext>(item)) d.expr = expr(e->expr(), 0);
        else d.ellipsis = true;
        out.dims.push_back(std::move(d));
      }
    }
    return out;
  }

  ast::StmtPtr if_chain(P::IfChainContext* c, int depth) {
    auto out = std::make_unique<ast::Stmt>();
    out->kind = ast::Stmt::Kind::If;
    out->loc = loc(c->getStart());
    out->value = expr(c->expr(), depth);
    out->body = block(c->block(0), depth);
    if (c->ifChain()) {
      if (auto nested = if_chain(c->ifChain(), depth)) out->else_body.push_back(std::move(nested));
    } else if (c->block().size() > 1) {
      out->else_body = block(c->block(1), depth);
    }
    return out;
  }

  std::vector<ast::StmtPtr> block(P::BlockContext* b, int depth) {
    std::vector<ast::StmtPtr> out;
    P::StmtContext* prev = nullptr;
    for (P::StmtContext* s : b->stmt()) {
      // `param w: f32[4] normal(...)` parses as a param without initializer followed by a
      // call statement: say what is missing.
      auto* call = as<P::CallStmtContext>(s);
      auto* param = as<P::ParamStmtContext>(prev);
      if (call && param && !param->expr() && param->getStop()->getLine() == call->getStart()->getLine()) {
        diags_.error(loc(call->IDENT()->getSymbol()),
                     fmt::format("missing '=' before the initializer of parameter '{}'", param->IDENT()->getText()));
      } else if (auto st = stmt(s, depth + 1)) {
        out.push_back(std::move(st));
      }
      prev = s;
    }
    return out;
  }

  ast::StmtPtr stmt(P::StmtContext* s, int depth) {
    using K = ast::Stmt::Kind;
    auto out = std::make_unique<ast::Stmt>();
    out->loc = loc(s->getStart());
    auto name = [&](antlr4::tree::TerminalNode* n) {
      out->names.push_back(n->getText());
      out->name_locs.push_back(loc(n->getSymbol()));
    };
    if (auto* l = as<P::LetStatementContext>(s)) {
      out->kind = K::Let;
      name(l->IDENT());
      out->value = expr(l->expr(), depth);
    } else if (auto* p = as<P::ParamStmtContext>(s)) {
      out->kind = K::Param;
      name(p->IDENT());
      out->type = type(p->typeExpr());
      if (p->expr()) out->value = expr(p->expr(), depth);
    } else if (auto* bs = as<P::BufferStmtContext>(s)) {
      out->kind = K::Buffer;
      name(bs->IDENT());
      out->type = type(bs->typeExpr());
      if (bs->expr()) out->value = expr(bs->expr(), depth);
    } else if (auto* w = as<P::WordStmtContext>(s)) {
      // `update NAME = value`; `update` stays free for names elsewhere.
      if (w->IDENT(0)->getText() != "update") {
        diags_.error(loc(w->IDENT(1)->getSymbol()),
                     fmt::format("unexpected '{}' after '{}'; an assignment is 'NAME = value', a buffer's new value "
                                 "'update NAME = value'", w->IDENT(1)->getText(), w->IDENT(0)->getText()));
        return nullptr;
      }
      out->kind = K::Update;
      name(w->IDENT(1));
      out->value = expr(w->expr(), depth);
    } else if (auto* i = as<P::InputStmtContext>(s)) {
      out->kind = K::Input;
      name(i->IDENT());
      out->type = type(i->typeExpr());
    } else if (auto* o = as<P::OutputStmtContext>(s)) {
      out->kind = K::Output;
      for (auto* n : o->IDENT()) name(n);
    } else if (auto* r = as<P::ReturnStmtContext>(s)) {
      out->kind = K::Return;
      for (auto* e : r->expr()) out->values.push_back(expr(e, depth));
    } else if (auto* f = as<P::ForStmtContext>(s)) {
      out->kind = K::For;
      name(f->IDENT());
      out->lo = expr(f->expr(0), depth);
      out->hi = expr(f->expr(1), depth);
      out->body = block(f->block(), depth);
    } else if (auto* c = as<P::IfStmtContext>(s)) {
      return if_chain(c->ifChain(), depth);
    } else if (auto* a = as<P::AssignStmtContext>(s)) {
      out->kind = K::Assign;
      for (auto* n : a->IDENT()) name(n);
      out->value = expr(a->expr(), depth);
    } else if (auto* cs = as<P::CallStmtContext>(s)) {
      diags_.error(loc(cs->IDENT()->getSymbol()),
                   fmt::format("a call is not a statement on its own; use its result, e.g. 'y = {}(...)'", cs->IDENT()->getText()));
      return nullptr;
    } else {
      return nullptr;  // ';'
    }
    return out;
  }

  ast::ExprPtr too_deep(antlr4::ParserRuleContext* c) {
    if (!depth_reported_)
      diags_.error(loc(c->getStart()),
                   fmt::format("expression nested too deeply (the limit is {} levels)", kMaxAstDepth));
    depth_reported_ = true;
    auto e = std::make_unique<ast::Expr>();
    e->kind = ast::Expr::Kind::Int;
    return e;
  }

  static bool is_left_binary(P::ExprContext* c) {
    return as<P::MulExprContext>(c) || as<P::AddExprContext>(c) ||
           as<P::CmpExprContext>(c);
  }

  ast::ExprPtr expr(P::ExprContext* c, int depth) {
    if (depth > kMaxAstDepth) return too_deep(c);
    if (is_left_binary(c)) {
      // Left-associative chains (a + b + c ...) come as a left-deep tree as long as the
      // chain: walk its spine without recursion, then build bottom-up.
      std::vector<P::ExprContext*> spine;
      P::ExprContext* leftmost = c;
      while (is_left_binary(leftmost)) {
        spine.push_back(leftmost);
        leftmost = leftmost->children.size() == 3 ? static_cast<P::ExprContext*>(leftmost->children[0]) : nullptr;
        if (!leftmost) return too_deep(c);
        if (depth + static_cast<int>(spine.size()) > kMaxAstDepth) return too_deep(c);
      }
      ast::ExprPtr acc = expr(leftmost, depth + static_cast<int>(spine.size()));
      for (size_t k = spine.size(); k-- > 0;) {
        P::ExprContext* node = spine[k];
        auto* op = dynamic_cast<antlr4::tree::TerminalNode*>(node->children[1]);
        auto e = std::make_unique<ast::Expr>();
        e->kind = ast::Expr::Kind::Binary;
        e->text = op->getText();
        e->loc = loc(op->getSymbol());
        e->items.push_back(std::move(acc));
        e->items.push_back(expr(static_cast<P::ExprContext*>(node->children[2]), depth + static_cast<int>(k) + 1));
        acc = std::move(e);
      }
      return acc;
    }
    if (auto* p = as<P::PowExprContext>(c)) {
      auto e = std::make_unique<ast::Expr>();
      e->kind = ast::Expr::Kind::Binary;
      auto* op = dynamic_cast<antlr4::tree::TerminalNode*>(p->children[1]);
      e->text = "**";
      e->loc = loc(op->getSymbol());
      e->items.push_back(expr(p->expr(0), depth + 1));
      e->items.push_back(expr(p->expr(1), depth + 1));
      return e;
    }
    if (auto* u = as<P::UnaryExprContext>(c)) {
      auto e = std::make_unique<ast::Expr>();
      e->kind = ast::Expr::Kind::Unary;
      e->text = u->getStart()->getText();
      e->loc = loc(u->getStart());
      e->items.push_back(expr(u->expr(), depth + 1));
      return e;
    }
    auto* pe = as<P::PrimaryExprContext>(c);
    return primary(pe->primary(), depth + 1);
  }

  ast::ExprPtr primary(P::PrimaryContext* c, int depth) {
    using K = ast::Expr::Kind;
    auto e = std::make_unique<ast::Expr>();
    e->loc = loc(c->getStart());
    if (auto* call = as<P::CallExprContext>(c)) {
      e->kind = K::Call;
      e->text = call->IDENT()->getText();
      e->checkpoint = call->CHECKPOINT() != nullptr;
      e->loc = loc(call->IDENT()->getSymbol());
      if (auto* args = call->callArgs()) {
        for (P::CallArgContext* a : args->callArg()) {
          if (auto* kw = as<P::KeywordArgContext>(a)) {
            e->keywords.push_back({kw->IDENT()->getText(), loc(kw->IDENT()->getSymbol()), expr(kw->expr(), depth + 1)});
          } else if (auto* pa = as<P::PositionalArgContext>(a)) {
            if (!e->keywords.empty())
              diags_.error(loc(pa->getStart()), "positional argument after a keyword argument");
            e->items.push_back(expr(pa->expr(), depth + 1));
          }
        }
      }
    } else if (auto* n = as<P::NameExprContext>(c)) {
      e->kind = K::Name;
      e->text = n->IDENT()->getText();
    } else if (auto* i = as<P::IntExprContext>(c)) {
      e->kind = K::Int;
      std::string t = i->INT()->getText();
      auto r = std::from_chars(t.data(), t.data() + t.size(), e->int_value);
      if (r.ec != std::errc())
        diags_.error(e->loc, fmt::format("integer {} is too large (the limit is {})", t, INT64_MAX));
    } else if (auto* f = as<P::FloatExprContext>(c)) {
      e->kind = K::Float;
      e->float_value = std::strtod(f->FLOAT()->getText().c_str(), nullptr);
      if (!std::isfinite(e->float_value))
        diags_.error(e->loc, fmt::format("number {} is out of range", f->FLOAT()->getText()));
    } else if (auto* s = as<P::StringExprContext>(c)) {
      e->kind = K::Str;
      e->text = decode_string(s->STRING()->getSymbol());
    } else if (as<P::BoolExprContext>(c)) {
      e->kind = K::Bool;
      e->bool_value = c->getStart()->getText() == "true";
    } else if (auto* pa = as<P::ParenExprContext>(c)) {
      return expr(pa->expr(), depth + 1);
    } else if (auto* l = as<P::ListExprContext>(c)) {
      e->kind = K::List;
      for (auto* item : l->expr()) e->items.push_back(expr(item, depth + 1));
    }
    return e;
  }
};

}  // namespace

std::unique_ptr<ast::Module> build_ast(uint32_t file, void* file_context, DiagnosticEngine& diags) {
  Builder b(file, diags);
  int before = diags.num_errors();
  auto m = b.module(static_cast<P::FileContext*>(file_context));
  if (diags.num_errors() > before) return nullptr;
  return m;
}

}  // namespace modelc
