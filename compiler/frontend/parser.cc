#include "compiler/frontend/parser.h"

#include <fmt/format.h>
#include <sys/stat.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "ModelLexer.h"
#include "ModelParser.h"
#include "antlr4-runtime.h"
#include "compiler/frontend/ast_builder.h"
#include "compiler/support/utf8.h"

namespace modelc {

using modelc_grammar::ModelLexer;
using modelc_grammar::ModelParser;

// --- reading files --------------------------------------------------------------------

// Position (line, col in code points) of byte offset `off` in `text`.
static SourceLoc loc_of_offset(uint32_t file, const std::string& text, size_t off) {
  SourceLoc loc{file, 1, 1};
  for (size_t i = 0; i < off; ++i) {
    unsigned char c = static_cast<unsigned char>(text[i]);
    if (c == '\n') { ++loc.line; loc.col = 1; }
    else if ((c & 0xC0) != 0x80) ++loc.col;
  }
  return loc;
}

std::optional<uint32_t> load_source(const std::string& path, SourceManager& sm,
                                    DiagnosticEngine& diags, SourceLoc from) {
  auto fail = [&](std::string msg) -> std::optional<uint32_t> {
    diags.error(from, std::move(msg));
    return std::nullopt;
  };
  struct stat st{};
  if (::stat(path.c_str(), &st) != 0)
    return fail(fmt::format("cannot open '{}': {}", path, std::strerror(errno)));
  if (S_ISDIR(st.st_mode)) return fail(fmt::format("'{}' is a directory, not a .model file", path));
  if (!S_ISREG(st.st_mode)) return fail(fmt::format("'{}' is not a regular file", path));
  if (static_cast<size_t>(st.st_size) > kMaxSourceBytes)
    return fail(fmt::format("'{}' is too large ({} bytes; a .model file may hold at most {} MiB)",
                            path, st.st_size, kMaxSourceBytes >> 20));
  std::ifstream in(path, std::ios::binary);
  if (!in) return fail(fmt::format("cannot open '{}': {}", path, std::strerror(errno)));
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) return fail(fmt::format("cannot read '{}'", path));
  uint32_t id = sm.add(path, text);
  const std::string& t = sm.text(id);
  if (t.empty()) {
    diags.error(SourceLoc{id, 0, 0}, "file is empty (expected a model, defs or an import)");
    return std::nullopt;
  }
  for (size_t i = 0; i < t.size();) {
    if (t[i] == '\0') {
      diags.error(loc_of_offset(id, t, i), "file contains a NUL byte (is it a binary file?)");
      return std::nullopt;
    }
    size_t n = utf8_sequence_length(t, i);
    if (n == 0) {
      diags.error(loc_of_offset(id, t, i),
                  fmt::format("invalid UTF-8 byte 0x{:02x}", static_cast<unsigned char>(t[i])));
      return std::nullopt;
    }
    i += n;
  }
  return id;
}

// --- syntax errors in words for people ------------------------------------------------

