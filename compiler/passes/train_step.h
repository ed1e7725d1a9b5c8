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
//
// Mixed precision (docs/precision.md): with precision bf16 or fp16 the forward graph goes
// through autocast (compiler/passes/autocast.h) before it is copied, so the backward runs
// in the same types and the params, their gradients and the optimizer stay f32. fp16 adds
// dynamic loss scaling inside the graph, as torch.cuda.amp.GradScaler does it:
//   - f32 scalar states `loss_scaler.log2_scale` (s) and `loss_scaler.good_steps`
//     (n), zero-initialised like all state; the scale is loss_scale * 2^s;
//   - the gradients are those of loss * scale, multiplied by 1 / scale (exact: a power of
//     two); `grad_norm` is their norm, and the step is clean when it is finite (any inf or
//     NaN gradient makes it inf or NaN);
//   - a clean step updates as usual, n += 1, and when n reaches growth_interval s += 1
//     (the scale doubles) and n = 0; a step with an inf/NaN gradient leaves every param and
//     optimizer state bit-identical (each update is where(clean, new, old)), s -= 1 (the
//     scale halves) and n = 0;
//   - outputs `loss_scale` (the scale this step used) and `skipped` (1 when the step was
//     skipped, else 0), both f32 scalars;
//   - with Adam or AdamW, a third state `loss_scaler.skipped_steps` counts the skipped
//     steps, and the bias correction uses t = $t - skipped_steps: the steps applied so
//     far, as PyTorch's Adam counts them (its optimizer.step() is not called on a skip).
// The runtime needs no code for any of this. It feeds `$t` = step + 1, so the learning-rate
// schedule advances over skipped steps, as PyTorch's scheduler.step() does when called
// every iteration.
#pragma once

#include "compiler/ir/train_config.h"
#include "compiler/ir/graph.h"

namespace modelc {

struct TrainStepOptions {
  std::string optimizer = "sgd";  // sgd | adam | adamw
  Attrs optimizer_args;           // as the train section's schema gives them (lr is fed)
  double clip_grad_norm = 0.0;    // 0: no clipping
  int64_t accumulate = 1;
  std::string precision = "fp32";  // fp32 | bf16 | fp16 (autocast.h; fp16 scales the loss)
  double loss_scale = 65536.0;     // fp16: the initial scale (GradScaler's 2^16)
  int64_t growth_interval = 2000;  // fp16: clean steps after which the scale doubles
  // Frozen parameters (no gradient, no optimizer state, never updated) and parameter groups
  // (their own weight decay, lr times lr_scale; the first group whose pattern matches a
  // name wins), by shell-glob patterns on parameter names; a pattern that matches no
  // parameter is a SourceError at its location.
  std::vector<FreezePattern> freeze;
  std::vector<ParamGroup> groups;
};
// From the train section, with defaults where it says nothing (sgd without momentum).
TrainStepOptions train_step_options(const TrainConfig& cfg);

Graph build_train_step(const Graph& forward, const TrainStepOptions& options);

}  // namespace modelc
