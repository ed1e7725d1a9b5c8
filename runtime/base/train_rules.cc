#include "runtime/base/train_rules.h"

#include <fmt/format.h>

#include <cmath>
#include <limits>

namespace modelc::rt {

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// The optimizers' ranges are PyTorch's (torch.optim checks lr >= 0, momentum >= 0,
// 0 <= betas < 1, eps >= 0, weight_decay >= 0), but a learning rate of 0 trains nothing and
// is refused. RMSprop's alpha is held to [0, 1) as the betas are (torch checks alpha >= 0
// only; alpha = 1 never updates the average); Adagrad's, LinearLR's and OneCycleLR's as
// torch.optim's.
const SettingRule kRules[] = {
    {"batch", true, 1, kInf, false, true, "a positive integer", false},
    {"steps", true, 1, kInf, false, true, "a positive integer", true},
    {"epochs", true, 1, kInf, false, true, "a positive integer", true},
    {"accumulate", true, 1, kInf, false, true, "a positive integer", false},
    {"eval_every", true, 1, kInf, false, true, "a positive integer", true},
    {"seed", true, 0, kInf, false, true, "a non-negative integer", false},
    {"validation", false, 0, 1, true, true, "a number between 0 and 1", true},
    {"clip_grad_norm", false, 0, kInf, true, true, "a finite number greater than 0", true},
    {"lr", false, 0, kInf, true, true, "a finite number greater than 0", false},
    {"warmup", true, 0, kInf, false, true, "a non-negative integer", false},
    {"every", true, 1, kInf, false, true, "a positive integer", true},
    {"gamma", false, 0, kInf, true, true, "a finite number greater than 0", false},
    {"min_lr", false, 0, kInf, false, true, "a finite number, 0 or greater", false},
    {"momentum", false, 0, kInf, false, true, "a finite number, 0 or greater", false},
    {"beta1", false, 0, 1, false, true, "a number from 0 up to but not including 1", false},
    {"beta2", false, 0, 1, false, true, "a number from 0 up to but not including 1", false},
    {"eps", false, 0, kInf, false, true, "a finite number, 0 or greater", false},
    {"weight_decay", false, 0, kInf, false, true, "a finite number, 0 or greater", false},
    {"alpha", false, 0, 1, false, true, "a number from 0 up to but not including 1", false},
    {"lr_decay", false, 0, kInf, false, true, "a finite number, 0 or greater", false},
    {"initial_accumulator_value", false, 0, kInf, false, true, "a finite number, 0 or greater", false},
    {"end_factor", false, 0, 1, false, false, "a number from 0 to 1", false},
    {"power", false, 0, kInf, false, true, "a finite number, 0 or greater", false},
    // onecycle: max_lr 0 stands for the optimizer's lr.
    {"max_lr", false, 0, kInf, false, true, "a finite number, 0 or greater (0: the optimizer's lr)", false},
    {"pct_start", false, 0, 1, false, false, "a number from 0 to 1", false},
    {"div_factor", false, 0, kInf, true, true, "a finite number greater than 0", false},
    {"final_div_factor", false, 0, kInf, true, true, "a finite number greater than 0", false},
    // plateau (torch's ReduceLROnPlateau refuses factor >= 1) and early stopping.
    {"factor", false, 0, 1, true, true, "a number between 0 and 1 (both excluded)", false},
    {"patience", true, 0, kInf, false, true, "a non-negative integer", false},
    {"threshold", false, 0, kInf, false, true, "a finite number, 0 or greater", false},
    {"cooldown", true, 0, kInf, false, true, "a non-negative integer", false},
    {"min_delta", false, 0, kInf, false, true, "a finite number, 0 or greater", false},
    // adafactor: torch.optim.Adafactor's checks.
    {"beta2_decay", false, -kInf, 0, true, false, "a finite number, 0 or less", false},
    {"eps1", false, 0, kInf, false, true, "a finite number, 0 or greater (0: the dtype's machine epsilon)", false},
    {"eps2", false, 0, kInf, false, true, "a finite number, 0 or greater", false},
    {"d", false, 1, kInf, false, true, "a finite number, 1 or greater", false},
};

bool in_range(const SettingRule& r, double v) {
  if (std::isnan(v)) return false;
  if (r.integer && v != std::floor(v)) return false;
  const bool above = r.lo_open ? v > r.lo : v >= r.lo;
  const bool below = r.hi_open ? v < r.hi : v <= r.hi;
  return above && below;
}

}  // namespace

const SettingRule* setting_rule(std::string_view key) {
  for (const SettingRule& r : kRules)
    if (r.key == key) return &r;
  return nullptr;
}

std::string format_number(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  if (v == std::floor(v) && std::fabs(v) < 1e15) return fmt::format("{}", static_cast<int64_t>(v));
  return fmt::format("{:g}", v);
}

std::optional<std::string> check_setting(std::string_view key, double value) {
  const SettingRule* r = setting_rule(key);
  if (!r || in_range(*r, value)) return std::nullopt;
  return fmt::format("'{}' must be {}, got {}", key, r->words, format_number(value));
}

std::optional<std::string> check_train_settings(const TrainSettings& t) {
  const Schedule& s = t.schedule;
  const std::pair<std::string_view, double> values[] = {
      {"batch", static_cast<double>(t.batch)},           {"steps", static_cast<double>(t.steps)},
      {"epochs", static_cast<double>(t.epochs)},         {"accumulate", static_cast<double>(t.accumulate)},
      {"eval_every", static_cast<double>(t.eval_every)}, {"seed", static_cast<double>(t.seed)},
      {"validation", t.validation},                      {"clip_grad_norm", t.clip_grad_norm},
      {"lr", s.lr},                                      {"warmup", static_cast<double>(s.warmup)},
      {"every", static_cast<double>(s.every)},           {"gamma", s.gamma},
      {"min_lr", s.min_lr},                              {"end_factor", s.end_factor},
      {"power", s.power},                                {"pct_start", s.pct_start},
      {"div_factor", s.div_factor},                      {"final_div_factor", s.final_div_factor},
      {"factor", s.factor},                              {"cooldown", static_cast<double>(s.cooldown)},
      {"patience", static_cast<double>(s.watch.patience)}, {"threshold", s.watch.threshold},
      {"patience", static_cast<double>(t.early_stopping.patience)}, {"min_delta", t.early_stopping.threshold},
  };
  for (const auto& [key, v] : values) {
    if (v == 0 && setting_rule(key)->zero_is_unset) continue;
    if (auto e = check_setting(key, v)) return e;
  }
  return check_batch_split(t.batch, t.accumulate);
}

std::optional<std::string> check_batch_split(int64_t batch, int64_t accumulate) {
  if (accumulate <= 1 || batch % accumulate == 0) return std::nullopt;
  return fmt::format("'batch' ({}) must be a multiple of 'accumulate' ({}): each step's batch is split into {} "
                     "micro-batches of equal size",
                     batch, accumulate, accumulate);
}

}  // namespace modelc::rt
