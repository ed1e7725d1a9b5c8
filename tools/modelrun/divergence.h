// Why a run's loss stopped being finite, in words that end in what to do: float16
// overflow, exploding gradients (from the gradient-norm history), parameters that are no
// longer finite, or a non-finite value from inside the model. Data cannot be the cause
// through modelrun's loaders: they refuse NaN, infinities and labels or ids out of range
// when the data is loaded (docs/errors.md).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/session/session.h"

namespace modelrun {

namespace rt = modelc::rt;

struct StepFacts {
  int64_t step = 0;  // 1-based: the steps done once it has run
  double loss = 0, grad_norm = 0;
};

struct DivergenceFacts {
  StepFacts bad;                  // the step whose loss is not finite
  std::vector<StepFacts> before;  // the steps before it this run, oldest first
  double lr = 0, clip = 0;        // the step's learning rate; clip_grad_norm (0: off)
  bool fp16 = false;              // fp16 with dynamic loss scaling
  double loss_scale = 0;
  int64_t skipped = 0, scaled_steps = 0;
  std::string bad_params;         // non_finite_params() after the step
};

// "the loss is nan at step 37: training diverged: <the cause>; <what to do>".
std::string explain_divergence(const DivergenceFacts& f);

// The f32 parameters of `s` that hold NaN or infinities: "w (3 of 784 values), b (...)",
// three at most and then "and N more"; "" when every one is finite.
std::string non_finite_params(rt::Session& s);

}  // namespace modelrun
