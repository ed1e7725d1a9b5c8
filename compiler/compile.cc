#include "compiler/compile.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <optional>

#include "compiler/frontend/parser.h"

namespace modelc {

namespace fs = std::filesystem;

Compilation::Compilation(CompileOptions opts) : opts_(std::move(opts)), diags_(sources_) {
  diags_.set_error_limit(opts_.error_limit);
  diags_.set_warnings_as_errors(opts_.warnings_as_errors);
}

uint32_t Compilation::read(const std::string& path) {
  auto id = load_source(path, sources_, diags_);
  return id ? *id : 0;
}

bool Compilation::load(const std::string& path) {
  std::vector<std::string> stack;
  return load_module(path, {}, stack) && !diags_.has_errors();
}

namespace {

fs::path stdlib_dir() {
  if (const char* env = std::getenv("MODELC_STDLIB"); env && *env) return env;
  return MODELC_STDLIB_DIR;
}

}  // namespace

// A path relative to the importing file, or a bare name ("nn": letters, digits and '_')
// of a module of the standard library (lib/ in the source tree; MODELC_STDLIB overrides).
std::optional<fs::path> Compilation::import_target(const ast::Import& imp, const std::string& from) {
  const fs::path p(imp.path);
  if (p.is_absolute()) return p;
  const bool bare = !imp.path.empty() && !std::isdigit(static_cast<unsigned char>(imp.path[0])) &&
                    std::all_of(imp.path.begin(), imp.path.end(), [](char c) {
                      return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
                    });
  if (bare) {
    const fs::path lib = stdlib_dir() / (imp.path + ".model");
    std::error_code ec;
    if (fs::is_regular_file(lib, ec)) return lib;
    std::string have;
    for (const auto& e : fs::directory_iterator(stdlib_dir(), ec))
      if (e.path().extension() == ".model") have += (have.empty() ? "" : ", ") + e.path().stem().string();
    diags_.error(imp.loc, fmt::format("import \"{}\": the standard library has no module of that name (it has: {}); a "
                                      "file of your own is imported by its path, with its extension: import \"{}.model\"",
                                      imp.path, have.empty() ? "none, at " + stdlib_dir().string() : have, imp.path));
    return std::nullopt;
  }
  return fs::path(from).parent_path() / p;
}

bool Compilation::load_module(const std::string& path, SourceLoc from, std::vector<std::string>& stack) {
  std::error_code ec;
  std::string canon = fs::weakly_canonical(path, ec).string();
  if (ec) canon = path;
  if (std::find(stack.begin(), stack.end(), canon) != stack.end()) {
    std::string cycle;
    auto it = std::find(stack.begin(), stack.end(), canon);
    for (; it != stack.end(); ++it) cycle += fs::path(*it).filename().string() + " -> ";
    diags_.error(from, fmt::format("import cycle: {}{}", cycle, fs::path(canon).filename().string()));
    return false;
  }
  if (std::find(loaded_.begin(), loaded_.end(), canon) != loaded_.end()) return true;  // imported before
  if (stack.size() >= static_cast<size_t>(kMaxImportDepth)) {
    diags_.error(from, fmt::format("imports nested too deeply (the limit is {})", kMaxImportDepth));
    return false;
  }
  auto id = load_source(path, sources_, diags_, from);
  if (!id) return false;
  if (from.valid()) diags_.push_context(from, "in the file imported here");
  auto module = parse_module(*id, sources_, diags_);
  if (from.valid()) diags_.pop_context();
  if (!module) return false;
  const ast::Module* m = module.get();
  modules_.push_back(std::move(module));
  loaded_.push_back(canon);
  stack.push_back(canon);
  bool ok = true;
  for (const ast::Import& imp : m->imports) {
    std::optional<fs::path> target = import_target(imp, path);
    if (!target) {
      ok = false;
      continue;
    }
    ok &= load_module(target->lexically_normal().string(), imp.loc, stack);
    if (diags_.at_error_limit()) break;
  }
  stack.pop_back();
  return ok;
}

Elaborated Compilation::elaborate(const std::vector<std::string>& outputs) {
  std::vector<const ast::Module*> mods;
  for (const auto& m : modules_) mods.push_back(m.get());
  ElaborateOptions eo{opts_.model, opts_.defines, outputs};
  return modelc::elaborate(mods, eo, sources_, diags_);
}

}  // namespace modelc
