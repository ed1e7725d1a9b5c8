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

#include <cstdio>
#include <fstream>
#include <iostream>
#include <limits>
#include <map>
#include <memory>
#include <optional>

#include "compiler/codegen/codelets.h"
#include "compiler/codegen/object.h"
#include "compiler/compile.h"
#include "compiler/compile_program.h"
#include "compiler/passes/fusion.h"
#include "compiler/passes/memory_report.h"
#include "compiler/frontend/parser.h"
#include "compiler/ir/op_doc.h"
#include "compiler/ir/printer.h"
#include "compiler/ir/verifier.h"
#include "runtime/base/error.h"
#include "runtime/session/plan.h"

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

// Compiles the Program (with the train step) for --emit=llvm|ptx|plan, with PTX when
// `ptx_target` is set; `text` receives what llvm and ptx print. Returns the Program, or
// null when diagnostics were reported.
std::shared_ptr<modelc::rt::Program> compile(modelc::Compilation& c, const std::string& file, const std::string& emit,
                                             const std::string& ptx_target, modelc::ProgramOptions po, std::string& text,
                                             std::string& shared_object) {
  po.ptx_target = ptx_target;
  if (emit == "plan") po.shared_object = &shared_object;
  if (emit == "llvm") po.llvm_text = &text;
  auto program = modelc::compile_program(c, file, po);
  if (program && emit == "ptx") text = program->ptx;
  return program;
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

// The memory report of the train step (or eval, without a train section), and what
// recomputation placement recomputed.
std::string memory_text(const modelc::rt::Program& p, const std::vector<modelc::BufferOrigin>& origins,
                        const std::map<std::string, int64_t>& bindings, std::optional<int64_t> memory,
                        const modelc::RecomputeReport& ck) {
  const std::string fn = p.function("train_step") ? "train_step" : "eval";
  modelc::MemoryReportOptions ro;
  ro.memory = memory;
  modelc::MemoryPrediction m = modelc::predict_memory(p, fn, origins, modelc::bind_symbols(p, fn, bindings));
  std::string text = modelc::print_memory_report(p, origins, m, ro);
  if (fn == "train_step") text += modelc::print_recompute_report(ck, m.peak);
  return text;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"modelc: compiles .model files into .plan files (or prints a stage of the compilation)", "modelc"};
  std::string file, emit, output, model, warn, target = "sm_80";
  std::vector<std::string> defines, fflags;
  bool check = false, version = false, list_ops = false;
  int error_limit = 20;
  app.add_option("file", file, "the .model file to compile");
  app.add_option("--emit", emit,
                 "what to produce: tokens (the lexer's tokens), ast (the syntax tree), ir (the "
                 "graph after inlining and shape inference, with the train section), grad (the "
                 "train step: forward, backward, clipping and the optimizer update in one graph), "
                 "fusion (the kernels the train step becomes: each fused group with its nodes, "
                 "inputs, outputs and source lines; the forward graph without a train section), "
                 "llvm (the kernels' LLVM IR), ptx (the kernels' PTX for --target), plan (the "
                 "compiled program for modelrun; needs -o, and is what -o alone writes), memory (the "
                 "train step's predicted peak memory: its breakdown, the largest buffers and their "
                 "source lines; -D binds free dims such as the batch B, default the train section's)")
      ->check(CLI::IsMember({"tokens", "ast", "ir", "grad", "fusion", "llvm", "ptx", "plan", "memory"}));
  app.add_option("-o", output, "write the output to FILE instead of stdout; without --emit, FILE is a compiled .plan")
      ->option_text("FILE");
  CLI::Option* target_opt =
      app.add_option("--target", target, "the GPU architecture of the PTX: --emit=ptx, and with a plan, PTX in the plan")
          ->capture_default_str()
      ->check(CLI::IsMember({"sm_80", "sm_90"}));
  app.add_option("-D", defines, "bind a model dimension or override a top-level constant: -D B=64")
      ->option_text("NAME=VALUE")
      ->allow_extra_args(false);
  std::string memory_str, budget_str, checkpoint_algo = "greedy";
  app.add_option("--mem-budget", budget_str,
                 "the peak memory the train step must fit in (8GiB, 512MiB, bytes; overrides the train "
                 "section's mem_budget): activations are recomputed in the backward pass until it fits")
      ->option_text("BYTES");
  app.add_option("--recompute", checkpoint_algo,
                 "what to recompute in the backward pass: greedy (with --mem-budget, fewest FLOPs per byte "
                 "freed; the default), sqrtn (Chen et al.'s sqrt(n) segments, the baseline), none (keep every "
                 "activation, ignore @checkpoint and budgets)")
      ->capture_default_str()
      ->check(CLI::IsMember({"greedy", "sqrtn", "none"}));
  bool ignore_annotations = false;
  app.add_flag("--ignore-annotations", ignore_annotations,
               "ignore @checkpoint annotations: recompute only what --mem-budget needs");
  app.add_option("--memory", memory_str,
                 "with --emit=memory: the device memory to fit in (80GiB, 512MiB, 1.5GB, bytes); "
                 "reports the largest batch that fits")
      ->option_text("BYTES");
  app.add_option("--model", model, "which model of the file to compile (default: its only one)");
  app.add_flag("--check", check, "check the file and print only diagnostics");
  app.add_option("-W", warn, "-Werror: treat warnings as errors")->option_text("error");
  app.add_option("-f", fflags, "-fno-fusion: one kernel per op node (no kernel fusion); -ffusion: the default")
      ->option_text("no-fusion")
      ->allow_extra_args(false);
  uint32_t streams = 1;
  app.add_option("--streams", streams,
                 "run each function's independent work on up to N streams, ordered by events (1: one "
                 "stream, the sequential run; docs/streams.md)")
      ->option_text("N")
      ->capture_default_str()
      ->check(CLI::Range(1, 16));
  std::string precision;
  app.add_option("--precision", precision,
                 "train (and evaluate) in fp32, or with bf16 / fp16 matmuls and convolutions and f32 "
                 "master weights (fp16 with dynamic loss scaling); overrides the train section's "
                 "precision (docs/precision.md)")
      ->check(CLI::IsMember({"fp32", "bf16", "fp16"}));
  app.add_option("--error-limit", error_limit, "stop after this many errors (0: no limit)")
      ->capture_default_str()->check(CLI::NonNegativeNumber);
  app.add_flag("--version", version, "print the version and exit");
  app.add_flag("--list-ops", list_ops, "print the reference of every built-in op (the Markdown of docs/ops.md) and exit");
  app.footer("With neither --emit nor -o, modelc checks the file (as --check). `modelc FILE.model -o FILE.plan`\n"
             "compiles it for this machine's CPU; `modelrun train FILE.plan` runs it (see docs/plan-format.md).\n"
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
  if (list_ops) {
    fmt::print("{}", modelc::op_reference_markdown());
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
  bool fusion = true;
  for (const std::string& f : fflags) {
    if (f != "fusion" && f != "no-fusion") {
      fmt::print(stderr, "modelc: error: unknown option '-f{}' (only -ffusion and -fno-fusion exist)\n", f);
      return 2;
    }
    fusion = f == "fusion";
  }
  if (check && !emit.empty()) {
    fmt::print(stderr, "modelc: error: --check and --emit exclude each other\n");
    return 2;
  }
  if (check && !output.empty()) {
    fmt::print(stderr, "modelc: error: --check and -o exclude each other\n");
    return 2;
  }
  if (emit.empty() && !output.empty()) emit = "plan";
  if (emit == "plan" && (output.empty() || output == "-")) {
    fmt::print(stderr, "modelc: error: --emit=plan needs -o FILE.plan (a plan is a binary file, not for stdout)\n");
    return 2;
  }
  std::optional<int64_t> memory;
  if (!memory_str.empty()) {
    memory = modelc::parse_bytes(memory_str);
    if (!memory) {
      fmt::print(stderr, "modelc: error: --memory {}: expected a size such as 80GiB, 512MiB or 1.5GB\n", memory_str);
      return 2;
    }
    if (emit != "memory") {
      fmt::print(stderr, "modelc: error: --memory needs --emit=memory\n");
      return 2;
    }
  }
  std::optional<int64_t> mem_budget;
  if (!budget_str.empty()) {
    mem_budget = modelc::parse_bytes(budget_str);
    if (!mem_budget || *mem_budget <= 0) {
      fmt::print(stderr, "modelc: error: --mem-budget {}: expected a size such as 8GiB, 512MiB or 1.5GB\n", budget_str);
      return 2;
    }
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

  std::map<std::string, int64_t> bindings;
  if (emit == "memory") bindings = take_free_dim_defines(opts, file);
  modelc::ProgramOptions program_options;
  program_options.fusion = fusion;
  program_options.streams = streams;
  if (!precision.empty()) program_options.precision = precision;
  program_options.mem_budget = mem_budget;
  program_options.recompute = checkpoint_algo != "none";
  program_options.annotations = !ignore_annotations;
  program_options.recompute_algorithm =
      checkpoint_algo == "sqrtn" ? modelc::RecomputeAlgorithm::SqrtN : modelc::RecomputeAlgorithm::Greedy;
  modelc::Compilation c(opts);
  std::string text, shared_object;
  std::shared_ptr<modelc::rt::Program> program;
  bool ok = false;
  try {
    if (emit == "tokens") {
      uint32_t id = c.read(file);
      if (id) text = modelc::dump_tokens(id, c.sources());
      ok = id != 0;
    } else if (emit == "memory") {
      modelc::ProgramOptions po = program_options;
      std::vector<modelc::BufferOrigin> origins;
      modelc::RecomputeReport ck;
      po.origins = &origins;
      po.recompute_report = &ck;
      po.bindings = bindings;
      po.code = false;  // the memory plan needs buffers and instructions, not kernels
      program = modelc::compile_program(c, file, po);
      ok = program != nullptr;
      if (ok) text = memory_text(*program, origins, bindings, memory, ck);
    } else if (emit == "llvm" || emit == "ptx" || emit == "plan") {
      // A plan holds PTX when --target asks for it: PTX needs the CUDA toolkit (libdevice
      // for the math functions), which a machine that trains on its CPU may lack.
      const bool ptx = emit == "ptx" || target_opt->count() > 0;
      program = compile(c, file, emit, ptx ? target : "", program_options, text, shared_object);
      ok = program != nullptr;
    } else if (c.load(file)) {
      if (emit == "ast") {
        text = modelc::ast::print_module(c.main_module(), c.sources());
        ok = true;
      } else {
        modelc::Elaborated r = c.elaborate();
        ok = r.graph != nullptr;
        if (ok && r.train && !precision.empty()) r.train->precision = precision;
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
        if (ok && emit == "fusion") {
          std::unique_ptr<modelc::Graph> step = r.train ? c.train_step(r) : nullptr;
          ok = !r.train || step != nullptr;
          const modelc::Graph& g = step ? *step : *r.graph;
          modelc::FusionOptions fo;
          fo.enabled = fusion;
          fo.can_emit = [](const modelc::Graph& gr, modelc::NodeId id) { return modelc::CodeletCompiler::handles(gr, id); };
          if (ok) text = modelc::print_fusion(g, modelc::plan_fusion(g, fo), [&c](modelc::SourceLoc l) { return c.sources().describe(l); });
        }
      }
    }
    if (ok && program && emit == "plan") {
      try {
        modelc::rt::check_program(*program);
      } catch (const modelc::rt::RuntimeError& e) {
        throw modelc::InternalError(std::string("the compiled program is inconsistent: ") + e.what());
      }
    }
  } catch (const modelc::UserError& e) {
    std::cerr << c.diags().render();
    fmt::print(stderr, "modelc: error: {}\n", e.what());
    return 1;
  } catch (const modelc::InternalError& e) {
    std::cerr << c.diags().render();
    fmt::print(stderr, "modelc: {}\n(this is a bug in modelc; please report it with the input file)\n", e.what());
    return 3;
  } catch (const std::exception& e) {
    std::cerr << c.diags().render();
    fmt::print(stderr, "modelc: internal error: {}\n(this is a bug in modelc; please report it with the input file)\n",
               e.what());
    return 3;
  }
  std::cerr << c.diags().render();
  ok = ok && !c.diags().has_errors();
  if (!ok) return 1;
  if (emit == "plan") {
    try {
      modelc::rt::write_plan(*program, shared_object, output, modelc::host_target());
    } catch (const modelc::rt::RuntimeError& e) {
      fmt::print(stderr, "modelc: error: {}\n", e.what());
      return 1;
    } catch (const modelc::InternalError& e) {
      fmt::print(stderr, "modelc: {}\n(this is a bug in modelc; please report it with the input file)\n", e.what());
      return 3;
    }
    return 0;
  }
  if (!emit.empty() && !write_output(output, text)) return 1;
  return 0;
}