namespace {

std::string token_desc(antlr4::Token* t) {
  if (!t || t->getType() == antlr4::Token::EOF) return "end of file";
  std::string text = t->getText();
  switch (t->getType()) {
    case ModelLexer::IDENT: return fmt::format("name '{}'", text);
    case ModelLexer::INT: case ModelLexer::FLOAT: return fmt::format("number {}", text);
    case ModelLexer::STRING: return "a string";
    case ModelLexer::ERRCHAR: return fmt::format("character '{}'", text);
    default: return fmt::format("'{}'", text);
  }
}

// "expected ')' or ','" from a set of token types; expression starters collapse into
// "an expression" so that the list stays short.
std::string expected_desc(const antlr4::misc::IntervalSet& set, const antlr4::dfa::Vocabulary& voc) {
  std::vector<std::string> words;
  bool expr = set.contains(static_cast<size_t>(ModelLexer::INT)) && set.contains(static_cast<size_t>(ModelLexer::IDENT));
  if (expr) words.push_back("an expression");
  for (size_t type : set.toList()) {
    if (expr && (type == ModelLexer::INT || type == ModelLexer::FLOAT || type == ModelLexer::IDENT ||
                 type == ModelLexer::STRING || type == ModelLexer::CHECKPOINT))
      continue;
    std::string lit = voc.getLiteralName(type);
    if (expr && (lit == "'('" || lit == "'['" || lit == "'-'" || lit == "'+'" || lit == "'true'" ||
                 lit == "'false'"))
      continue;
    if (type == antlr4::Token::EOF) words.push_back("end of file");
    else if (type == ModelLexer::IDENT) words.push_back("a name");
    else if (type == ModelLexer::INT) words.push_back("an integer");
    else if (type == ModelLexer::STRING) words.push_back("a string");
    else if (!lit.empty()) words.push_back(lit);
  }
  if (words.empty()) return "something else";
  if (words.size() > 5) return "a statement or declaration";
  std::string s;
  for (size_t i = 0; i < words.size(); ++i) {
    if (i) s += i + 1 == words.size() ? " or " : ", ";
    s += words[i];
  }
  return s;
}

// A message for a token that cannot start or continue anything.
std::optional<std::string> bad_token_message(antlr4::Token* t) {
  if (!t) return std::nullopt;
  if (t->getType() == ModelLexer::ERRCHAR) return fmt::format("unexpected character '{}'", t->getText());
  if (t->getType() == ModelLexer::UNTERMINATED_STRING) return "unterminated string (missing '\"' before the end of the line)";
  if (t->getType() == ModelLexer::BAD_NUMBER) return fmt::format("invalid number '{}'", t->getText());
  return std::nullopt;
}

bool is_keyword(antlr4::Token* t, const antlr4::dfa::Vocabulary& voc) {
  if (!t || t->getType() == antlr4::Token::EOF) return false;
  std::string lit = voc.getLiteralName(t->getType());
  return lit.size() > 2 && std::isalpha(static_cast<unsigned char>(lit[1]));
}

class HumanErrors : public antlr4::DefaultErrorStrategy {
 protected:
  void report(antlr4::Parser* p, antlr4::Token* at, std::string msg, const antlr4::misc::IntervalSet* expected = nullptr) {
    if (auto bad = bad_token_message(at)) msg = *bad;
    else if (expected && expected->contains(static_cast<size_t>(ModelLexer::IDENT)) && is_keyword(at, p->getVocabulary()))
      msg = fmt::format("'{}' is a keyword and cannot be used as a name", at->getText());
    p->notifyErrorListeners(at, msg, nullptr);
  }
  void reportNoViableAlternative(antlr4::Parser* p, const antlr4::NoViableAltException& e) override {
    antlr4::Token* t = e.getOffendingToken();
    antlr4::misc::IntervalSet want = p->getExpectedTokens();
    report(p, t, fmt::format("expected {} but found {}", expected_desc(want, p->getVocabulary()), token_desc(t)), &want);
  }
  void reportInputMismatch(antlr4::Parser* p, const antlr4::InputMismatchException& e) override {
    antlr4::Token* t = e.getOffendingToken();
    antlr4::misc::IntervalSet want = e.getExpectedTokens();
    report(p, t, fmt::format("expected {} but found {}", expected_desc(want, p->getVocabulary()), token_desc(t)), &want);
  }
  void reportFailedPredicate(antlr4::Parser* p, const antlr4::FailedPredicateException& e) override {
    report(p, e.getOffendingToken(), fmt::format("unexpected {}", token_desc(e.getOffendingToken())));
  }
  void reportUnwantedToken(antlr4::Parser* p) override {
    if (inErrorRecoveryMode(p)) return;
    beginErrorCondition(p);
    antlr4::Token* t = p->getCurrentToken();
    antlr4::misc::IntervalSet want = getExpectedTokens(p);
    report(p, t, fmt::format("unexpected {}; expected {}", token_desc(t), expected_desc(want, p->getVocabulary())), &want);
  }
  void reportMissingToken(antlr4::Parser* p) override {
    if (inErrorRecoveryMode(p)) return;
    beginErrorCondition(p);
    antlr4::Token* t = p->getCurrentToken();
    antlr4::misc::IntervalSet want = getExpectedTokens(p);
    report(p, t, fmt::format("missing {} before {}", expected_desc(want, p->getVocabulary()), token_desc(t)), &want);
  }
};

struct ParseAbort {};

// Turns ANTLR's callbacks into diagnostics: one error per line (the rest of a broken line
// is usually noise), and parsing stops at the error limit.
class DiagListener : public antlr4::BaseErrorListener {
 public:
  DiagListener(uint32_t file, DiagnosticEngine& d) : file_(file), diags_(d) {}
  void syntaxError(antlr4::Recognizer*, antlr4::Token*, size_t line, size_t col,
                   const std::string& msg, std::exception_ptr) override {
    if (line == last_line_) return;
    last_line_ = line;
    diags_.error(SourceLoc{file_, static_cast<uint32_t>(line), static_cast<uint32_t>(col + 1)}, msg);
    if (diags_.at_error_limit()) throw ParseAbort{};
  }

