// Reading and parsing .model files.
//
// load_source checks a file before any parsing: it exists, is a regular file, is at most
// kMaxSourceBytes, is non-empty, holds no NUL byte and is valid UTF-8. parse_module lexes,
// checks nesting depth (so that no recursive walk can overflow the stack), parses with the
// ANTLR parser, rewords its syntax errors for people and builds the AST.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "compiler/frontend/ast.h"
#include "compiler/support/diagnostics.h"

namespace modelc {

inline constexpr size_t kMaxSourceBytes = 16u << 20;  // 16 MiB

// Loads `path` into `sm`; on failure reports an error at `from` (an import statement, or
// no location for the main file) and returns nullopt.
std::optional<uint32_t> load_source(const std::string& path, SourceManager& sm,
                                    DiagnosticEngine& diags, SourceLoc from = {});

// Parses a loaded file. Syntax errors are reported; the AST holds what could be read.
std::unique_ptr<ast::Module> parse_module(uint32_t file, const SourceManager& sm,
                                          DiagnosticEngine& diags);

// The token stream, one token a line: "line:col  KIND  'text'" (for --emit=tokens).
std::string dump_tokens(uint32_t file, const SourceManager& sm);

}  // namespace modelc
