// The train section as --emit=ir prints it.
#include "compiler/ir/train_config.h"

#include <fmt/format.h>

#include <type_traits>

namespace modelc {

std::string print_train_config(const TrainConfig& t) {
  std::string out = "train " + t.model + " {\n";
  auto call = [&](const char* key, const std::optional<TrainCall>& c) {
    if (!c) return;
    std::string args;
    for (const auto& [k, v] : c->args.items()) args += (args.empty() ? "" : ", ") + k + " = " + attr_str(v);
    out += fmt::format("  {} = {}({})\n", key, c->kind, args);
  };
  auto val = [&](const char* key, const auto& v) {
    if (!v) return;
    if constexpr (std::is_same_v<std::decay_t<decltype(*v)>, double>) out += fmt::format("  {} = {}\n", key, attr_str(*v));
    else out += fmt::format("  {} = {}\n", key, *v);
  };
  call("data", t.data);
  val("batch", t.batch);
  val("validation", t.validation);
  call("optimizer", t.optimizer);
  call("schedule", t.schedule);
  call("early_stopping", t.early_stopping);
  val("clip_grad_norm", t.clip_grad_norm);
  val("accumulate", t.accumulate);
  val("steps", t.steps);
  val("epochs", t.epochs);
  val("eval_every", t.eval_every);
  val("seed", t.seed);
  val("precision", t.precision);
  val("mem_budget", t.mem_budget);
  if (!t.freeze.empty()) {
    std::string list;
    for (const FreezePattern& f : t.freeze) list += fmt::format("{}\"{}\"", list.empty() ? "" : ", ", f.pattern);
    out += "  freeze = [" + list + "]\n";
  }
  for (const ParamGroup& g : t.param_groups) {
    out += fmt::format("  param_group(\"{}\"", g.pattern);
    if (g.lr_scale) out += ", lr_scale = " + attr_str(*g.lr_scale);
    if (g.weight_decay) out += ", weight_decay = " + attr_str(*g.weight_decay);
    out += ")\n";
  }
  return out + "}\n";
}

}  // namespace modelc
