// modelrun: trains, evaluates and benchmarks a .model file, or a .plan file compiled by
// modelc (runtime/session/plan.h), on the CPU or a CUDA GPU (--device).
//
//   modelrun train FILE.model [--epochs N | --steps N] [--batch N] [--lr X] [--seed N] ...
//   modelrun eval  FILE.model --checkpoint CKPT
//   modelrun bench FILE.model [--steps N] [--batch N] [--threads N]
//   modelrun bench --compare-fusion FILE.model|DIR... [--steps N] [--torch-json FILE]
//   modelrun predict FILE.model --checkpoint CKPT [--output NAME] [--split S] [--input DATA] [-o FILE.csv|.jsonl]
//   modelrun generate FILE.model --checkpoint CKPT --prompt TEXT [--tokens N] [--temperature T] ...
//
// Exit status: 0 success, 1 an error in the model, its data or a checkpoint, 2 bad usage.
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <csignal>

#include "tools/cli_hints.h"
#include "tools/modelrun/commands.h"

namespace {

void add_common(CLI::App* app, modelrun::CommonOptions& c) {
  app->add_option("file", c.file,
                  "the .model file, or a .plan file compiled by modelc (FILE.plan, or any file that starts with the "
                  "plan magic)")
      ->required();
  app->add_option("--model", c.model, "which model of the file (default: its only one; .model files only)");
  app->add_option("-D", c.defines, "bind a dimension of the model: -D NAME=VALUE (.model files only)")
      ->allow_extra_args(false);
  app->add_option("--data", c.data,
                  "override the train section's data: a path (its first file argument) or NAME=VALUE; without it, "
                  "relative data paths resolve against the .model or .plan file's directory")
      ->allow_extra_args(false);
  app->add_option("--batch", c.batch, "examples per step (default: the train section's batch)");
  app->add_option("--seed", c.seed, "the run's seed: initialisation, shuffling, dropout");
  app->add_option("--threads", c.threads, "worker threads (default: one per core)");
  app->add_option("--workers", c.workers,
                  "data loader threads making batches ahead, as DataLoader's num_workers; the batches are the same "
                  "for every N")
      ->capture_default_str()
      ->check(CLI::Range(1, 64));
  app->add_option("--prefetch", c.prefetch, "batches made ahead of the step that needs them (0: on the training thread)")
      ->capture_default_str()
      ->check(CLI::Range(0, 1024));
  app->add_option("--streams", c.streams,
                  "run independent work of each step on up to N streams (worker threads ordered by events; "
                  "1: the sequential run; for a .plan, replaces its schedule; docs/streams.md)")
      ->option_text("N")
      ->check(CLI::Range(1, 16));
  app->add_option("--precision", c.precision,
                  "fp32, or bf16 / fp16 matmuls and convolutions with f32 master weights (fp16 with dynamic loss "
                  "scaling); overrides the train section's precision (.model files only; docs/precision.md)")
      ->check(CLI::IsMember({"fp32", "bf16", "fp16"}));
  app->add_option("--device", c.device,
                  "where to run: auto (a CUDA GPU when there is one, else the CPU, saying why), cpu, cuda or cuda:N "
                  "(after CUDA_VISIBLE_DEVICES; docs/gpu.md)")
      ->option_text("DEVICE");
  app->add_flag("--tf32", c.tf32, "on CUDA, let f32 matmuls use TF32 tensor cores (10-bit mantissas, f32 accumulation)");
  app->add_option("--subnormals", c.subnormals,
                  "on the CPU, flush subnormal floats (below 2^-126) to zero while steps run (fast; the default), or keep "
                  "IEEE gradual underflow (docs/precision.md)")
      ->check(CLI::IsMember({"flush", "keep"}))
      ->capture_default_str();
  app->add_flag("-q,--quiet", c.quiet, "print only the summary");
  app->add_option("--mem-budget", c.mem_budget,
                  "the peak memory the train step must fit in (8GiB, 512MiB, bytes; overrides the train section's "
                  "mem_budget; .model files only): activations are recomputed in the backward pass until it fits")
      ->option_text("BYTES");
  app->add_option("--recompute", c.recompute,
                  "what to recompute: greedy (with --mem-budget, fewest FLOPs per byte freed; the default), sqrtn "
                  "(Chen et al.'s sqrt(n) segments), none (keep every activation, ignore @checkpoint and budgets)")
      ->capture_default_str()
      ->check(CLI::IsMember({"greedy", "sqrtn", "none"}));
  app->add_flag("--ignore-annotations", c.ignore_annotations,
                "ignore @checkpoint annotations: recompute only what --mem-budget needs (.model files only)");
  app->add_option("--memory-limit", c.memory_limit,
                  "the most memory the runtime may allocate per step beyond parameters and optimizer state "
                  "(BYTES; a step that needs more stops with the allocator's memory summary)")
      ->option_text("BYTES");
}

CLI::App* add_predict(CLI::App& app, modelrun::PredictOptions& pr) {
  CLI::App* predict = app.add_subcommand(
      "predict", "run a trained model's forward pass (eval mode, no target, no loss) on its data: every output per example");
  add_common(predict, pr.common);
  predict->add_option("--checkpoint", pr.checkpoint, "the trained model")->required();
  predict->add_option("--output", pr.outputs,
                      "what to predict: tensors of the model's body by name (repeatable; default: the model's outputs "
                      "that do not read its target, such as logits; .model files only)")
      ->option_text("NAME")
      ->allow_extra_args(false);
  predict->add_option("--split", pr.split, "which examples of the data: held-out, train or all")
      ->capture_default_str()
      ->check(CLI::IsMember({"held-out", "train", "all"}));
  predict->add_option("--input", pr.inputs,
                      "new data to predict from: for a csv() model a .csv of features (a label column optional); "
                      "for npy(), npz() or safetensors() a .npz or safetensors file of arrays named as the data source "
                      "names them, or INPUT=FILE.npy per input (repeatable; the target may be absent). Every example, "
                      "in file order (--split does not apply)")
      ->option_text("DATA")
      ->allow_extra_args(false);
  predict->add_option("-o", pr.out,
                      "write the predictions to FILE.csv or FILE.jsonl (default: CSV on stdout); a classifier's "
                      "logits also give the predicted class and its probability")
      ->option_text("FILE");
  return predict;
}

CLI::App* add_generate(CLI::App& app, modelrun::GenerateOptions& g) {
  CLI::App* generate = app.add_subcommand("generate", "continue a prompt with a trained text model, one token at a time");
  add_common(generate, g.common);
  generate->add_option("--checkpoint", g.checkpoint, "the trained model (its vocabulary is read from it)")->required();
  generate->add_option("--prompt", g.prompt, "the text to continue")->required();
  generate->add_option("--tokens", g.tokens, "how many tokens to generate")->capture_default_str();
  generate->add_option("--temperature", g.temperature, "divides the scores before sampling (0: always the most likely token)")
      ->capture_default_str();
  generate->add_option("--top-k", g.top_k, "sample among the K most likely tokens only (0: all)")->capture_default_str();
  generate->add_option("--top-p", g.top_p, "sample among the fewest most likely tokens whose probability reaches P")
      ->capture_default_str();
  generate->add_option("--output", g.output, "the model's tensor of next-token scores [batch, T, vocabulary]")
      ->capture_default_str();
  return generate;
}

}  // namespace

