// What every modelrun subcommand does first: compile the .model file (or read the .plan),
// find the inputs its data feeds, open the data, and set up the session from the command line.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "runtime/base/program.h"
#include "runtime/session/checkpoint.h"
#include "runtime/session/data/dataset.h"
#include "runtime/session/data/loader.h"
#include "runtime/session/session.h"
#include "tools/modelrun/commands.h"
#include "tools/modelrun/evaluate.h"

namespace modelrun {

namespace rt = modelc::rt;

// An error already explained to the user (diagnostics printed): exit status 1.
struct Reported {};

struct Loaded {
  std::shared_ptr<rt::Program> program;
  std::string base_dir;  // the .model or .plan file's directory: data paths are relative to it
  // The inputs the data feeds: a (features, labels) source feeds the model's two inputs in
  // order; an array source (npy, npz, safetensors) every input by name, `inputs` listing them
  // in the eval function's order (empty otherwise). `labels` is then the last one, the
  // target predict leaves out (compiler/passes/predict.h) and accuracy is counted against.
  std::string features, labels;
  std::vector<int64_t> example_shape;    // of one example of `features`
  std::vector<rt::InputSpec> inputs;
  bool named() const { return !inputs.empty(); }
  int prefetch = 2, workers = 1;         // the loaders' (--prefetch, --workers)
};

// A .plan file (its suffix, or the plan magic whatever the suffix) is loaded as compiled;
// anything else is compiled from source (with the train step when `train`; with the
// predict function when `predict` is set: its outputs by name, or empty for the declared
// ones, ProgramOptions::predict). Checks that the eval function feeds two inputs
// (features, then labels or targets; an array source: any inputs, each shaped by constants
// but for the batch) and has a loss.
bool is_plan(const std::string& file);
Loaded compile(const CommonOptions& c, bool train, const std::optional<std::vector<std::string>>& predict = std::nullopt);

// The train section's data (with the command line's --batch, --seed and --data applied by
// apply_common), checked against the model's inputs and index limits; csv standardised with
// `stats` when given (a trained model's), else with the training split's own.
void apply_common(rt::TrainSettings& t, const CommonOptions& c);
std::shared_ptr<const rt::Dataset> open_data(const Loaded& l, const rt::Standardization* stats = nullptr);
// predict --input: new data, every example in file order as both splits. An array-source
// model: one .npz or safetensors file, or INPUT=FILE.npy per input, with the inputs the
// predict function reads and the target if the data has it. A csv model: one .csv file of
// features, with or without the label column, standardised with `stats` (the checkpoint's).
std::shared_ptr<const rt::Dataset> open_input(const Loaded& l, const std::vector<std::string>& args,
                                              const rt::Standardization* stats);
// The usage errors of --input that need no data: a model whose data --input does not take.
void check_input(const Loaded& l, const std::vector<std::string>& args);
// A batch as the functions' inputs by name (moved out of b).
std::map<std::string, rt::HostTensor> feed(const Loaded& l, rt::Batch& b);
// The predict function's inputs from a batch (copied): the features, or the named inputs it
// reads; and the batch's labels or targets (the `labels` input's values).
std::map<std::string, rt::HostTensor> predict_inputs(const Loaded& l, const rt::Batch& b);
const rt::HostTensor& batch_labels(const Loaded& l, const rt::Batch& b);

// The session's threads, device and memory limit from the command line; the note that
// --memory-limit does not apply on CUDA.
rt::SessionOptions session_options(const CommonOptions& c);
void note_memory_limit(const rt::Session& s, const CommonOptions& c);

// The examples of one optimizer step, all micro-batches together: the train section's (or
// --batch's) batch, which must split evenly (a plan's accumulate is fixed when it compiles).
int64_t step_batch(const rt::TrainSettings& t, const rt::Function& step);
// The examples of one micro-batch, and of one evaluation call: the forward pass runs at the
// size the memory plan assumed for it.
int64_t micro_batch(const rt::TrainSettings& t);

EvalResult evaluate(rt::Session& s, const Loaded& l, const std::shared_ptr<const rt::Dataset>& ds, int64_t batch);
// The session's parameters and buffers (and, with_state, optimizer state), for a checkpoint.
rt::NamedTensors persistent_tensors(const rt::Session& s, bool with_state);
// The train step's peak memory as the memory plan predicts it at the program's batch: what
// Session::memory_usage().peak() measures (compiler/lowered/memory_report.h).
int64_t predicted_peak(const rt::Program& p);

// The trained parameters and buffers of checkpoint `path` (one of the session's model) into s.
rt::Checkpoint load_trained(rt::Session& s, const std::string& path);

// The (first) feed of the program's predict function, which must read inputs the data gives
// (a (features, labels) source: the features alone); an error naming `file` when the
// program has no predict function.
const rt::Feed& predict_feed(const Loaded& l, const std::string& file);

// Runs a subcommand's body: its exit status, or 1 after Reported or an error (printed as
// "modelrun: error: ..."), 2 after a UsageError.
int guarded(const std::function<int()>& body);

}  // namespace modelrun
