#include "runtime/base/metric_watch.h"

#include <fmt/format.h>

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <limits>

#include "runtime/base/error.h"

namespace modelc::rt {

bool improves(const MetricWatch& w, double value, double best) {
  if (std::isnan(value)) return false;
  if (w.maximize) return w.relative ? value > best * (1 + w.threshold) : value > best + w.threshold;
  return w.relative ? value < best * (1 - w.threshold) : value < best - w.threshold;
}

WatchState start_watch(const MetricWatch& w) {
  WatchState s;
  s.best = w.maximize ? -std::numeric_limits<double>::infinity() : std::numeric_limits<double>::infinity();
  return s;
}

namespace {

// Counts an evaluation: a new best, or one more without an improvement.
void count(const MetricWatch& w, WatchState& state, double value, int64_t step) {
  if (improves(w, value, state.best)) {
    state.best = value, state.best_step = step, state.bad = 0;
  } else {
    ++state.bad;
  }
}

}  // namespace

bool plateau_step(const Schedule& s, WatchState& state, double value, int64_t step) {
  count(s.watch, state, value, step);
  if (state.cooldown > 0) --state.cooldown, state.bad = 0;
  if (state.bad <= s.watch.patience) return false;
  state.cooldown = s.cooldown, state.bad = 0;
  const double old_lr = s.lr * state.lr_factor, new_lr = std::max(old_lr * s.factor, s.min_lr);
  if (old_lr - new_lr <= 1e-8) return false;
  state.lr_factor = new_lr / s.lr;
  return true;
}

bool early_stopping_step(const MetricWatch& w, WatchState& state, double value, int64_t step) {
  count(w, state, value, step);
  return state.bad >= w.patience && state.bad > 0;
}

void put_watch(std::map<std::string, std::string>& md, const std::string& prefix, const WatchState& state) {
  // {} prints the shortest text that reads back as the same double (inf included).
  md[prefix + ".best"] = fmt::format("{}", state.best);
  md[prefix + ".best_step"] = std::to_string(state.best_step);
  md[prefix + ".bad"] = std::to_string(state.bad);
  md[prefix + ".cooldown"] = std::to_string(state.cooldown);
  md[prefix + ".lr_factor"] = fmt::format("{}", state.lr_factor);
}

WatchState read_watch(const std::map<std::string, std::string>& md, const std::string& prefix,
                      const std::string& origin) {
  auto number = [&](const char* field) {
    const std::string key = prefix + "." + field;
    auto it = md.find(key);
    if (it == md.end())
      throw RuntimeError(fmt::format("{}: metadata '{}' is missing (the checkpoint was written by a run that did not "
                                     "watch a held-out metric this way, or an older modelrun)",
                                     origin, key));
    const char* text = it->second.c_str();
    char* end = nullptr;
    errno = 0;
    const double v = std::strtod(text, &end);
    if (it->second.empty() || *end != '\0' || errno == ERANGE || std::isnan(v))
      throw RuntimeError(fmt::format("{}: metadata '{}' is '{}', not a number", origin, key, it->second));
    return v;
  };
  auto whole = [&](const char* field, double lo) {
    const double v = number(field);
    if (v != std::floor(v) || v < lo || v > 9e15)
      throw RuntimeError(fmt::format("{}: metadata '{}.{}' is {}, not a whole number of at least {}", origin, prefix,
                                     field, md.at(prefix + "." + field), lo));
    return static_cast<int64_t>(v);
  };
  WatchState s;
  s.best = number("best");
  s.best_step = whole("best_step", -1);
  s.bad = whole("bad", 0);
  s.cooldown = whole("cooldown", 0);
  s.lr_factor = number("lr_factor");
  if (!(s.lr_factor > 0) || std::isinf(s.lr_factor))
    throw RuntimeError(fmt::format("{}: metadata '{}.lr_factor' is {}, not a factor greater than 0", origin, prefix,
                                   md.at(prefix + ".lr_factor")));
  return s;
}

}  // namespace modelc::rt
