// Source files, locations and diagnostics.
//
// Every user-facing error of the compiler goes through a DiagnosticEngine and renders as
//   file:line:col: error: message
//       <the source line>
//       <caret>
//   file:line:col: note: ...
// Internal errors (a bug in modelc) are not diagnostics: they throw InternalError.
#pragma once

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

namespace modelc {

// A position in a source file. line and col are 1-based; col counts code points.
// file == 0 means "no location" (command line, built-in).
struct SourceLoc {
  uint32_t file = 0;
  uint32_t line = 0;
  uint32_t col = 0;
  bool valid() const { return file != 0; }
  friend bool operator==(const SourceLoc&, const SourceLoc&) = default;
};

class SourceManager {
 public:
  SourceManager();
  // Adds a file's text under the name it is shown with; returns its id (>= 1).
  uint32_t add(std::string name, std::string text);
  const std::string& name(uint32_t file) const;
  const std::string& text(uint32_t file) const;
  // The text of one line (1-based), without its line break.
  std::string_view line(uint32_t file, uint32_t line) const;
  size_t num_files() const { return files_.size() - 1; }
  // "file:line:col" (or "file" when loc has no line).
  std::string describe(SourceLoc loc) const;

 private:
  struct File {
    std::string name, text;
    std::vector<size_t> line_starts;
  };
  std::vector<File> files_;
};

enum class Severity { Note, Warning, Error };

struct Diagnostic {
  Severity severity = Severity::Error;
  SourceLoc loc;
  std::string message;
  std::vector<std::pair<SourceLoc, std::string>> notes;
  std::vector<std::pair<SourceLoc, std::string>> context;  // the calls it happened in, innermost first
};

class DiagnosticEngine {
 public:
  explicit DiagnosticEngine(const SourceManager& sources) : sources_(sources) {}

  // Reports a diagnostic; returns it so that notes can be attached. A diagnostic identical
  // to an earlier one (same place, same words: an error inside an unrolled loop or a def
  // called twice) is dropped, with its notes.
  Diagnostic& error(SourceLoc loc, std::string message);
  Diagnostic& warning(SourceLoc loc, std::string message);
  void note(SourceLoc loc, std::string message);  // attaches to the last diagnostic

  bool has_errors() const { return num_errors_ > 0; }
  int num_errors() const { return num_errors_; }
  int num_warnings() const { return num_warnings_; }
  // After this many errors further errors are dropped and one line says so.
  void set_error_limit(int limit) { error_limit_ = limit; }
  bool at_error_limit() const { return error_limit_ > 0 && num_errors_ >= error_limit_; }
  void set_warnings_as_errors(bool on) { werror_ = on; }

  // While a context is pushed, every error and warning gets a note for it (innermost
  // first): "in the call of 'block' here", so an error inside a def says which call made it.
  void push_context(SourceLoc loc, std::string message) { context_.emplace_back(loc, std::move(message)); }
  void pop_context() { context_.pop_back(); }

  const std::vector<Diagnostic>& diagnostics() const { return diags_; }
  // Renders every diagnostic, with source lines and carets.
  std::string render() const;
  std::string render(const Diagnostic& d) const;

 private:
  const SourceManager& sources_;
  std::vector<Diagnostic> diags_;
  Diagnostic dropped_;
  int num_errors_ = 0, num_warnings_ = 0, error_limit_ = 20;
  bool werror_ = false, dropping_ = false, last_dropped_ = false;
  std::unordered_set<std::string> seen_;
  std::vector<std::pair<SourceLoc, std::string>> context_;
  Diagnostic& push(Severity s, SourceLoc loc, std::string message);
  bool duplicate(Severity s, SourceLoc loc, const std::string& message);
};

// A user-level failure outside any source file (a file that cannot be read, a bad flag).
class UserError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A user-level failure at a place of a source file, found after the front end (autodiff
// meeting an op without a gradient): the pass that catches it reports it at `loc`.
class SourceError : public UserError {
 public:
  SourceError(SourceLoc at, const std::string& message) : UserError(message), loc(at) {}
  SourceLoc loc;
};

// A broken invariant inside modelc; never the user's fault.
class InternalError : public std::logic_error {
 public:
  using std::logic_error::logic_error;
};

#define MODELC_CHECK(cond, msg)                                                       \
  do {                                                                                \
    if (!(cond))                                                                      \
      throw ::modelc::InternalError(std::string(__FILE__) + ":" +                     \
                                    std::to_string(__LINE__) + ": internal error: " + \
                                    (msg));                                           \
  } while (0)

}  // namespace modelc
