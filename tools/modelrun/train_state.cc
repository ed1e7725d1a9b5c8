#include "tools/modelrun/train_state.h"

#include "tools/modelrun/divergence.h"

#include <fmt/format.h>

#include <optional>

#include "runtime/base/train_rules.h"

namespace modelrun {

namespace {

// --flag VALUE against setting `key`'s rule.
template <class T>
void check_flag(const char* flag, const char* key, const std::optional<T>& value) {
  if (!value) return;
  if (std::optional<std::string> e = rt::check_setting(key, static_cast<double>(*value)))
    throw UsageError(fmt::format("{}: {}", flag, *e));
}

}  // namespace

void check_options(const CommonOptions& c) {
  check_flag("--batch", "batch", c.batch);
  check_flag("--seed", "seed", c.seed);
  if (c.threads < 0) throw UsageError(fmt::format("--threads: must be a non-negative integer (0: one per core), got {}", c.threads));
}

void check_options(const TrainOptions& o) {
  check_options(o.common);
  check_flag("--steps", "steps", o.steps);
  check_flag("--epochs", "epochs", o.epochs);
  check_flag("--lr", "lr", o.lr);
  check_flag("--eval-every", "eval_every", o.eval_every);
  check_flag("--accumulate", "accumulate", o.accumulate);
}

void check_options(const BenchOptions& o) {
  check_options(o.common);
  check_flag("--steps", "steps", std::optional<int64_t>(o.steps));
  if (o.warmup < 0)
    throw UsageError(fmt::format("--warmup: must be a non-negative integer (untimed steps before the timed ones), got {}", o.warmup));
  if (o.top < 0) throw UsageError(fmt::format("--top: must be a non-negative integer (0: every row), got {}", o.top));
}

std::vector<rt::TensorSpec> persistent_specs(const rt::Session& s, bool with_state) {
  std::vector<rt::TensorSpec> out;
  for (const std::string& n : s.param_names()) {
    rt::HostTensor t = s.param(n);
    out.push_back({n, t.type, t.shape});
  }
  for (const std::string& n : s.buffer_names()) {
    rt::HostTensor t = s.buffer(n);
    out.push_back({n, t.type, t.shape});
  }
  if (with_state)
    for (const std::string& n : s.state_names()) {
      rt::HostTensor t = s.state(n);
      out.push_back({n, t.type, t.shape});
    }
  return out;
}

void load_model_tensors(rt::Session& s, const rt::Checkpoint& c) {
  for (const std::string& n : s.param_names()) s.set_param(n, *c.find(n));
  for (const std::string& n : s.buffer_names()) s.set_buffer(n, *c.find(n));
}

std::map<std::string, std::string> checkpoint_metadata(const rt::Session& s, const RunShape& run,
                                                       const rt::DataPosition& position) {
  std::map<std::string, std::string> md = {{"model", run.model},
                                           {"step", std::to_string(s.step())},
                                           {"seed", std::to_string(s.seed())},
                                           {"total_steps", std::to_string(run.total)}};
  rt::put_position(md, position);
  return md;
}

namespace {

// The data position must be where `step` steps of this run's batches leave the loader: a
// different batch size or data set, or edited metadata, would replay or skip examples.
void check_position(const rt::Checkpoint& c, int64_t step, const rt::DataPosition& pos, const RunShape& run) {
  int64_t at = 0;
  const bool overflow = __builtin_mul_overflow(pos.epoch, run.per_epoch, &at) || __builtin_add_overflow(at, pos.batch, &at);
  if (!overflow && pos.batch < run.per_epoch && at == step) return;
  throw rt::CheckpointError(fmt::format(
      "{}: metadata 'step' is {} but 'data.epoch' {} and 'data.batch' {} are not where {} steps leave this run's data "
      "({} batches per epoch: epoch {}, batch {}); the checkpoint was written with another batch size or data, or "
      "its metadata was edited",
      c.path, step, pos.epoch, pos.batch, step, run.per_epoch, step / run.per_epoch, step % run.per_epoch));
}

// A cosine (linear, polynomial, onecycle) schedule's curve depends on the run's length:
// resuming it into another length would follow another curve than either run, so it is
// refused.
void check_horizon(const rt::Checkpoint& c, const RunShape& run, bool quiet) {
  rt::Schedule kind;
  kind.kind = run.schedule;
  const bool by_length = kind.depends_on_length();
  if (!c.has("total_steps")) {
    if (by_length && !quiet)
      fmt::print(stderr, "note: {} does not record its run's length (an older modelrun wrote it); the {} schedule "
                 "continues as a run of {} steps\n", c.path, run.schedule, run.total);
    return;
  }
  const int64_t was = c.count("total_steps");
  if (was == run.total) return;
  if (by_length)
    throw rt::CheckpointError(fmt::format(
        "{}: written by a run of {} steps and this run has {}: the {} schedule's learning rate depends on the run's "
        "length, so the two would follow different curves (pass --steps {} to finish that run, or start a new one)",
        c.path, was, run.total, run.schedule, was));
  if (!quiet)
    fmt::print(stderr, "note: {} was written by a run of {} steps; this run goes on to {} (a {} schedule does not "
               "depend on the run's length)\n", c.path, was, run.total, run.schedule);
}

}  // namespace

rt::DataPosition resume_from(rt::Session& s, const std::string& path, const RunShape& run, bool quiet,
                             std::map<std::string, std::string>* metadata) {
  rt::Checkpoint c = rt::load_checkpoint(path);
  if (metadata) *metadata = c.metadata;
  rt::check_against(c, persistent_specs(s, true));
  if (c.text("model") != run.model)
    throw rt::CheckpointError(fmt::format("{}: a checkpoint of model '{}', not '{}'", path, c.text("model"), run.model));
  if (c.seed("seed") != s.seed())
    throw rt::CheckpointError(fmt::format("{}: written with seed {}, this run has seed {} (pass --seed {})", path,
                                          c.seed("seed"), s.seed(), c.seed("seed")));
  const int64_t step = c.count("step");
  const rt::DataPosition pos = rt::get_position(c.metadata, path);
  check_position(c, step, pos, run);
  if (step > run.total)
    throw rt::CheckpointError(fmt::format("{}: at step {}, past this run's {} steps: nothing to train (pass --steps N "
                                          "with N above {} to train on from it)", path, step, run.total, step));
  check_horizon(c, run, quiet);
  load_model_tensors(s, c);
  for (const std::string& n : s.state_names()) s.set_state(n, *c.find(n));
  if (const std::string bad = non_finite_params(s); !bad.empty())
    throw rt::CheckpointError(fmt::format("{}: parameters that are not finite: {}; resume from an earlier checkpoint "
                                          "(its run diverged before it was written, or the file was changed)", path, bad));
  s.set_step(step);
  if (!quiet) {
    if (step == run.total)
      fmt::print(stderr, "resumed from {} at step {}: the run's {} steps are all done; nothing to train, evaluating it\n",
                 path, step, run.total);
    else
      fmt::print(stderr, "resumed from {} at step {}: {} to go of {}\n", path, step, run.total - step, run.total);
  }
  return pos;
}

}  // namespace modelrun
