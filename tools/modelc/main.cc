// modelc: the compiler driver, in the manner of gcc.
//
//   modelc [options] FILE.model                  check the file
//   modelc [options] FILE.model -o FILE.plan     compile it into a plan (runtime/session/plan.h)
//   modelc --emit=WHAT [-o FILE] FILE.model      print a stage: tokens, ast, ir, grad, fusion, llvm, ptx
//   modelc --emit=memory [-D B=64] [--memory 80GiB] FILE.model   the predicted peak memory
//
// Diagnostics go to stderr; the requested output to stdout or -o FILE (written to a
// temporary file and renamed, so a failed run never leaves a half-written file).
// Exit status: 0 success, 1 errors in the input, 2 a bad command line, 3 an internal error.
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <csignal>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <limits>
#include <map>
#include <memory>
#include <optional>

#include "compiler/codegen/codelets.h"
#include "compiler/codegen/object.h"
#include "compiler/compile.h"
#include "compiler/pipeline.h"
#include "compiler/frontend/parser.h"
#include "compiler/ir/op_doc.h"
#include "compiler/ir/printer.h"
#include "compiler/ir/verifier.h"
#include "runtime/base/error.h"
#include "runtime/session/plan.h"
#include "runtime/session/temp_files.h"
#include "tools/cli_hints.h"

