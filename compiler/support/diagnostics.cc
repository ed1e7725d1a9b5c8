#include "compiler/support/diagnostics.h"

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

Diagnostic& DiagnosticEngine::error(SourceLoc loc, std::string message) {
  if (duplicate(Severity::Error, loc, message)) return dropped_ = {};
  if (at_error_limit()) {
    last_dropped_ = true;
    if (!dropping_) {
      dropping_ = true;
      diags_.push_back({Severity::Error, {},
                        fmt::format("too many errors ({}); stopping here", error_limit_), {}});
    }
    dropped_ = {};
    return dropped_;
  }
  ++num_errors_;
  diags_.push_back({Severity::Error, loc, std::move(message), {}});
  return diags_.back();
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
  diags_.push_back({Severity::Warning, loc, std::move(message), {}});
  return diags_.back();
}

void DiagnosticEngine::note(SourceLoc loc, std::string message) {
  if (last_dropped_ || diags_.empty()) return;
  diags_.back().notes.emplace_back(loc, std::move(message));
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
    size_t n = c < 0x80 ? 1 : (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 0;
    bool ok = n > 0 && i + n <= text.size();
    for (size_t k = 1; ok && k < n; ++k) ok = (static_cast<unsigned char>(text[i + k]) & 0xC0) == 0x80;
    if (!ok) {
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
  for (const auto& [loc, msg] : d.notes) {
    out += fmt::format("{}: note: {}\n", sources_.describe(loc), msg);
    render_snippet(out, sources_, loc);
  }
  return out;
}

std::string DiagnosticEngine::render() const {
  std::string out;
  for (const Diagnostic& d : diags_) out += render(d);
  return out;
}

}  // namespace modelc