 private:
  uint32_t file_;
  DiagnosticEngine& diags_;
  size_t last_line_ = 0;
};

SourceLoc token_loc(uint32_t file, const antlr4::Token* t) {
  return SourceLoc{file, static_cast<uint32_t>(t->getLine()),
                   static_cast<uint32_t>(t->getCharPositionInLine() + 1)};
}

// The parser recurses once per bracket, prefix operator and '**'; refuse input nested
// deeper than kMaxNesting before parsing, so that a hostile file cannot overflow the stack.
// A '+' or '-' is a prefix operator unless an operand precedes it; statement boundaries
// ('=', ',', ';', keywords, '..') end the chains of prefix operators and '**' at their level.
bool check_nesting(uint32_t file, antlr4::CommonTokenStream& tokens, const antlr4::dfa::Vocabulary& voc,
                   DiagnosticEngine& diags) {
  enum Class : unsigned char { Other, Open, Close, Sign, Power, Boundary, Operand };
  std::vector<Class> cls(voc.getMaxTokenType() + 1, Other);
  for (size_t type = 1; type < cls.size(); ++type) {
    std::string lit = voc.getLiteralName(type);
    if (lit == "'('" || lit == "'['" || lit == "'{'") cls[type] = Open;
    else if (lit == "')'" || lit == "']'" || lit == "'}'") cls[type] = Close;
    else if (lit == "'-'" || lit == "'+'") cls[type] = Sign;
    else if (lit == "'**'") cls[type] = Power;
    else if (lit == "'='" || lit == "','" || lit == "';'" || lit == "'..'" || lit == "'let'" ||
             lit == "'param'" || lit == "'input'" || lit == "'output'" || lit == "'return'" || lit == "'for'" ||
             lit == "'if'" || lit == "'else'")
      cls[type] = Boundary;
    else if (lit == "'true'" || lit == "'false'") cls[type] = Operand;
  }
  for (size_t type : {ModelLexer::IDENT, ModelLexer::INT, ModelLexer::FLOAT, ModelLexer::STRING})
    cls[type] = Operand;
  std::vector<int> chains(1, 0);  // per open bracket level: prefix operators and '**'
  std::vector<antlr4::Token*> opened;  // the open brackets, innermost last
  int depth = 0;                  // brackets + chains on all open levels
  bool prev_operand = false;
  // Brackets are matched too, only to explain a file that ends inside a block (the parser
  // would say "unexpected end of file"); any other bracket error is the parser's to word.
  bool brackets_match = true;
  auto closer = [](const std::string& open) { return open == "(" ? ")" : open == "[" ? "]" : "}"; };
  for (antlr4::Token* t : tokens.getTokens()) {
    if (t->getType() == ModelLexer::ERRCHAR || t->getType() == ModelLexer::UNTERMINATED_STRING ||
        t->getType() == ModelLexer::BAD_NUMBER)
      brackets_match = false;
    if (t->getType() == antlr4::Token::EOF) {
      if (!opened.empty() && brackets_match) {
        antlr4::Token* o = opened.back();
        diags.error(token_loc(file, t), fmt::format("missing '{}' at the end of the file", closer(o->getText())));
        diags.note(token_loc(file, o), fmt::format("to close the '{}' opened here", o->getText()));
        return false;
      }
      continue;
    }
    Class c = t->getType() < cls.size() ? cls[t->getType()] : Other;
    switch (c) {
      case Open: chains.push_back(0); opened.push_back(t); ++depth; break;
      case Close:
        if (opened.empty() || closer(opened.back()->getText()) != t->getText()) brackets_match = false;
        if (chains.size() > 1) { depth -= 1 + chains.back(); chains.pop_back(); opened.pop_back(); }
        break;
      case Sign:
        if (!prev_operand) { ++chains.back(); ++depth; }
        break;
      case Power: ++chains.back(); ++depth; break;
      case Boundary: depth -= chains.back(); chains.back() = 0; break;
      default: break;
    }
    if (depth > ast::kMaxNesting) {
      diags.error(token_loc(file, t),
                  fmt::format("expression or block nested too deeply (the limit is {} levels)", ast::kMaxNesting));
      return false;
    }
    prev_operand = c == Operand || c == Close;
  }
  return true;
}

// A file's whole token stream (every character lexes: ERRCHAR stands for a stray one, and
// the parser reports it).
struct Lexed {
  antlr4::ANTLRInputStream input;
  ModelLexer lexer{&input};
  antlr4::CommonTokenStream tokens{&lexer};

