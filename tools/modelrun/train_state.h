// What a `modelrun` run starts from: the command line's numbers, checked with the train
// section's own rules (runtime/base/train_rules.h: the same values refused with the same
// words as in a .model file or a .plan), and the checkpoint a training run resumes from,
// checked field by field against the run (docs/language.md, "Resuming").
#pragma once

#include <cstdint>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "runtime/session/checkpoint.h"
#include "runtime/session/data/loader.h"
#include "runtime/session/session.h"
#include "tools/modelrun/commands.h"

namespace modelrun {

namespace rt = modelc::rt;

// A command line that makes no sense (an option that does not apply, a value out of range):
// exit status 2.
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Throws UsageError for the first option given a value its setting refuses:
// "--lr nan: 'lr' must be a finite number greater than 0, got nan".
void check_options(const CommonOptions& c);
void check_options(const TrainOptions& o);
void check_options(const BenchOptions& o);

// The run a checkpoint is resumed into.
struct RunShape {
  std::string model;
  int64_t per_epoch = 0;  // batches (optimizer steps) per epoch
  int64_t total = 0;      // the run's steps: the learning-rate schedule's horizon
  std::string schedule;   // rt::Schedule::kind: "constant", "step", "cosine", ...
};

// What the session's parameters and buffers (and, with_state, its optimizer state) are:
// what a checkpoint of it must hold.
std::vector<rt::TensorSpec> persistent_specs(const rt::Session& s, bool with_state);

// The trained model out of checkpoint `c` (checked against persistent_specs first): its
// parameters and buffers.
void load_model_tensors(rt::Session& s, const rt::Checkpoint& c);

// The metadata a training checkpoint records: the model, the seed, the step, the run's
// horizon and the data position.
std::map<std::string, std::string> checkpoint_metadata(const rt::Session& s, const RunShape& run,
                                                       const rt::DataPosition& position);

// Loads checkpoint `path` into `s` (parameters, optimizer state, step) and returns the data
// position to continue from. Every field is checked: the model, the seed, the step (a whole
// number, not past the run's end), the data position (consistent with the step at this
// batch size), and the horizon (a cosine, linear, polynomial or onecycle schedule's curve
// depends on it: a different one is refused). Throws rt::CheckpointError naming the file and the field.
// `metadata`, when given, receives the checkpoint's metadata (the watches' state, tools/modelrun/watch.h).
rt::DataPosition resume_from(rt::Session& s, const std::string& path, const RunShape& run, bool quiet,
                             std::map<std::string, std::string>* metadata = nullptr);

}  // namespace modelrun
