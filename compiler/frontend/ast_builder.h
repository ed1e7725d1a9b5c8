// Builds the AST from ANTLR's parse tree (only called on a tree without syntax errors).
#pragma once

#include <memory>

#include "compiler/frontend/ast.h"

namespace modelc {

// `file_context` is a ModelParser::FileContext* (kept opaque so that includers need not
// see the generated headers). Returns nullptr if it reported an error.
std::unique_ptr<ast::Module> build_ast(uint32_t file, void* file_context, DiagnosticEngine& diags);

}  // namespace modelc
