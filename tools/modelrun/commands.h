// The subcommands of `modelrun`: train, eval, bench, predict and generate. They use only the runtime's
// embedding API (Session, data loaders, checkpoints) on a Program the compiler built in
// process.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace modelrun {

struct CommonOptions {
  std::string file;                    // the .model file
  std::string model;                   // --model
  std::vector<std::string> defines;    // -D NAME=VALUE
  std::vector<std::string> data;       // --data PATH or --data NAME=VALUE
  std::optional<int64_t> batch, seed;
  int threads = 0;
  bool quiet = false;
  std::string mem_budget;              // --mem-budget BYTES (.model files only)
  std::string recompute = "greedy";    // --recompute greedy|sqrtn|none
  bool ignore_annotations = false;     // --ignore-annotations
  std::string memory_limit;            // --memory-limit BYTES: the runtime allocator's limit
  std::optional<uint32_t> streams;     // --streams N: schedule the functions onto N streams
  std::optional<std::string> precision;  // --precision fp32|bf16|fp16 (.model files only)
  std::string device = "auto";         // --device auto|cpu|cuda|cuda:N
  bool tf32 = false;                   // --tf32: f32 matmuls on CUDA may use TF32
  std::string subnormals = "flush";    // --subnormals flush|keep (CPU)
  int workers = 1;                     // --workers N: data loader threads
  int prefetch = 2;                    // --prefetch N: batches prepared ahead (0: on the training thread)
};

struct TrainOptions {
  CommonOptions common;
  std::optional<int64_t> epochs, steps, eval_every, accumulate;
  std::optional<double> lr;
  std::string checkpoint_dir;
  std::optional<std::string> resume;   // a path, or "" for DIR/checkpoint.safetensors
  std::string metrics;                 // .jsonl / .csv
  std::string dump_batches;            // safetensors of the fed batches (reference checks)
  std::string save_initial;            // safetensors of the params before the first step
  std::string init_from;               // start from these weights (init_from.h)
  std::vector<std::string> init_only;  // the name patterns init_from takes
};

struct EvalOptions {
  CommonOptions common;
  std::string checkpoint;
};

struct BenchOptions {
  CommonOptions common;
  int64_t steps = 20, warmup = 3;
  bool compare_fusion = false;         // --compare-fusion (tools/modelrun/fusion_bench.h)
  std::vector<std::string> more_files; // --compare-fusion: FILEs after the first
  std::string torch_json;              // --compare-fusion --torch-json FILE
  bool profile = false;                // --profile: the time per kernel (tools/modelrun/profile_table.h)
  int64_t top = 15;                    // --top N rows of it (0: all)
};

struct PredictOptions {
  CommonOptions common;
  std::string checkpoint;
  std::vector<std::string> outputs;    // --output NAME: tensors of the model's body (default: its outputs without the target)
  std::string split = "held-out";      // --split held-out|train|all: which examples of the data
  std::string out;                     // -o FILE.csv|FILE.jsonl (default: CSV on stdout)
  std::vector<std::string> inputs;     // --input FILE.npz|FILE.safetensors|INPUT=FILE.npy: new data (array sources)
};

struct GenerateOptions {
  CommonOptions common;
  std::string checkpoint;
  std::string prompt;
  int64_t tokens = 200;                // --tokens N to generate
  double temperature = 1.0;            // 0: always the most likely token
  int64_t top_k = 0;                   // 0: every token
  double top_p = 1.0;                  // nucleus sampling; 1: every token
  std::string output = "logits";       // the tensor of next-token scores
};

// Each returns the process exit status; errors are printed as "modelrun: error: ...".
int run_train(const TrainOptions& o);
int run_eval(const EvalOptions& o);
int run_bench(const BenchOptions& o);
int run_predict(const PredictOptions& o);    // tools/modelrun/infer.cc
int run_generate(const GenerateOptions& o);  // tools/modelrun/infer.cc

}  // namespace modelrun