namespace {

// The output to stdout, or to `path` whole (runtime/session/temp_files.h): a failed write
// says why and leaves no file behind.
bool write_output(const std::string& path, const std::string& text) {
  if (path.empty() || path == "-") {
    errno = 0;
    std::cout << text;
    std::cout.flush();
    if (std::cout) return true;
    fmt::print(stderr, "modelc: error: cannot write the output to stdout: {}\n",
               errno ? std::strerror(errno) : "the stream failed");
    return false;
  }
  try {
    modelc::rt::write_file_atomically(path, text);
  } catch (const modelc::rt::RuntimeError& e) {
    fmt::print(stderr, "modelc: error: {}\n", e.what());
    return false;
  }
  return true;
}

// --emit=memory: a -D that names a dim the model leaves free (declared without a default,
// such as the batch B) is not compiled in but binds the symbol where the plan is sized, so
// the report can also search the largest batch that fits. Moves those defines from `opts`
// into the returned bindings. Parse errors are left for the real compilation to report.
std::map<std::string, int64_t> take_free_dim_defines(modelc::CompileOptions& opts, const std::string& file) {
  std::map<std::string, int64_t> bindings;
  modelc::CompileOptions quiet = opts;
  quiet.defines.clear();
  modelc::Compilation probe(quiet);
  if (!probe.load(file)) return bindings;
  const modelc::ast::Model* model = nullptr;
  for (const modelc::ast::Model& m : probe.main_module().models)
    if (opts.model.empty() || m.name == opts.model) model = &m;
  if (!model) return bindings;
  std::vector<std::pair<std::string, std::string>> rest;
  for (const auto& [name, value] : opts.defines) {
    bool free_dim = false;
    for (const modelc::ast::DimParam& d : model->dims) free_dim |= d.name == name && !d.default_value;
    size_t used = 0;
    int64_t v = 0;
    try {
      v = std::stoll(value, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (free_dim && used == value.size() && v > 0) bindings[name] = v;
    else rest.emplace_back(name, value);
  }
  opts.defines = rest;
  return bindings;
}

// The command line, as parsed.
struct Args {
  std::string file, emit, output, model, warn, target = "sm_80";
  CLI::Option* target_opt = nullptr;
  std::vector<std::string> defines, fflags, print_after, outputs;
  bool inference = false;
  bool check = false, version = false, list_ops = false, verify_each = false, ignore_annotations = false;
  int error_limit = 20;
  std::string memory_str, budget_str, recompute = "greedy", precision;
  uint32_t streams = 1;
  // Derived by check_args.
  bool fusion = true;
  std::optional<int64_t> memory, mem_budget;
  modelc::CompileOptions opts;
};

// What each --emit value prints: the state after this pass of the pipeline.
const std::map<std::string, std::string>& emit_passes() {
  static const std::map<std::string, std::string> m = {
      {"ast", "parse"},      {"ir", "elaborate"}, {"grad", "train-step"}, {"fusion", "fusion"},
      {"memory", "memory-plan"}, {"llvm", "codegen"}, {"ptx", "codegen"},   {"plan", "codegen"}};
  return m;
}

int pass_index(std::string_view name) {
  const auto& passes = modelc::pipeline_passes();
  for (size_t k = 0; k < passes.size(); ++k)
    if (passes[k].name == name) return static_cast<int>(k);
  return -1;
}

std::string pass_list() {
  std::string names;
  for (const modelc::PassInfo& p : modelc::pipeline_passes()) names += (names.empty() ? "" : ", ") + std::string(p.name);
  return names;
}

// The options (declarative: one statement per option, so longer than the rest).
void add_options(CLI::App& app, Args& a) {
  app.add_option("file", a.file, "the .model file to compile");
  app.add_option("--emit", a.emit,
                 "what to produce: tokens (the lexer's tokens), ast (the syntax tree), ir (the "
                 "graph after inlining and shape inference, with the train section), grad (the "
                 "train step: forward, backward, clipping and the optimizer update in one graph), "
                 "fusion (the kernels the train step becomes: each fused group with its nodes, "
                 "inputs, outputs and source lines, recomputed nodes included; the forward graph without a train section), "
                 "llvm (the kernels' LLVM IR), ptx (the kernels' PTX for --target), plan (the "
                 "compiled program for modelrun; needs -o, and is what -o alone writes), memory (the "
                 "train step's predicted peak memory: its breakdown, the largest buffers and their "
                 "source lines; -D binds free dims such as the batch B, default the train section's). "
                 "Each is the state after a pass of the pipeline (docs/architecture.md)")
      ->check(CLI::IsMember({"tokens", "ast", "ir", "grad", "fusion", "llvm", "ptx", "plan", "memory"}));
  app.add_option("--print-after", a.print_after,
                 "print the state after this pass to stderr (repeatable): " + pass_list())
      ->option_text("PASS")
      ->allow_extra_args(false);
  app.add_flag("--verify-each", a.verify_each, "verify the graphs after every pass (debug builds always do)");
  app.add_option("-o", a.output, "write the output to FILE instead of stdout; without --emit, FILE is a compiled .plan")
      ->option_text("FILE");
  a.target_opt =
      app.add_option("--target", a.target, "the GPU architecture of the PTX: --emit=ptx, and with a plan, PTX in the plan")
          ->capture_default_str()
          ->check(CLI::IsMember({"sm_80", "sm_90"}));
  app.add_option("-D", a.defines, "bind a model dimension or override a top-level constant: -D B=64")
      ->option_text("NAME=VALUE")
      ->allow_extra_args(false);
  app.add_option("--mem-budget", a.budget_str,
                 "the peak memory the train step must fit in (8GiB, 512MiB, bytes; overrides the train "
                 "section's mem_budget): activations are recomputed in the backward pass until it fits")
      ->option_text("BYTES");
  app.add_option("--recompute", a.recompute,
                 "what to recompute in the backward pass: greedy (with --mem-budget, fewest FLOPs per byte "
                 "freed; the default), sqrtn (Chen et al.'s sqrt(n) segments, the baseline), none (keep every "
                 "activation, ignore @checkpoint and budgets)")
      ->capture_default_str()
      ->check(CLI::IsMember({"greedy", "sqrtn", "none"}));
  app.add_flag("--ignore-annotations", a.ignore_annotations,
               "ignore @checkpoint annotations: recompute only what --mem-budget needs");
  app.add_option("--memory", a.memory_str,
                 "with --emit=memory: the device memory to fit in (80GiB, 512MiB, 1.5GB, bytes); "
                 "reports the largest batch that fits")
      ->option_text("BYTES");
  app.add_option("--model", a.model, "which model of the file to compile (default: its only one)");
  app.add_flag("--check", a.check, "check the file and print only diagnostics");
  app.add_option("-W", a.warn, "-Werror: treat warnings as errors")->option_text("error");
  app.add_option("-f", a.fflags, "-fno-fusion: one kernel per op node (no kernel fusion); -ffusion: the default")
      ->option_text("no-fusion")
      ->allow_extra_args(false);
  app.add_option("--streams", a.streams,
                 "run each function's independent work on up to N streams, ordered by events (1: one "
                 "stream, the sequential run; docs/streams.md)")
      ->option_text("N")
      ->capture_default_str()
      ->check(CLI::Range(1, 16));
  app.add_option("--precision", a.precision,
                 "train (and evaluate) in fp32, or with bf16 / fp16 matmuls and convolutions and f32 "
                 "master weights (fp16 with dynamic loss scaling); overrides the train section's "
                 "precision (docs/precision.md)")
      ->check(CLI::IsMember({"fp32", "bf16", "fp16"}));
  app.add_flag("--inference", a.inference,
               "compile the forward pass only: the eval function and the predict function (eval mode, no target "
               "input, no loss; what modelrun predict and generate run), no train step or optimizer state");
  app.add_option("--output", a.outputs,
                 "the predict function's outputs: tensors of the model's body by name (repeatable; default: its "
                 "outputs that do not read the train data's target); a plan without --inference gets a predict "
                 "function besides its train step")
      ->option_text("NAME")
      ->allow_extra_args(false);
  app.add_option("--error-limit", a.error_limit, "stop after this many errors (0: no limit)")
      ->capture_default_str();
  app.add_flag("--version", a.version, "print the version and exit");
  app.add_flag("--list-ops", a.list_ops, "print the reference of every built-in op (the Markdown of docs/ops.md) and exit");
  app.footer("With neither --emit nor -o, modelc checks the file (as --check). `modelc FILE.model -o FILE.plan`\n"
             "compiles it for this machine's CPU; `modelrun train FILE.plan` runs it (see docs/plan-format.md).\n"
             "Exit status: 0 success, 1 errors in the input, 2 a bad command line, 3 an internal error.");
}

// Checks the combination of options and derives the rest; 0 when the run may go on, else
// the exit status (the message printed).
int check_args(Args& a) {
  auto bad = [](const std::string& msg) {
    fmt::print(stderr, "modelc: error: {}\n", msg);
    return 2;
  };
  if (a.file.empty()) return bad("no input file (try 'modelc --help')");
  if (a.error_limit < 0) return bad(fmt::format("--error-limit: must be a non-negative integer (0: no limit), got {}", a.error_limit));
  if (!a.warn.empty() && a.warn != "error")
    return bad(fmt::format("unknown warning option '-W{}' (only -Werror exists)", a.warn));
  for (const std::string& f : a.fflags) {
    if (f != "fusion" && f != "no-fusion")
      return bad(fmt::format("unknown option '-f{}' (only -ffusion and -fno-fusion exist)", f));
    a.fusion = f == "fusion";
  }
  for (const std::string& p : a.print_after)
    if (!modelc::is_pass(p)) return bad(fmt::format("--print-after {}: no such pass (the passes: {})", p, pass_list()));
  if (a.check && !a.emit.empty()) return bad("--check and --emit exclude each other");
  if (a.inference && a.emit == "grad") return bad("--emit=grad prints the train step, which --inference leaves out");
  if (a.inference && !a.budget_str.empty())
    return bad("--mem-budget sizes the train step, which --inference leaves out");
  if (a.check && !a.output.empty()) return bad("--check and -o exclude each other");
  if (a.emit.empty() && !a.output.empty()) a.emit = "plan";
  if (a.emit == "plan" && (a.output.empty() || a.output == "-"))
    return bad("--emit=plan needs -o FILE.plan (a plan is a binary file, not for stdout)");
  if (!a.memory_str.empty()) {
    a.memory = modelc::parse_bytes(a.memory_str);
    if (!a.memory) return bad(fmt::format("--memory {}: expected a size such as 80GiB, 512MiB or 1.5GB", a.memory_str));
    if (a.emit != "memory") return bad("--memory needs --emit=memory");
  }
  if (!a.budget_str.empty()) {
    a.mem_budget = modelc::parse_bytes(a.budget_str);
    if (!a.mem_budget || *a.mem_budget <= 0)
      return bad(fmt::format("--mem-budget {}: expected a size such as 8GiB, 512MiB or 1.5GB", a.budget_str));
  }
  a.opts.model = a.model;
  a.opts.warnings_as_errors = a.warn == "error";
  a.opts.error_limit = a.error_limit;
  for (const std::string& d : a.defines) {
    size_t eq = d.find('=');
    if (eq == std::string::npos || eq == 0) return bad(fmt::format("-D {}: expected NAME=VALUE", d));
    a.opts.defines.emplace_back(d.substr(0, eq), d.substr(eq + 1));
  }
  return 0;
}

modelc::ProgramOptions program_options(const Args& a) {
  modelc::ProgramOptions po;
  po.fusion = a.fusion;
  po.streams = a.streams;
  if (!a.precision.empty()) po.precision = a.precision;
  po.mem_budget = a.mem_budget;
  po.recompute = a.recompute != "none";
  po.annotations = !a.ignore_annotations;
  po.recompute_algorithm = a.recompute == "sqrtn" ? modelc::RecomputeAlgorithm::SqrtN : modelc::RecomputeAlgorithm::Greedy;
  if (a.inference) po.train = false;
  if (a.inference || !a.outputs.empty()) po.predict = a.outputs;
  // A plan holds PTX when --target asks for it: PTX needs the CUDA toolkit (libdevice for
  // the math functions), which a machine that trains on its CPU may lack.
  if (a.emit == "ptx" || (a.emit == "plan" && a.target_opt->count() > 0)) po.ptx_target = a.target;
  return po;
}

// Runs the pipeline as far as --emit (or --print-after) needs and puts what --emit prints
// into `text`. False when diagnostics were reported. Throws what the passes throw.
bool compile(modelc::CompileState& s, const Args& a, std::string& text, std::string& shared_object) {
  if (a.emit == "tokens") {
    uint32_t id = s.c.read(a.file);
    if (id) text = modelc::dump_tokens(id, s.c.sources());
    return id != 0;
  }
  auto it = emit_passes().find(a.emit);
  // --emit's pass; the pipeline runs on to the last pass --print-after names.
  const std::string_view emit_pass = it != emit_passes().end() ? std::string_view(it->second) : "elaborate";  // --check
  modelc::PipelineHooks hooks;
  hooks.until = emit_pass;
  for (const std::string& p : a.print_after)
    if (pass_index(p) > pass_index(hooks.until)) hooks.until = modelc::pipeline_passes()[static_cast<size_t>(pass_index(p))].name;
  hooks.print_after = a.print_after;
  // The textual stages are captured when their pass has run: later passes change the graphs.
  const bool textual = !a.emit.empty() && a.emit != "memory" && a.emit != "ptx" && a.emit != "llvm" && a.emit != "plan";
  if (textual) hooks.print_after.emplace_back(emit_pass);
  hooks.verify_each = a.verify_each;
  hooks.print = [&](std::string_view pass, const std::string& state) {
    if (textual && pass == emit_pass) text = state;
    if (std::find(a.print_after.begin(), a.print_after.end(), pass) != a.print_after.end())
      fmt::print(stderr, "; --- after pass {} ---\n{}", pass, state);
  };
  std::vector<modelc::BufferOrigin> origins;
  if (a.emit == "memory") {
    s.options.origins = &origins;
    s.options.code = false;  // the memory plan needs buffers and instructions, not code
  }
  if (a.emit == "plan") s.options.shared_object = &shared_object;
  if (!modelc::run_pipeline(s, hooks)) return false;
  if (a.emit == "grad" && !s.step) {
    modelc::SourceLoc loc;
    for (const modelc::ast::Model& m : s.c.main_module().models)
      if (m.name == s.e.graph->name) loc = m.loc;
    s.c.diags().error(loc, fmt::format("model '{}' has no train section to build a train step from", s.e.graph->name));
    return false;
  }
  if (a.emit == "memory") text = modelc::memory_report_text(s, origins, a.memory);
  else if (a.emit == "ptx") text = s.lowered.program->ptx;
  else if (a.emit == "llvm") text = s.llvm_text;
  if (a.emit == "plan") {
    try {
      modelc::rt::check_program(*s.lowered.program);
    } catch (const modelc::rt::RuntimeError& e) {
      throw modelc::InternalError(std::string("the compiled program is inconsistent: ") + e.what());
    }
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"modelc: compiles .model files into .plan files (or prints a stage of the compilation)", "modelc"};
  // A file-size limit (ulimit -f) makes a write fail with "File too large", as a full disk
  // does with its reason, instead of killing the process.
  std::signal(SIGXFSZ, SIG_IGN);
  Args a;
  add_options(app, a);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help
    fmt::print(stderr, "modelc: error: {}{} (try 'modelc --help')\n", e.what(), modelc_tools::flag_hint(app));
    return 2;
  }
  if (a.version) {
    fmt::print("modelc {}\n", MODELC_VERSION);
    return 0;
  }
  if (a.list_ops) {
    fmt::print("{}", modelc::op_reference_markdown());
    return 0;
  }
  if (int status = check_args(a)) return status;
  std::map<std::string, int64_t> bindings;
  if (a.emit == "memory") bindings = take_free_dim_defines(a.opts, a.file);
  modelc::Compilation c(a.opts);
  modelc::CompileState s{c, a.file, program_options(a)};
  s.options.bindings = bindings;
  std::string text, shared_object;
  bool ok = false;
  auto internal = [&c](const std::string& what) {
    std::cerr << c.diags().render();
    fmt::print(stderr, "modelc: {}\n(this is a bug in modelc; please report it with the input file)\n", what);
    return 3;
  };
  try {
    ok = compile(s, a, text, shared_object);
  } catch (const modelc::UserError& e) {
    std::cerr << c.diags().render();
    fmt::print(stderr, "modelc: error: {}\n", e.what());
    return 1;
  } catch (const modelc::InternalError& e) {
    return internal(e.what());
  } catch (const std::exception& e) {
    return internal(std::string("internal error: ") + e.what());
  }
  std::cerr << c.diags().render();
  ok = ok && !c.diags().has_errors();
  if (!ok) return 1;
  if (a.emit == "plan") {
    try {
      modelc::rt::write_plan(*s.lowered.program, shared_object, a.output, modelc::host_target());
    } catch (const modelc::rt::RuntimeError& e) {
      fmt::print(stderr, "modelc: error: {}\n", e.what());
      return 1;
    } catch (const modelc::InternalError& e) {
      return internal(e.what());
    }
    return 0;
  }
  if (!a.emit.empty() && !write_output(a.output, text)) return 1;
  return 0;
}
