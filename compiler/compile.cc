#include "compiler/compile.h"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>

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
    fs::path target = fs::path(imp.path).is_absolute() ? fs::path(imp.path) : fs::path(path).parent_path() / imp.path;
    ok &= load_module(target.lexically_normal().string(), imp.loc, stack);
    if (diags_.at_error_limit()) break;
  }
  stack.pop_back();
  return ok;
}

Elaborated Compilation::elaborate() {
  std::vector<const ast::Module*> mods;
  for (const auto& m : modules_) mods.push_back(m.get());
  ElaborateOptions eo{opts_.model, opts_.defines};
  return modelc::elaborate(mods, eo, sources_, diags_);
}

}  // namespace modelc
