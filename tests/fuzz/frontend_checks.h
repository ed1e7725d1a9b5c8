// What the front-end fuzzer checks for one input, shared by fuzz_frontend (libFuzzer) and
// fuzz_replay (the corpus and the saved crashers, run by ctest in every build).
//
// The input's bytes are written to `path` (the loader reads files), then, as `modelc` does:
// load (reading, parsing, imports) and, when that succeeds, the AST printer; elaborate with
// default options and, when a graph comes out, the verifier and the IR printer (with the
// train section); the rendered diagnostics; and the token dump of the file. Returns the
// problems found: each is a bug in modelc (a verifier message, or a broken contract of the
// compile API). An exception that escapes (InternalError or any other) is a bug as well;
// the caller decides whether to let it abort or to catch it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

#include "compiler/compile.h"
#include "compiler/frontend/ast.h"
#include "compiler/frontend/parser.h"
#include "compiler/ir/train_config.h"
#include "compiler/ir/printer.h"
#include "compiler/ir/verifier.h"

namespace modelc::fuzz {

inline std::vector<std::string> check_frontend(const uint8_t* data, size_t size, const std::string& path) {
  {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  }
  std::vector<std::string> problems;
  Compilation c{CompileOptions{}};
  bool loaded = c.load(path);
  if (loaded) {
    std::string ast = ast::print_module(c.main_module(), c.sources());
    Elaborated r = c.elaborate();
    if (r.graph) {
      for (std::string& p : verify_graph(*r.graph)) problems.push_back("verifier: " + p);
      std::string ir = print_graph(*r.graph, &c.sources());
      if (r.train) ir += print_train_config(*r.train);
    } else if (!c.diags().has_errors()) {
      problems.push_back("elaborate() gave no graph and reported no error");
    }
  } else if (!c.diags().has_errors()) {
    problems.push_back("load() failed and reported no error");
  }
  // --emit=tokens: its own Compilation, as modelc does it (dump_tokens only takes a file that
  // read() accepted: valid UTF-8, no NUL).
  {
    Compilation t{CompileOptions{}};
    if (uint32_t id = t.read(path)) std::string tokens = dump_tokens(id, t.sources());
  }
  std::string rendered = c.diags().render();
  if (c.diags().has_errors() && rendered.find("error") == std::string::npos)
    problems.push_back("errors were reported but render() shows none");
  return problems;
}

}  // namespace modelc::fuzz