int main(int argc, char** argv) {
  // A file-size limit (ulimit -f) makes a write fail with "File too large", as a full disk
  // does with its reason, instead of killing the process.
  std::signal(SIGXFSZ, SIG_IGN);
  CLI::App app{"modelrun: train, evaluate, benchmark and use .model and .plan files, on the CPU or a CUDA GPU (--device)"};
  app.set_version_flag("--version", std::string("modelrun ") + MODELC_VERSION);
  app.require_subcommand(1);

  modelrun::TrainOptions t;
  CLI::App* train = app.add_subcommand("train", "train a model on its data");
  add_common(train, t.common);
  auto* epochs = train->add_option("--epochs", t.epochs, "passes over the training data");
  auto* steps = train->add_option("--steps", t.steps, "optimizer steps (instead of --epochs)");
  epochs->excludes(steps);
  train->add_option("--lr", t.lr, "the peak learning rate (overrides the optimizer's lr)");
  train->add_option("--eval-every", t.eval_every, "evaluate on the held-out split every N steps (default: every epoch)");
  train->add_option("--accumulate", t.accumulate, "micro-batches per step (gradient accumulation)");
  train->add_option("--checkpoint-dir", t.checkpoint_dir, "write DIR/checkpoint.safetensors at every evaluation and at the end");
  train->add_option("--resume", t.resume, "continue from a checkpoint (default: DIR/checkpoint.safetensors)")
      ->expected(0, 1)->default_str("");
  train->add_option("--metrics", t.metrics, "write metrics as JSON lines (.jsonl) or CSV (.csv)");
  train->add_option("--dump-batches", t.dump_batches, "write the batches fed to each step to a safetensors file");
  train->add_option("--save-initial", t.save_initial, "write the initial parameters to a safetensors file");
  auto* init_from = train->add_option("--init-from", t.init_from,
                                      "start from the parameters and buffers of a checkpoint (fine-tuning; the run "
                                      "starts at step 0 with fresh optimizer state)");
  train->add_option("--init-only", t.init_only,
                    "with --init-from: take only the tensors whose names match these patterns (shell globs: "
                    "'conv.*'); the others keep their initialisers")
      ->needs(init_from);
  init_from->excludes("--resume");

  modelrun::EvalOptions e;
  CLI::App* eval = app.add_subcommand("eval", "evaluate a trained model on its held-out data");
  add_common(eval, e.common);
  eval->add_option("--checkpoint", e.checkpoint, "the checkpoint to evaluate")->required();

  modelrun::BenchOptions b;
  CLI::App* bench = app.add_subcommand("bench", "time training steps: steps/s and samples/s");
  add_common(bench, b.common);
  bench->add_option("--steps", b.steps, "timed steps")->capture_default_str();
  bench->add_option("--warmup", b.warmup, "untimed steps first")->capture_default_str();
  auto* profile = bench->add_flag("--profile", b.profile,
                                  "then run the timed steps again with each kernel and library call timed, and print "
                                  "where the step goes: kernel, fused nodes, source line, ms per step, share, bytes, GB/s");
  bench->add_option("--top", b.top, "--profile: the rows to print, by time (0: all)")->capture_default_str()->needs(profile);
  auto* compare = bench->add_flag(
      "--compare-fusion", b.compare_fusion,
      "compile each model with kernel fusion on and off and run both on the same random batches: time per step, "
      "kernels, bytes moved, GB/s against a measured triad, speedup and the largest difference (FILE may be repeated "
      "or be a directory of .model files; --data does not apply)");
  bench->add_option("files", b.more_files, "--compare-fusion: more .model files or directories")->needs(compare);
  bench->add_option("--torch-json", b.torch_json,
                    "--compare-fusion: add PyTorch eager and torch.compile columns from "
                    "tools/torch_fusion_bench.py --json FILE")
      ->needs(compare);

  modelrun::PredictOptions pr;
  CLI::App* predict = add_predict(app, pr);
  modelrun::GenerateOptions g;
  CLI::App* generate = add_generate(app, g);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& err) {
    if (err.get_exit_code() == 0) return app.exit(err);  // --help, --version
    fmt::print(stderr, "modelrun: error: {}{} (try 'modelrun --help' or 'modelrun COMMAND --help')\n", err.what(),
               modelc_tools::flag_hint(app));
    return 2;
  }
  if (train->parsed()) {
    if (train->count("--resume") && !t.resume) t.resume = "";
    return modelrun::run_train(t);
  }
  if (eval->parsed()) return modelrun::run_eval(e);
  if (predict->parsed()) return modelrun::run_predict(pr);
  if (generate->parsed()) return modelrun::run_generate(g);
  return modelrun::run_bench(b);
}
