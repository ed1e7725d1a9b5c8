#include "compiler/passes/optimizer_args.h"

#include <fmt/format.h>

#include <algorithm>
#include <vector>

#include "compiler/support/diagnostics.h"

namespace modelc {

namespace {

struct Known {
  const char* kind;
  std::vector<std::string> args;
};

const Known kOptimizers[] = {
    {"sgd", {"lr", "momentum", "nesterov", "weight_decay"}},
    {"adam", {"lr", "beta1", "beta2", "eps", "weight_decay"}},
    {"adamw", {"lr", "beta1", "beta2", "eps", "weight_decay"}},
    {"rmsprop", {"lr", "alpha", "eps", "weight_decay", "momentum", "centered"}},
    {"adagrad", {"lr", "lr_decay", "weight_decay", "initial_accumulator_value", "eps"}},
    {"lion", {"lr", "beta1", "beta2", "weight_decay"}},
    {"adafactor", {"lr", "beta2_decay", "eps1", "eps2", "d", "weight_decay"}},
};

// torch.optim's defaults where they differ from OptimizerArgs' own.
OptimizerArgs defaults(const std::string& kind) {
  OptimizerArgs a;
  a.kind = kind;
  if (kind == "adamw") a.weight_decay = 0.01;
  if (kind == "adagrad") a.eps = 1e-10;
  if (kind == "lion") a.beta2 = 0.99;
  return a;
}

// PyTorch's own argument checks (torch.optim raises ValueError on each; alpha as the betas).
void check(const OptimizerArgs& a) {
  const std::string& k = a.kind;
  auto unit = [&](const char* name, double v) {
    if (!(v >= 0 && v < 1)) throw UserError(fmt::format("{} {} must be in [0, 1), got {}", k, name, v));
  };
  auto non_negative = [&](const char* name, double v) {
    if (!(v >= 0)) throw UserError(fmt::format("{} {} must be >= 0, got {}", k, name, v));
  };
  non_negative("weight_decay", a.weight_decay);
  non_negative("momentum", a.momentum);
  if (a.nesterov && a.momentum == 0) throw UserError("sgd with nesterov = true needs a momentum > 0");
  unit("beta1", a.beta1);
  unit("beta2", a.beta2);
  unit("alpha", a.alpha);
  non_negative("eps", a.eps);
  non_negative("lr_decay", a.lr_decay);
  non_negative("initial_accumulator_value", a.initial_accumulator_value);
  if (!(a.beta2_decay <= 0)) throw UserError(fmt::format("{} beta2_decay must be <= 0, got {}", k, a.beta2_decay));
  non_negative("eps1", a.eps1);
  non_negative("eps2", a.eps2);
  if (!(a.d >= 1)) throw UserError(fmt::format("{} d must be >= 1, got {}", k, a.d));
}

}  // namespace

OptimizerArgs read_optimizer(const std::string& kind, const Attrs& args) {
  const Known* known = nullptr;
  for (const Known& o : kOptimizers)
    if (kind == o.kind) known = &o;
  if (!known)
    throw UserError(fmt::format("unknown optimizer '{}'; expected sgd, adam, adamw, rmsprop, adagrad, lion or adafactor", kind));
  OptimizerArgs a = defaults(kind);
  for (const auto& [name, v] : args.items())
    if (std::find(known->args.begin(), known->args.end(), name) == known->args.end())
      throw UserError(fmt::format("{} has no argument '{}'", kind, name));
  auto number = [&](const std::string& name, double& dst) {
    const AttrValue* v = args.find(name);
    if (!v) return;
    if (const double* d = std::get_if<double>(v)) dst = *d;
    else if (const int64_t* i = std::get_if<int64_t>(v)) dst = static_cast<double>(*i);
    else throw UserError(fmt::format("{} argument '{}' must be a number, got {}", kind, name, attr_str(*v)));
  };
  auto flag = [&](const std::string& name, bool& dst) {
    const AttrValue* v = args.find(name);
    if (!v) return;
    const bool* b = std::get_if<bool>(v);
    if (!b) throw UserError(fmt::format("{} argument '{}' must be true or false, got {}", kind, name, attr_str(*v)));
    dst = *b;
  };
  double lr = 0;
  number("lr", lr);  // checked only: the step's value is fed (`$lr`, from the schedule)
  if (!(lr >= 0)) throw UserError(fmt::format("{} lr must be >= 0, got {}", kind, lr));
  number("weight_decay", a.weight_decay);
  number("momentum", a.momentum);
  number("beta1", a.beta1);
  number("beta2", a.beta2);
  number("eps", a.eps);
  number("alpha", a.alpha);
  number("lr_decay", a.lr_decay);
  number("initial_accumulator_value", a.initial_accumulator_value);
  number("beta2_decay", a.beta2_decay);
  number("eps1", a.eps1);
  number("eps2", a.eps2);
  number("d", a.d);
  flag("nesterov", a.nesterov);
  flag("centered", a.centered);
  check(a);
  return a;
}

}  // namespace modelc
