#include "tools/modelrun/watch.h"

#include <fmt/format.h>

#include <stdexcept>

#include "runtime/base/train_rules.h"
#include "runtime/session/checkpoint.h"

namespace modelrun {

namespace {

// The value of `metric` in evaluation `r` (accuracy as a fraction), or NaN when it has none.
double metric_of(const EvalResult& r, const std::string& metric) {
  if (metric == "loss") return r.loss;
  if (metric == "accuracy") return r.accuracy;
  for (const auto& [name, v] : r.metrics)
    if (name == metric) return v;
  return NAN;
}

std::string held_out(const std::string& metric) { return "the held-out " + metric; }

std::string value_str(const std::string& metric, double v) {
  return metric == "accuracy" ? fmt::format("{:.2f}%", 100 * v) : fmt::format("{:.4f}", v);
}

}  // namespace

Watches::Watches(const rt::TrainSettings& settings)
    : t(settings), plateau(rt::start_watch(settings.schedule.watch)), stopping(rt::start_watch(settings.early_stopping)) {}

void Watches::check(const rt::Program& p) {
  std::vector<std::string> names = {"loss"};
  const rt::Function* eval = p.function("eval");
  if (eval)
    for (const auto& out : eval->outputs)
      if (out.first == "logits") names.push_back("accuracy");
  for (const std::string& m : metric_names(p)) names.push_back(m);
  for (const rt::MetricWatch* w : {&p.train.schedule.watch, &p.train.early_stopping}) {
    if (!w->on()) continue;
    bool found = false;
    for (const std::string& n : names) found |= n == w->metric;
    if (!found) {
      std::string list;
      for (const std::string& n : names) list += (list.empty() ? "" : ", ") + n;
      throw std::runtime_error(fmt::format("model '{}' watches the held-out metric '{}', which its evaluation does not "
                                           "report (it reports {})",
                                           p.model, w->metric, list));
    }
  }
}

std::vector<std::string> Watches::observe(rt::Session& s, const EvalResult& r, int64_t step) {
  std::vector<std::string> lines;
  new_best = false;
  const rt::Schedule& sch = t.schedule;
  if (sch.watch.on()) {
    const double was = plateau.lr_factor;
    if (rt::plateau_step(sch, plateau, metric_of(r, sch.watch.metric), step)) {
      s.set_lr_factor(plateau.lr_factor);
      lines.push_back(fmt::format("{} has not improved on {} (step {}) in {} evaluations: the learning rate goes from "
                                  "{} to {}",
                                  held_out(sch.watch.metric), value_str(sch.watch.metric, plateau.best),
                                  plateau.best_step, sch.watch.patience + 1, rt::format_number(sch.lr * was),
                                  rt::format_number(sch.lr * plateau.lr_factor)));
    }
  }
  const rt::MetricWatch& es = t.early_stopping;
  if (es.on()) {
    stop = rt::early_stopping_step(es, stopping, metric_of(r, es.metric), step);
    new_best = stopping.best_step == step && stopping.bad == 0;
    if (stop) lines.push_back(stop_reason(step));
  }
  return lines;
}

std::string Watches::stop_reason(int64_t step) const {
  const rt::MetricWatch& es = t.early_stopping;
  const std::string best = stopping.best_step < 0 ? "no evaluation yet improved on anything (every value was NaN)"
                                                  : fmt::format("{} (step {})", value_str(es.metric, stopping.best),
                                                                stopping.best_step);
  return fmt::format("early stopping at step {}: {} has not improved on {} in {} evaluations (patience {})", step,
                     held_out(es.metric), best, stopping.bad, es.patience);
}

void Watches::put(std::map<std::string, std::string>& md) const {
  if (t.schedule.watch.on()) rt::put_watch(md, "plateau", plateau);
  if (t.early_stopping.on()) rt::put_watch(md, "early_stopping", stopping);
}

void Watches::read(rt::Session& s, const std::map<std::string, std::string>& md, const std::string& origin) {
  try {
    if (t.schedule.watch.on()) {
      plateau = rt::read_watch(md, "plateau", origin);
      s.set_lr_factor(plateau.lr_factor);
    }
    if (t.early_stopping.on()) {
      stopping = rt::read_watch(md, "early_stopping", origin);
      stop = stopping.bad > 0 && stopping.bad >= t.early_stopping.patience;
    }
  } catch (const rt::RuntimeError& e) {
    throw rt::CheckpointError(e.what());
  }
}

}  // namespace modelrun
