#include "compiler/support/diagnostics.h"

#include "compiler/support/utf8.h"

#include <fmt/format.h>

namespace modelc {

SourceManager::SourceManager() { files_.emplace_back(); }

uint32_t SourceManager::add(std::string name, std::string text) {
  File f{std::move(name), std::move(text), {0}};
  for (size_t i = 0; i < f.text.size(); ++i)
    if (f.text[i] == '\n') f.line_starts.push_back(i + 1);
  files_.push_back(std::move(f));
  return static_cast<uint32_t>(files_.size() - 1);
}

const std::string& SourceManager::name(uint32_t file) const { return files_.at(file).name; }
const std::string& SourceManager::text(uint32_t file) const { return files_.at(file).text; }

std::string_view SourceManager::line(uint32_t file, uint32_t line) const {
  const File& f = files_.at(file);
  if (line == 0 || line > f.line_starts.size()) return {};
  size_t begin = f.line_starts[line - 1];
  size_t end = line < f.line_starts.size() ? f.line_starts[line] - 1 : f.text.size();
  if (end > begin && f.text[end - 1] == '\r') --end;
  return std::string_view(f.text).substr(begin, end - begin);
}

std::string SourceManager::describe(SourceLoc loc) const {
  if (!loc.valid()) return "modelc";
  if (loc.line == 0) return name(loc.file);
  return fmt::format("{}:{}:{}", name(loc.file), loc.line, loc.col);
}

bool DiagnosticEngine::duplicate(Severity s, SourceLoc loc, const std::string& message) {
  last_dropped_ = !seen_.insert(fmt::format("{}:{}:{}:{}:{}", static_cast<int>(s), loc.file, loc.line, loc.col, message)).second;
  return last_dropped_;
}

Diagnostic& DiagnosticEngine::push(Severity sev, SourceLoc loc, std::string message) {
  diags_.push_back({sev, loc, std::move(message), {}});
  // The calls it happened in, innermost first; a deep chain keeps its three innermost
  // calls and the outermost one.
  auto& ctx = diags_.back().context;
  for (size_t k = 0; k < context_.size(); ++k) {
    size_t from_inside = context_.size() - 1 - k;
    if (context_.size() > 5 && k == 3) {
      ctx.emplace_back(SourceLoc{}, fmt::format("... {} more calls ...", context_.size() - 4));
      k = context_.size() - 2;
      continue;
    }
    ctx.push_back(context_[from_inside]);
  }
  return diags_.back();
}

Diagnostic& DiagnosticEngine::error(SourceLoc loc, std::string message) {
  if (duplicate(Severity::Error, loc, message)) return dropped_ = {};
  if (dropping_) {
    last_dropped_ = true;
    return dropped_ = {};
  }
  ++num_errors_;
  Diagnostic& d = push(Severity::Error, loc, std::move(message));
  if (at_error_limit()) {
    // Whoever reported this stops at the limit; say so once, after the last error.
    dropping_ = true;
    diags_.push_back({Severity::Error, {},
                      fmt::format("error limit ({}) reached; stopping here (--error-limit 0 shows all)", error_limit_), {}});
    last_dropped_ = false;
    return diags_[diags_.size() - 2];
  }
  return d;
}

Diagnostic& DiagnosticEngine::warning(SourceLoc loc, std::string message) {
  if (werror_) {
    Diagnostic& d = error(loc, std::move(message));
    if (&d != &dropped_) d.message += " [-Werror]";
    return d;
  }
  if (duplicate(Severity::Warning, loc, message)) return dropped_ = {};
  if (dropping_) {
    last_dropped_ = true;
    return dropped_ = {};
  }
  ++num_warnings_;
  return push(Severity::Warning, loc, std::move(message));
}

void DiagnosticEngine::note(SourceLoc loc, std::string message) {
  if (last_dropped_ || diags_.empty()) return;
  // After the limit line, notes still belong to the error before it.
  Diagnostic& d = dropping_ && diags_.size() >= 2 ? diags_[diags_.size() - 2] : diags_.back();
  d.notes.emplace_back(loc, std::move(message));
}

// Writes the source line and a caret under column `col` (code points; tabs kept so the
// caret lines up in a terminal).
static void render_snippet(std::string& out, const SourceManager& sm, SourceLoc loc) {
  if (!loc.valid() || loc.line == 0) return;
  std::string_view text = sm.line(loc.file, loc.line);
  if (text.size() > 400) return;  // a huge line would swamp the message
  out += "    ";
  // Bytes that are not valid UTF-8 show as '?', so that the message itself stays valid text.
  for (size_t i = 0; i < text.size();) {
    unsigned char c = static_cast<unsigned char>(text[i]);
    size_t n = utf8_sequence_length(text, i);
    if (n == 0 || (c < 0x20 && c != '\t') || c == 0x7F) {
      out += '?';
      ++i;
      continue;
    }
    out.append(text.substr(i, n));
    i += n;
  }
  out += "\n    ";
  uint32_t cp = 1;
  for (size_t i = 0; i < text.size() && cp < loc.col; ++i) {
    unsigned char c = static_cast<unsigned char>(text[i]);
    if ((c & 0xC0) == 0x80) continue;  // continuation byte of a code point
    out += (c == '\t') ? '\t' : ' ';
    ++cp;
  }
  out += "^\n";
}

std::string DiagnosticEngine::render(const Diagnostic& d) const {
  static const char* const kWord[] = {"note", "warning", "error"};
  std::string out = fmt::format("{}: {}: {}\n", sources_.describe(d.loc),
                                kWord[static_cast<int>(d.severity)], d.message);
  render_snippet(out, sources_, d.loc);
  for (const auto* list : {&d.notes, &d.context}) {
    for (const auto& [loc, msg] : *list) {
      if (!loc.valid()) {
        out += fmt::format("note: {}\n", msg);
        continue;
      }
      out += fmt::format("{}: note: {}\n", sources_.describe(loc), msg);
      render_snippet(out, sources_, loc);
    }
  }
  return out;
}

std::string DiagnosticEngine::render() const {
  std::string out;
  for (const Diagnostic& d : diags_) out += render(d);
  return out;
}

}  // namespace modelc
