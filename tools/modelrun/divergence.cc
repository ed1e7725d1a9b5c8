#include "tools/modelrun/divergence.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace modelrun {

namespace {

std::string number(double v) { return std::isnan(v) ? "NaN" : std::isinf(v) ? (v > 0 ? "inf" : "-inf") : fmt::format("{:.4g}", v); }

// Exploding gradients: the norm of the last finite steps far above the first steps'.
// Returns the words, or "" when the history shows no such growth.
std::string explosion(const DivergenceFacts& f) {
  std::vector<StepFacts> finite;
  for (const StepFacts& s : f.before)
    if (std::isfinite(s.grad_norm)) finite.push_back(s);
  if (finite.size() < 2) return "";
  const size_t head = std::min<size_t>(10, finite.size() / 2 + 1);
  std::vector<double> early;
  for (size_t i = 0; i < head; ++i) early.push_back(finite[i].grad_norm);
  std::nth_element(early.begin(), early.begin() + static_cast<std::ptrdiff_t>(early.size() / 2), early.end());
  const double median = early[early.size() / 2];
  const StepFacts* peak = &finite.back();
  for (size_t i = finite.size() > 10 ? finite.size() - 10 : 0; i < finite.size(); ++i)
    if (finite[i].grad_norm > peak->grad_norm) peak = &finite[i];
  if (!(peak->grad_norm > 100 * std::max(median, 1e-30))) return "";
  return fmt::format("the gradient norm grew from {} (the median of steps {} to {}) to {} at step {}: the gradients "
                     "exploded; lower --lr (it is {:g}){}",
                     number(median), finite.front().step, finite[head - 1].step, number(peak->grad_norm), peak->step, f.lr,
                     f.clip > 0 ? fmt::format(" (clip_grad_norm = {:g} bounds each update, but not a step whose "
                                              "gradients overflow)", f.clip)
                                : " or set clip_grad_norm = 1.0 in the train section");
}

}  // namespace

std::string explain_divergence(const DivergenceFacts& f) {
  std::string why = explosion(f);
  if (why.empty() && f.fp16)
    why = fmt::format("the forward pass overflowed float16 (its largest value is 65504; the loss scaler skipped {} of {} "
                      "steps and is at {}); train with --precision bf16, which has float32's range, or in f32",
                      f.skipped, f.scaled_steps, number(f.loss_scale));
  if (why.empty()) {
    double lo = INFINITY, hi = 0;
    for (const StepFacts& s : f.before)
      if (std::isfinite(s.grad_norm)) lo = std::min(lo, s.grad_norm), hi = std::max(hi, s.grad_norm);
    const std::string steady = f.before.empty() ? "at the first step of the run"
                               : hi > 0         ? fmt::format("while the gradient norm stayed between {} and {}", number(lo), number(hi))
                                                : "after steps without a finite gradient norm";
    why = fmt::format("the first non-finite value arose inside the model {} (an exp that overflows, a log or a division "
                      "of 0, a sqrt of a negative value); the data is not the cause: it was checked for NaN, infinities "
                      "and labels out of range when it was loaded", steady);
  }
  std::string out = fmt::format("the loss is {} at step {}: training diverged: {}", number(f.bad.loss), f.bad.step, why);
  if (!f.bad_params.empty()) out += "; parameters that are no longer finite: " + f.bad_params;
  return out;
}

std::string non_finite_params(rt::Session& s) {
  std::string bad;
  int tensors = 0;
  for (const std::string& n : s.param_names()) {
    const rt::HostTensor p = s.param(n);
    if (p.type != rt::ElemType::F32) continue;
    int64_t count = 0;
    for (int64_t i = 0; i < p.numel(); ++i) count += !std::isfinite(p.f32()[i]);
    if (count == 0) continue;
    if (++tensors <= 3) bad += fmt::format("{}{} ({} of {} values)", bad.empty() ? "" : ", ", n, count, p.numel());
  }
  if (tensors > 3) bad += fmt::format(" and {} more", tensors - 3);
  return bad;
}

}  // namespace modelrun