  // nullptr if ANTLR cannot decode the text.
  static std::unique_ptr<Lexed> of(const std::string& text) {
    auto l = std::make_unique<Lexed>();
    try {
      l->input.load(text);
    } catch (const std::exception&) {
      return nullptr;
    }
    l->lexer.setInputStream(&l->input);
    l->lexer.removeErrorListeners();
    l->tokens.fill();
    return l;
  }
};

}  // namespace

std::unique_ptr<ast::Module> parse_module(uint32_t file, const SourceManager& sm, DiagnosticEngine& diags) {
  auto lexed = Lexed::of(sm.text(file));
  if (!lexed) {  // load_source checks UTF-8 first; this is a second line of defence
    diags.error(SourceLoc{file, 0, 0}, "file is not valid UTF-8");
    return nullptr;
  }
  antlr4::CommonTokenStream& tokens = lexed->tokens;
  if (!check_nesting(file, tokens, lexed->lexer.getVocabulary(), diags)) return nullptr;

  ModelParser parser(&tokens);
  parser.removeErrorListeners();
  DiagListener listener(file, diags);
  parser.addErrorListener(&listener);
  parser.setErrorHandler(std::make_shared<HumanErrors>());
  parser.getInterpreter<antlr4::atn::ParserATNSimulator>()->setPredictionMode(antlr4::atn::PredictionMode::SLL);
  int before = diags.num_errors();
  ModelParser::FileContext* tree = nullptr;
  try {
    tree = parser.file();
  } catch (const ParseAbort&) {
    return nullptr;
  }
  if (diags.num_errors() > before) return nullptr;
  return build_ast(file, tree, diags);
}

std::string dump_tokens(uint32_t file, const SourceManager& sm) {
  auto lexed = Lexed::of(sm.text(file));
  if (!lexed) return "";  // not valid UTF-8: load_source has already said so
  const antlr4::dfa::Vocabulary& voc = lexed->lexer.getVocabulary();
  std::string out;
  for (antlr4::Token* t : lexed->tokens.getTokens()) {
    if (t->getChannel() != antlr4::Token::DEFAULT_CHANNEL) continue;
    std::string kind = t->getType() == antlr4::Token::EOF ? "EOF" : voc.getSymbolicName(t->getType());
    if (kind.empty()) kind = voc.getLiteralName(t->getType());
    std::string shown = t->getType() == antlr4::Token::EOF ? "" : " " + t->getText();
    out += fmt::format("{}:{}: {}{}\n", t->getLine(), t->getCharPositionInLine() + 1, kind, shown);
  }
  return out;
}

}  // namespace modelc
