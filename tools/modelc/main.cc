// modelc: the compiler driver, in the manner of gcc.
//
//   modelc [options] FILE.model
//
// Diagnostics go to stderr; the requested output to stdout or -o FILE (written to a
// temporary file and renamed, so a failed run never leaves a half-written file).
// Exit status: 0 success, 1 errors in the input, 2 a bad command line, 3 an internal error.
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>

#include "compiler/compile.h"
#include "compiler/frontend/parser.h"
#include "compiler/ir/printer.h"
#include "compiler/ir/verifier.h"

namespace {

bool write_output(const std::string& path, const std::string& text) {
  if (path.empty() || path == "-") {
    std::cout << text;
    std::cout.flush();
    return static_cast<bool>(std::cout);
  }
  std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) {
      fmt::print(stderr, "modelc: error: cannot write '{}'\n", path);
      return false;
    }
    out << text;
    out.flush();
    if (!out) {
      fmt::print(stderr, "modelc: error: cannot write '{}'\n", path);
      std::remove(tmp.c_str());
      return false;
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    fmt::print(stderr, "modelc: error: cannot write '{}'\n", path);
    std::remove(tmp.c_str());
    return false;
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"modelc: compiles .model files (parse, check, lower to the graph IR)", "modelc"};
  std::string file, emit, output, model, warn;
  std::vector<std::string> defines;
  bool check = false, version = false;
  int error_limit = 20;
  app.add_option("file", file, "the .model file to compile");
  app.add_option("--emit", emit,
                 "what to print: tokens (the lexer's tokens), ast (the syntax tree), ir (the "
                 "graph after inlining and shape inference, with the train section), grad (the "
                 "train step: forward, backward, clipping and the optimizer update in one graph)")
      ->check(CLI::IsMember({"tokens", "ast", "ir", "grad"}));
  app.add_option("-o", output, "write the output to FILE instead of stdout")->option_text("FILE");
  app.add_option("-D", defines, "bind a model dimension or override a top-level constant: -D B=64")
      ->option_text("NAME=VALUE")
      ->allow_extra_args(false);
  app.add_option("--model", model, "which model of the file to compile (default: its only one)");
  app.add_flag("--check", check, "check the file and print only diagnostics");
  app.add_option("-W", warn, "-Werror: treat warnings as errors")->option_text("error");
  app.add_option("--error-limit", error_limit, "stop after this many errors (0: no limit)")
      ->capture_default_str()->check(CLI::NonNegativeNumber);
  app.add_flag("--version", version, "print the version and exit");
  app.footer("With neither --emit nor -o, modelc checks the file (as --check).\n"
             "Exit status: 0 success, 1 errors in the input, 2 a bad command line, 3 an internal error.");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help
    fmt::print(stderr, "modelc: error: {} (try 'modelc --help')\n", e.what());
    return 2;
  }
  if (version) {
    fmt::print("modelc {}\n", MODELC_VERSION);
    return 0;
  }
  if (file.empty()) {
    fmt::print(stderr, "modelc: error: no input file (try 'modelc --help')\n");
    return 2;
  }
  if (!warn.empty() && warn != "error") {
    fmt::print(stderr, "modelc: error: unknown warning option '-W{}' (only -Werror exists)\n", warn);
    return 2;
  }
  if (check && !emit.empty()) {
    fmt::print(stderr, "modelc: error: --check and --emit exclude each other\n");
    return 2;
  }
  modelc::CompileOptions opts;
  opts.model = model;
  opts.warnings_as_errors = warn == "error";
  opts.error_limit = error_limit;
  for (const std::string& d : defines) {
    size_t eq = d.find('=');
    if (eq == std::string::npos || eq == 0) {
      fmt::print(stderr, "modelc: error: -D {}: expected NAME=VALUE\n", d);
      return 2;
    }
    opts.defines.emplace_back(d.substr(0, eq), d.substr(eq + 1));
  }

  modelc::Compilation c(opts);
  std::string text;
  bool ok = false;
  try {
    if (emit == "tokens") {
      uint32_t id = c.read(file);
      if (id) text = modelc::dump_tokens(id, c.sources());
      ok = id != 0;
    } else if (c.load(file)) {
      if (emit == "ast") {
        text = modelc::ast::print_module(c.main_module(), c.sources());
        ok = true;
      } else {
        modelc::Elaborated r = c.elaborate();
        ok = r.graph != nullptr;
        if (ok) {
          auto problems = modelc::verify_graph(*r.graph);
          if (!problems.empty()) {
            for (const std::string& p : problems) fmt::print(stderr, "modelc: internal error: {}\n", p);
            return 3;
          }
        }
        if (ok && emit == "ir") {
          text = modelc::print_graph(*r.graph, &c.sources());
          if (r.train) text += modelc::print_train_config(*r.train);
        }
        if (ok && emit == "grad") {
          std::unique_ptr<modelc::Graph> step = c.train_step(r);
          ok = step != nullptr;
          if (ok) text = modelc::print_graph(*step, &c.sources());
        }
      }
    }
  } catch (const modelc::InternalError& e) {
    std::cerr << c.diags().render();
    fmt::print(stderr, "modelc: {}\n(this is a bug in modelc; please report it with the input file)\n", e.what());
    return 3;
  }
  std::cerr << c.diags().render();
  ok = ok && !c.diags().has_errors();
  if (!ok) return 1;
  if (!emit.empty() || !output.empty()) {
    if (emit.empty()) {
      fmt::print(stderr, "modelc: error: -o needs --emit (writing .plan files comes with code generation)\n");
      return 2;
    }
    if (!write_output(output, text)) return 1;
  }
  return 0;
}
