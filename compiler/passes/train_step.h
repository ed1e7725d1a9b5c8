// Builds the ONE train-step graph of a model: forward, backward, gradient clipping by global
// norm, gradient accumulation over micro-batches and the optimizer update, with parameters
// and optimizer state as persistent state of the step.
//
// Reads: the model's forward graph (its `loss` output a float scalar) and its train section.
// Produces a new graph with
//   - inputs: each model input once per micro-batch, under the input's own name (node
//     attribute `micro` = k when accumulate > 1: the caller's batch split along dim 0 into
//     `accumulate` equal parts, as the interpreter and the runtime do), then two f32
//     scalars the runtime feeds: `$lr` (this step's learning rate, from the schedule) and
//     `$t` (the 1-based step number, for Adam's bias correction);
//   - params: the model's params, unchanged names and initializers;
//   - states: optimizer state (op `state`, zero-initialised) named
//     `<param>.exp_avg`, `<param>.exp_avg_sq` (adam, adamw) or `<param>.momentum_buffer` (sgd
//     with momentum);
//   - outputs: `loss` (the mean over micro-batches) and `grad_norm` (the global L2 norm of
//     the gradients before clipping); the forward graph's other outputs stay with eval;
//   - updates: every param and state gets its new value.
// Micro-batch k > 0's copy of a dropout gets its own `key` (a mix of the site's key and k),
// so micro-batches draw independent masks. The forward nodes keep their names, scopes and
// locations; the update of a param carries the param's. Throws UserError when the model cannot be trained (no float scalar `loss`,
// no params) or the options are invalid (unknown optimizer or argument, accumulate < 1,
// negative clip_grad_norm, PyTorch's range checks of lr, momentum, betas, eps, weight decay).
// SGD, momentum, Nesterov, Adam, AdamW and weight decay follow PyTorch's torch.optim
// definitions exactly, so its per-step losses can be compared with ours.
#pragma once

#include "compiler/frontend/train_config.h"
#include "compiler/ir/graph.h"

namespace modelc {

struct TrainStepOptions {
  std::string optimizer = "sgd";  // sgd | adam | adamw
  Attrs optimizer_args;           // as the train section's schema gives them (lr is fed)
  double clip_grad_norm = 0.0;    // 0: no clipping
  int64_t accumulate = 1;
};
// From the train section, with defaults where it says nothing (sgd without momentum).
TrainStepOptions train_step_options(const TrainConfig& cfg);

Graph build_train_step(const Graph& forward, const TrainStepOptions& options);

}  // namespace modelc
