// The `train NAME { ... }` section, checked against a schema and kept as typed settings
// for the runtime. Calls (data = text(...), optimizer = adamw(...)) are kept as a kind
// plus named arguments with the schema's defaults filled in.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "compiler/ir/attrs.h"
#include "compiler/support/diagnostics.h"

namespace modelc {

struct TrainCall {
  std::string kind;  // "adamw", "text", "cosine", ...
  Attrs args;        // every argument, defaults included
  SourceLoc loc;
};

struct TrainConfig {
  std::string model;
  SourceLoc loc;
  std::optional<TrainCall> data, optimizer, schedule;
  std::optional<int64_t> batch, steps, epochs, seed, accumulate, eval_every;
  std::optional<double> clip_grad_norm, validation;
  std::optional<std::string> precision;  // fp32 | bf16 | fp16
  // mem_budget = "8GiB" (or bytes): the peak memory recomputation placement must fit the
  // train step in (compiler/passes/recompute_placement.h).
  std::optional<int64_t> mem_budget;
};

// Text form, as printed after the graph by --emit=ir.
std::string print_train_config(const TrainConfig& t);

}  // namespace modelc
