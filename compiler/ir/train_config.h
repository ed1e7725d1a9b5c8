// The `train NAME { ... }` section, checked against a schema and kept as typed settings
// for the runtime. Calls (data = text(...), optimizer = adamw(...)) are kept as a kind
// plus named arguments with the schema's defaults filled in.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "compiler/ir/attrs.h"
#include "compiler/support/diagnostics.h"

namespace modelc {

struct TrainCall {
  std::string kind;  // "adamw", "text", "cosine", ...
  Attrs args;        // every argument, defaults included
  SourceLoc loc;
};

// `param_groups = [param_group("*.b", weight_decay = 0.0), param_group("head.*", lr_scale = 10.0)]`:
// the parameters whose names match `pattern` (a shell glob; the first group that matches
// wins) get their own weight decay and a multiple of the learning rate.
struct ParamGroup {
  std::string pattern;
  std::optional<double> lr_scale, weight_decay;
  SourceLoc loc;
};

// `freeze = ["embed.*", "conv.0.w"]`: the parameters whose names match are not trained.
struct FreezePattern {
  std::string pattern;
  SourceLoc loc;
};

struct TrainConfig {
  std::string model;
  SourceLoc loc;
  // early_stopping: a watch on a held-out metric (runtime/base/metric_watch.h).
  std::optional<TrainCall> data, optimizer, schedule, early_stopping;
  std::optional<int64_t> batch, steps, epochs, seed, accumulate, eval_every;
  std::optional<double> clip_grad_norm, validation;
  std::optional<std::string> precision;  // fp32 | bf16 | fp16
  // mem_budget = "8GiB" (or bytes): the peak memory recomputation placement must fit the
  // train step in (compiler/passes/recompute_placement.h).
  std::optional<int64_t> mem_budget;
  std::vector<ParamGroup> param_groups;
  std::vector<FreezePattern> freeze;
};

// Text form, as printed after the graph by --emit=ir.
std::string print_train_config(const TrainConfig& t);

}  // namespace modelc
