// The ranges of the training settings, in one table. The train section
// (compiler/frontend/train_check.cc), modelrun's command line (--steps, --lr, ...) and the
// plan loader (runtime/session/plan_codec.cc) all check values through it, so all three
// refuse the same values with the same words: "'lr' must be a finite number greater than 0,
// got nan".
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "runtime/base/program.h"

namespace modelc::rt {

struct SettingRule {
  std::string_view key;     // as the train section spells it: "lr", "batch", "warmup"
  bool integer;             // an integer setting (a float value is refused)
  double lo, hi;            // the range, [lo, hi] or open where lo_open / hi_open
  bool lo_open, hi_open;
  std::string_view words;   // the range in words: "a positive integer"
  // In a TrainSettings (and so in a plan), 0 stands for "not given" (steps, epochs, clip,
  // validation, eval_every): the plan loader accepts it although the train section refuses it.
  bool zero_is_unset;
};

// The rule of setting `key`, or nullptr when it has none (a string setting, or not a setting).
const SettingRule* setting_rule(std::string_view key);

// What is wrong with `value` for setting `key`: "'lr' must be a finite number greater than 0,
// got nan", or nullopt when it is in range (or `key` has no rule).
std::optional<std::string> check_setting(std::string_view key, double value);

// The number as a person writes it: 5, 0.5, 1e-08, nan, inf, -inf (never "-nan", never 309
// digits).
std::string format_number(double value);

// The first setting of `t` out of its range, as check_setting words it, or nullopt. Unset
// values (0 where zero_is_unset) pass.
std::optional<std::string> check_train_settings(const TrainSettings& t);

// `batch` is the effective batch of one optimizer step, split into `accumulate` micro-batches
// of batch / accumulate examples (docs/language.md): what is wrong when they do not divide,
// or nullopt.
std::optional<std::string> check_batch_split(int64_t batch, int64_t accumulate);

}  // namespace modelc::rt
