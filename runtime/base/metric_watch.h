// Decisions taken on a held-out metric, evaluation after evaluation (docs/language.md,
// "Watching a held-out metric"): the plateau schedule (torch.optim.lr_scheduler's
// ReduceLROnPlateau) and early stopping (as Keras's and Lightning's EarlyStopping). modelrun
// drives them from its evaluations; an application that evaluates by itself drives them the
// same way and hands the factor to Session::set_lr_factor. Their state goes into the
// checkpoint's metadata, so a resumed run decides as the uninterrupted one would.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "runtime/base/program.h"

namespace modelc::rt {

// Whether `value` improves on `best` by the watch's rule, as torch's ReduceLROnPlateau
// words it: rel min  value < best (1 - threshold), abs min  value < best - threshold, and the
// mirror images for max. A NaN never improves.
bool improves(const MetricWatch& w, double value, double best);

struct WatchState {
  double best = 0;          // the best value so far (+inf, or -inf when maximising, before any)
  int64_t best_step = -1;   // the step of the evaluation that gave it (-1: none yet)
  int64_t bad = 0;          // evaluations since the last improvement
  int64_t cooldown = 0;     // plateau: evaluations of cool-down left
  double lr_factor = 1.0;   // plateau: the learning rate's factor so far
};

// The state before the first evaluation.
WatchState start_watch(const MetricWatch& w);

// One evaluation's value into the plateau schedule `s` (ReduceLROnPlateau.step): returns
// true when it reduced the learning rate (state.lr_factor changed: lr * factor, but not below
// min_lr, and only when that lowers it by more than 1e-8, as torch's eps).
bool plateau_step(const Schedule& s, WatchState& state, double value, int64_t step);

// One evaluation's value into early stopping: returns true when the run should stop, that
// is when `patience` evaluations in a row have not improved on the best.
bool early_stopping_step(const MetricWatch& w, WatchState& state, double value, int64_t step);

// The state as checkpoint metadata under `prefix` ("plateau.best", ...) and back. read_watch
// throws RuntimeError naming `origin` and the key when a value is missing or not a number.
void put_watch(std::map<std::string, std::string>& md, const std::string& prefix, const WatchState& state);
WatchState read_watch(const std::map<std::string, std::string>& md, const std::string& prefix,
                      const std::string& origin);

}  // namespace modelc::rt
