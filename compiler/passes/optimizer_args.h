// The optimizer of a train step and its arguments, read and checked: torch.optim's names,
// defaults and argument checks (compiler/passes/train_step.h builds the update from them).
#pragma once

#include <string>

#include "compiler/ir/attrs.h"

namespace modelc {

struct OptimizerArgs {
  std::string kind;  // sgd | adam | adamw | rmsprop | adagrad | lion | adafactor
  double momentum = 0.0, weight_decay = 0.0, beta1 = 0.9, beta2 = 0.999, eps = 1e-8;
  double alpha = 0.99, lr_decay = 0.0, initial_accumulator_value = 0.0;  // rmsprop, adagrad
  // adafactor (torch.optim.Adafactor): eps1 0 stands for the param dtype's machine epsilon.
  double beta2_decay = -0.8, eps1 = 0.0, eps2 = 1e-3, d = 1.0;
  bool nesterov = false, centered = false;
  // The update reads the step number `$t` (Adam's bias correction, Adagrad's lr decay,
  // Adafactor's decay and relative step).
  bool counts_steps() const { return kind == "adam" || kind == "adamw" || kind == "adagrad" || kind == "adafactor"; }
};

// The arguments of optimizer `kind` from `args` (the train section's schema gives every one;
// those left out take torch.optim's defaults). lr is checked only: the step's value is fed.
// Throws UserError on an unknown optimizer or argument, or a value torch.optim refuses.
OptimizerArgs read_optimizer(const std::string& kind, const Attrs& args);

}  // namespace modelc
