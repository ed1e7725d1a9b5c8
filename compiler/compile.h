// The front end's entry point: load a .model file and its imports, parse, elaborate. The
// rest of the compilation is the pipeline (compiler/pipeline.h), which starts here.
//
//   modelc::Compilation c(opts);
//   if (c.load("models/char_gpt.model")) { auto r = c.elaborate(); ... }
//   std::cerr << c.diags().render();
//
// Library code never exits or prints: problems are diagnostics, rendered by the caller.
#pragma once

#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "compiler/frontend/ast.h"
#include "compiler/frontend/sema.h"
#include "compiler/support/diagnostics.h"

namespace modelc {

struct CompileOptions {
  std::string model;  // which model of the file ("" = its only one)
  std::vector<std::pair<std::string, std::string>> defines;  // -D NAME=VALUE
  bool warnings_as_errors = false;
  int error_limit = 20;
};

inline constexpr int kMaxImportDepth = 32;

class Compilation {
 public:
  explicit Compilation(CompileOptions opts);
  Compilation(const Compilation&) = delete;
  Compilation& operator=(const Compilation&) = delete;

  // Reads and parses `path` and, recursively, its imports. False if any error was reported.
  bool load(const std::string& path);
  // Reads `path` only (no parsing); for --emit=tokens. Returns the file id or 0.
  uint32_t read(const std::string& path);
  // Elaborates the chosen model; call after a successful load(). `outputs`: the tensors of the
  // model's body that become its outputs instead of the declared ones (ElaborateOptions::outputs).
  Elaborated elaborate(const std::vector<std::string>& outputs = {});

  const ast::Module& main_module() const { return *modules_.front(); }
  SourceManager& sources() { return sources_; }
  DiagnosticEngine& diags() { return diags_; }

 private:
  bool load_module(const std::string& path, SourceLoc from, std::vector<std::string>& stack);
  // The file an import names (nullopt after an error).
  std::optional<std::filesystem::path> import_target(const ast::Import& imp, const std::string& from);

  CompileOptions opts_;
  SourceManager sources_;
  DiagnosticEngine diags_;
  std::vector<std::unique_ptr<ast::Module>> modules_;  // [0] = main file
  std::vector<std::string> loaded_;                    // canonical paths, parallel to modules_
};

}  // namespace modelc
