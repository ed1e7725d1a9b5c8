// modelrun's watches on the held-out metric (docs/language.md, "Watching a held-out
// metric"): the plateau schedule lowers the learning rate and early stopping ends the run,
// each deciding after every evaluation by the rules of runtime/base/metric_watch.h. Their
// state travels in the training checkpoint's metadata, so a resumed run decides as the
// uninterrupted one would.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "runtime/base/metric_watch.h"
#include "runtime/session/session.h"
#include "tools/modelrun/evaluate.h"

namespace modelrun {

namespace rt = modelc::rt;

struct Watches {
  explicit Watches(const rt::TrainSettings& t);

  // Throws std::runtime_error when a watched metric is not one program `p`'s evaluation
  // reports (a plan compiled elsewhere, or edited).
  static void check(const rt::Program& p);

  // After the evaluation `r` at step `step`: updates both watches, gives the session the
  // plateau's learning-rate factor, and returns the lines to print ("the held-out loss has
  // not improved ... : the learning rate is now 1e-4"). Sets `stop` when early stopping
  // ends the run, and `new_best` when the evaluation is early stopping's best so far.
  std::vector<std::string> observe(rt::Session& s, const EvalResult& r, int64_t step);

  // The state into a checkpoint's metadata, and back from a resumed one (also giving the
  // session its factor). read throws rt::CheckpointError naming `origin` and the key.
  void put(std::map<std::string, std::string>& md) const;
  void read(rt::Session& s, const std::map<std::string, std::string>& md, const std::string& origin);

  // "early stopping at step 400: the held-out loss has not improved on 0.3012 (step 250) in 5 evaluations"
  std::string stop_reason(int64_t step) const;

  const rt::TrainSettings& t;
  rt::WatchState plateau, stopping;
  bool stop = false, new_best = false;
};

}  // namespace modelrun
