// The abstract syntax tree of a .model file. Every node carries its source location.
// Depth is bounded by the parser (kMaxNesting), so recursive walks are safe.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "compiler/support/diagnostics.h"

namespace modelc::ast {

// Deepest nesting of brackets, prefix operators and '**' chains the parser accepts.
inline constexpr int kMaxNesting = 200;

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct KeywordArg {
  std::string name;
  SourceLoc loc;
  ExprPtr value;
};

struct Expr {
  enum class Kind { Name, Int, Float, Str, Bool, List, Call, Unary, Binary };
  Kind kind{};
  SourceLoc loc;       // the start of the expression; for Unary/Binary the operator
  std::string text;    // Name: the name; Str: the decoded string; Call: the callee;
                       // Unary/Binary: the operator ("-", "+", "**", "@", "<=", ...)
  int64_t int_value = 0;
  double float_value = 0;
  bool bool_value = false;
  bool checkpoint = false;          // Call: written as `@checkpoint f(...)`
  std::vector<ExprPtr> items;       // List items, Call positional args, operands
  std::vector<KeywordArg> keywords; // Call keyword args
};

struct DimItem {
  bool ellipsis = false;
  ExprPtr expr;
  SourceLoc loc;
};

struct TypeExpr {
  std::string name;  // f32, i32, int, float, ...
  SourceLoc loc;
  bool has_dims = false;
  std::vector<DimItem> dims;
};

struct Stmt;
using StmtPtr = std::unique_ptr<Stmt>;

struct Stmt {
  enum class Kind { Let, Param, Buffer, Update, Input, Output, Return, For, Assign, If };
  Kind kind{};
  SourceLoc loc;                     // the statement's first token
  std::vector<std::string> names;    // Let/Param/Buffer/Update/Input/For: one; Output/Assign: one or more
  std::vector<SourceLoc> name_locs;
  std::optional<TypeExpr> type;      // Param, Buffer, Input
  ExprPtr value;                     // Let, Assign, Update, Param and Buffer initializer (may be null), If condition
  std::vector<ExprPtr> values;       // Return
  ExprPtr lo, hi;                    // For
  std::vector<StmtPtr> body;         // For, If (the branch taken when the condition holds)
  std::vector<StmtPtr> else_body;    // If: the else branch (an `else if` is one If in it)
};

struct Arg {
  std::string name;
  SourceLoc loc;
  std::optional<TypeExpr> type;
  ExprPtr default_value;
};

struct Def {
  std::string name;
  SourceLoc loc;
  bool checkpoint = false;
  std::vector<Arg> args;
  std::vector<StmtPtr> body;
};

struct DimParam {
  std::string name;
  SourceLoc loc;
  ExprPtr default_value;
};

struct Model {
  std::string name;
  SourceLoc loc;
  std::vector<DimParam> dims;
  std::vector<StmtPtr> body;
};

struct TrainEntry {
  std::string key;
  SourceLoc loc;
  ExprPtr value;
};

struct Train {
  std::string name;
  SourceLoc loc;
  std::vector<TrainEntry> entries;
};

struct Import {
  std::string path;
  SourceLoc loc;
};

struct Module {
  uint32_t file = 0;
  std::vector<Import> imports;
  std::vector<StmtPtr> lets;  // top-level `let`s, in order
  std::vector<Def> defs;
  std::vector<Model> models;
  std::vector<Train> trains;
};

// Prints the tree, one node per line, indented (for --emit=ast and its golden tests).
std::string print_module(const Module& m, const SourceManager& sm);

}  // namespace modelc::ast
