#include "compiler/frontend/train_check.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "compiler/frontend/sema_impl.h"
#include "runtime/base/bytes.h"
#include "runtime/base/train_rules.h"

namespace modelc {

namespace {

struct Vocab {
  const char* name;
  const char* signature;
};

// Parameter initializers. fan_in/fan_out of a [I, O] matrix are I and O; of a conv
// weight [O, I, kh, kw] they are I*kh*kw and O*kh*kw.
const Vocab kInitializers[] = {
    {"zeros", ""},
    {"ones", ""},
    {"constant", "value: float"},
    {"normal", "mean: float = 0.0, std: float = 1.0"},
    {"uniform", "low: float = 0.0, high: float = 1.0"},
    {"kaiming_normal", "gain: float = 1.4142135623730951, mode: str = \"fan_in\""},
    {"kaiming_uniform", "gain: float = 1.4142135623730951, mode: str = \"fan_in\""},
    {"xavier_normal", "gain: float = 1.0"},
    {"xavier_uniform", "gain: float = 1.0"},
};

const Vocab kData[] = {
    {"idx", "images: str, labels: str, test_images: str = \"\", test_labels: str = \"\", normalize: bool = true"},
    {"csv", "path: str, label_column: int = -1, header: bool = false, normalize: bool = true"},
    {"text", "path: str, context: int"},
    {"tokens", "path: str, context: int, vocab: int = 65536"},
};
const Vocab kOptimizers[] = {
    {"sgd", "lr: float, momentum: float = 0.0, nesterov: bool = false, weight_decay: float = 0.0"},
    {"adam", "lr: float = 0.001, beta1: float = 0.9, beta2: float = 0.999, eps: float = 1e-8, weight_decay: float = 0.0"},
    {"adamw", "lr: float = 0.001, beta1: float = 0.9, beta2: float = 0.999, eps: float = 1e-8, weight_decay: float = 0.01"},
    {"rmsprop", "lr: float = 0.01, alpha: float = 0.99, eps: float = 1e-8, weight_decay: float = 0.0, momentum: float = 0.0, "
                "centered: bool = false"},
    {"adagrad", "lr: float = 0.01, lr_decay: float = 0.0, weight_decay: float = 0.0, initial_accumulator_value: float = 0.0, "
                "eps: float = 1e-10"},
    {"lion", "lr: float = 0.0001, beta1: float = 0.9, beta2: float = 0.99, weight_decay: float = 0.0"},
    // eps1 0: the machine epsilon of the param's dtype (torch's eps1 None).
    {"adafactor", "lr: float = 0.01, beta2_decay: float = -0.8, eps1: float = 0.0, eps2: float = 0.001, d: float = 1.0, "
                  "weight_decay: float = 0.0"},
};
const Vocab kSchedules[] = {
    {"constant", ""},
    {"step", "every: int, gamma: float = 0.1"},
    {"cosine", "warmup: int = 0, min_lr: float = 0.0"},
    {"linear", "warmup: int = 0, end_factor: float = 0.0"},
    {"exponential", "gamma: float, warmup: int = 0"},
    {"polynomial", "power: float = 1.0, warmup: int = 0"},
    // max_lr 0: the optimizer's lr.
    {"onecycle", "max_lr: float = 0.0, pct_start: float = 0.3, div_factor: float = 25.0, final_div_factor: float = 10000.0"},
    // ReduceLROnPlateau on a held-out metric (runtime/base/metric_watch.h); mode auto: max
    // for accuracy, min for the rest.
    {"plateau", "factor: float = 0.1, patience: int = 10, threshold: float = 0.0001, threshold_mode: str = \"rel\", "
                "cooldown: int = 0, min_lr: float = 0.0, metric: str = \"loss\", mode: str = \"auto\", warmup: int = 0"},
};
const Vocab kEarlyStopping[] = {
    {"early_stopping", "metric: str = \"loss\", patience: int = 5, min_delta: float = 0.0, mode: str = \"auto\""},
};

// The data sources checked by check_array_source rather than by a signature.
const char* const kArraySources[] = {"npy", "npz", "safetensors"};

template <size_t N>
std::string names_of(const Vocab (&v)[N]) {
  std::vector<std::string> all;
  for (const Vocab& c : v) all.push_back(c.name);
  if (&v[0] == &kData[0]) all.insert(all.end(), std::begin(kArraySources), std::end(kArraySources));
  std::string s;
  for (size_t i = 0; i < all.size(); ++i) s += (i ? (i + 1 == all.size() ? " or " : ", ") : "") + all[i];
  return s;
}

// A call to one of a fixed set of functions whose arguments are compile-time values.
template <size_t N>
bool check_call(Sema& s, const ast::Expr& e, const Vocab (&vocab)[N], const char* what, std::string& kind, Attrs& args) {
  std::string want = fmt::format("{} ({})", what, names_of(vocab));
  if (e.kind != ast::Expr::Kind::Call) {
    s.diags_.error(e.loc, fmt::format("expected {}, e.g. {}(...)", want, vocab[0].name));
    return false;
  }
  const Vocab* v = nullptr;
  std::vector<std::string> names;
  for (const Vocab& c : vocab) {
    names.push_back(c.name);
    if (e.text == c.name) v = &c;
  }
  if (&vocab[0] == &kData[0]) names.insert(names.end(), std::begin(kArraySources), std::end(kArraySources));
  if (!v) {
    s.diags_.error(e.loc, fmt::format("unknown {} '{}'{}; expected {}", what, e.text, s.suggest(e.text, names), names_of(vocab)));
    return false;
  }
  std::vector<CallArg> call_args;
  for (const auto& a : e.items) call_args.push_back({s.eval(*a), a->loc, {}, {}});
  for (const auto& k : e.keywords) call_args.push_back({s.eval(*k.value), k.value->loc, k.name, k.loc});
  for (const CallArg& a : call_args)
    if (a.value.is_error()) return false;
  kind = v->name;
  if (!s.bind_attrs(v->name, parse_signature(v->signature), call_args, e.loc, args)) return false;
  // The optimizer's and the schedule's numbers in the ranges of train_rules.h.
  bool ok = true;
  for (const auto& [name, value] : args.items()) {
    const double* f = std::get_if<double>(&value);
    const int64_t* i = std::get_if<int64_t>(&value);
    std::optional<std::string> problem =
        f ? rt::check_setting(name, *f) : i ? rt::check_setting(name, static_cast<double>(*i)) : std::nullopt;
    if (!problem) continue;
    SourceLoc at = e.loc;
    for (const auto& k : e.keywords)
      if (k.name == name) at = k.value->loc;
    s.diags_.error(at, fmt::format("{}: {}", kind, *problem));
    ok = false;
  }
  return ok;
}

// The metrics an evaluation reports (tools/modelrun/evaluate.h): the loss, the accuracy of
// a model with an output `logits`, and every other floating-point scalar output.
std::vector<std::string> reported_metrics(const Graph& g) {
  std::vector<std::string> names = {"loss"};
  for (const Graph::Output& o : g.outputs)
    if (o.name == "logits") names.push_back("accuracy");
  for (const Graph::Output& o : g.outputs) {
    const TensorType& t = g.type(o.value);
    if (o.name != "loss" && t.rank() == 0 && is_float(t.dtype)) names.push_back(o.name);
  }
  return names;
}

// The string arguments of a watch (plateau, early_stopping): a mode, a threshold mode and a
// metric the evaluation reports, each refused at its own argument.
bool check_watch(Sema& s, const ast::Expr& e, const TrainCall& c) {
  auto at = [&](const char* name) {
    for (const auto& k : e.keywords)
      if (k.name == name) return k.value->loc;
    return e.loc;
  };
  bool ok = true;
  auto one_of = [&](const char* name, std::vector<std::string> allowed, const char* words) {
    if (!c.args.has(name)) return;
    const std::string v = c.args.s(name);
    for (const std::string& a : allowed)
      if (v == a) return;
    std::string list;
    for (size_t i = 0; i < allowed.size(); ++i) list += (i ? (i + 1 == allowed.size() ? " or " : ", ") : "") + allowed[i];
    const char* why = v == "accuracy" ? " (the accuracy is reported for a model with an output called logits)" : "";
    s.diags_.error(at(name), fmt::format("{}: '{}' must be {}{}, got \"{}\"{}{}", c.kind, name, words, list, v,
                                         s.suggest(v, allowed), why));
    ok = false;
  };
  one_of("mode", {"min", "max", "auto"}, "");
  one_of("threshold_mode", {"rel", "abs"}, "");
  one_of("metric", reported_metrics(*s.g_), "a metric the evaluation reports: ");
  return ok;
}

}  // namespace

bool check_initializer(Sema& s, const ast::Expr& init, const TensorType& t, Attrs& out) {
  std::string kind;
  Attrs args;
  if (!check_call(s, init, kInitializers, "initializer", kind, args)) return false;
  out.set("init", kind);
  for (const auto& [k, v] : args.items()) out.set(k, v);
  if (kind.starts_with("kaiming") || kind.starts_with("xavier")) {
    if (t.rank() == 0) {
      s.diags_.error(init.loc, fmt::format("{} needs a parameter of rank 1 or more, got {}", kind, t.str()));
      return false;
    }
    int64_t receptive = 1;
    for (int k = 2; k < t.rank(); ++k) receptive *= t.shape[static_cast<size_t>(k)].const_value();
    int64_t d0 = t.shape[0].const_value(), d1 = t.rank() > 1 ? t.shape[1].const_value() : d0;
    // A matrix [I, O] is used as x @ w; a conv weight is [O, I, kh, kw].
    int64_t fan_in = t.rank() <= 2 ? d0 : d1 * receptive;
    int64_t fan_out = t.rank() <= 2 ? d1 : d0 * receptive;
    out.set("fan_in", fan_in);
    out.set("fan_out", fan_out);
    if (kind.starts_with("kaiming")) {
      const std::string& mode = args.s("mode");
      if (mode != "fan_in" && mode != "fan_out") {
        s.diags_.error(init.loc, fmt::format("{} mode must be \"fan_in\" or \"fan_out\", got \"{}\"", kind, mode));
        return false;
      }
    }
  }
  if (kind == "normal" && args.f("std") < 0) {
    s.diags_.error(init.loc, fmt::format("normal std must not be negative, got {}", args.f("std")));
    return false;
  }
  if (kind == "uniform" && !(args.f("low") <= args.f("high"))) {
    s.diags_.error(init.loc, fmt::format("uniform needs low <= high, got {} and {}", args.f("low"), args.f("high")));
    return false;
  }
  return true;
}

namespace {

// `freeze = ["pattern", ...]`.
bool check_freeze(Sema& s, const ast::Expr& v, TrainConfig& out) {
  bool ok = v.kind == ast::Expr::Kind::List;
  for (const auto& item : v.items) {
    if (item->kind != ast::Expr::Kind::Str || item->text.empty()) {
      ok = false;
      break;
    }
    out.freeze.push_back({item->text, item->loc});
  }
  if (!ok)
    s.diags_.error(v.loc, "'freeze' must be a list of parameter name patterns, e.g. [\"embed.*\", \"conv.0.w\"]");
  return ok;
}

// `param_groups = [param_group("pattern", lr_scale = X, weight_decay = Y), ...]`.
bool check_param_groups(Sema& s, const ast::Expr& v, TrainConfig& out) {
  const char* form = "'param_groups' must be a list of param_group(\"PATTERN\", lr_scale = X, weight_decay = Y)";
  if (v.kind != ast::Expr::Kind::List) {
    s.diags_.error(v.loc, form);
    return false;
  }
  for (const auto& item : v.items) {
    if (item->kind != ast::Expr::Kind::Call || item->text != "param_group" || item->items.size() != 1 ||
        item->items[0]->kind != ast::Expr::Kind::Str || item->items[0]->text.empty()) {
      s.diags_.error(item->loc, form);
      return false;
    }
    ParamGroup g{item->items[0]->text, {}, {}, item->loc};
    for (const ast::KeywordArg& k : item->keywords) {
      SVal x = s.eval(*k.value);
      if (x.is_error()) return false;
      const bool number = x.kind == SVal::Kind::Float || (x.kind == SVal::Kind::Int && x.i.is_const());
      const bool scale = k.name == "lr_scale", decay = k.name == "weight_decay";
      if (!scale && !decay) {
        s.diags_.error(k.value->loc, fmt::format("param_group has no setting '{}' (lr_scale, weight_decay)", k.name));
        return false;
      }
      if (!number || !(x.number() >= 0) || !std::isfinite(x.number())) {
        s.diags_.error(k.value->loc, fmt::format("param_group {} must be a finite number >= 0, got {}", k.name,
                                                 s.describe(x)));
        return false;
      }
      (scale ? g.lr_scale : g.weight_decay) = x.number();
    }
    out.param_groups.push_back(std::move(g));
  }
  return true;
}

}  // namespace

namespace {

bool is_array_source(const std::string& kind) {
  return std::find(std::begin(kArraySources), std::end(kArraySources), kind) != std::end(kArraySources);
}

// `npy(x = "x.npy", y = "y.npy")`: every input of the model bound by name to a .npy file;
// `npz("d.npz", test = "t.npz", x = "images")` and `safetensors(...)`: one file of arrays
// (and a held-out one), each input reading the array of its own name unless a keyword names
// another. Bindings are stored as arguments "input.NAME" (rt::DataSpec).
bool check_array_source(Sema& s, const ast::Expr& e, std::optional<TrainCall>& dst) {
  TrainCall c;
  c.kind = e.text;
  c.loc = e.loc;
  const bool npy = c.kind == "npy";
  std::vector<std::string> inputs;
  for (NodeId id : s.g_->inputs) inputs.push_back(s.g_->nodes[id].name);
  auto str = [&](const ast::Expr& v, const std::string& what) -> std::optional<std::string> {
    if (v.kind == ast::Expr::Kind::Str && !v.text.empty()) return v.text;
    s.diags_.error(v.loc, fmt::format("{}(): {} must be a non-empty string", c.kind, what));
    return std::nullopt;
  };
  bool ok = true;
  if (npy ? !e.items.empty() : e.items.size() != 1) {
    s.diags_.error(e.loc, npy ? "npy() binds inputs by name: npy(x = \"x.npy\", y = \"y.npy\"), one .npy file per input"
                              : fmt::format("{}() takes one file: {}(\"data.{}\", test = \"held-out.{}\", INPUT = \"ARRAY\")",
                                            c.kind, c.kind, c.kind, c.kind));
    return false;
  }
  if (!npy) {
    auto path = str(*e.items[0], "the file");
    if (!path) return false;
    c.args.set("path", *path);
    c.args.set("test", std::string());
  }
  for (const ast::KeywordArg& k : e.keywords) {
    if (!npy && k.name == "test") {  // "" (the default): no held-out file
      const bool empty = k.value->kind == ast::Expr::Kind::Str && k.value->text.empty();
      auto t = empty ? std::optional<std::string>("") : str(*k.value, "'test' (the held-out file)");
      ok &= t.has_value();
      if (t) c.args.set("test", *t);
      continue;
    }
    if (std::find(inputs.begin(), inputs.end(), k.name) == inputs.end()) {
      s.diags_.error(k.loc, fmt::format("{}(): model '{}' has no input '{}'{}", c.kind, s.g_->name, k.name,
                                        s.suggest(k.name, inputs)));
      ok = false;
      continue;
    }
    auto v = str(*k.value, fmt::format("the {} of input '{}'", npy ? "file" : "array name", k.name));
    ok &= v.has_value();
    if (v) c.args.set("input." + k.name, *v);
  }
  for (const std::string& in : inputs) {
    if (c.args.has("input." + in)) continue;
    if (npy) {
      s.diags_.error(e.loc, fmt::format("npy(): model input '{}' is bound to no file (add {} = \"{}.npy\")", in, in, in));
      ok = false;
    } else {
      c.args.set("input." + in, in);  // the array of the input's own name
    }
  }
  if (ok) dst = std::move(c);
  return ok;
}

}  // namespace

// Long by design: one check per train-section key, in the order docs/language.md lists them.
bool check_train(Sema& s, const ast::Train& t, TrainConfig& out) {
  out.model = t.name;
  out.loc = t.loc;
  static const char* const kKeys[] = {"data", "batch", "optimizer", "schedule", "precision", "clip_grad_norm",
                                      "steps", "epochs", "seed", "accumulate", "eval_every", "validation",
                                      "mem_budget", "freeze", "param_groups", "early_stopping"};
  std::map<std::string, SourceLoc> seen;
  bool ok = true;
  for (const ast::TrainEntry& e : t.entries) {
    if (auto it = seen.find(e.key); it != seen.end()) {
      s.diags_.error(e.loc, fmt::format("train setting '{}' is given twice", e.key));
      s.diags_.note(it->second, "first given here");
      ok = false;
      continue;
    }
    seen[e.key] = e.loc;
    auto call = [&](auto& vocab, const char* what, std::optional<TrainCall>& dst) {
      TrainCall c;
      c.loc = e.value->loc;
      if (!check_call(s, *e.value, vocab, what, c.kind, c.args)) return false;
      dst = std::move(c);
      return true;
    };
    // A number in the range train_rules.h gives `e.key`: the words the command line and the
    // plan loader use too.
    auto ranged = [&](auto& dst) {
      const rt::SettingRule& rule = *rt::setting_rule(e.key);
      SVal v = s.eval(*e.value);
      if (v.is_error()) return false;
      const bool is_number = (v.kind == SVal::Kind::Int && v.i.is_const()) || (!rule.integer && v.kind == SVal::Kind::Float);
      std::optional<std::string> problem = is_number ? rt::check_setting(e.key, v.number()) : std::nullopt;
      if (!is_number) problem = fmt::format("'{}' must be {}, got {}", e.key, rule.words, s.describe(v));
      if (problem) {
        s.diags_.error(e.value->loc, *problem);
        return false;
      }
      using T = typename std::remove_reference_t<decltype(dst)>::value_type;
      if constexpr (std::is_integral_v<T>) dst = v.i.const_value();
      else dst = v.number();
      return true;
    };
    const std::string& k = e.key;
    if (k == "data") {
      if (e.value->kind == ast::Expr::Kind::Call && is_array_source(e.value->text)) {
        ok &= check_array_source(s, *e.value, out.data);
        continue;
      }
      ok &= call(kData, "data source", out.data);
      if (out.data && out.data->kind == "idx" &&
          out.data->args.s("test_images").empty() != out.data->args.s("test_labels").empty()) {
        s.diags_.error(e.value->loc, "idx needs both test_images and test_labels, or neither");
        ok = false;
      }
    }
    else if (k == "optimizer") ok &= call(kOptimizers, "optimizer", out.optimizer);
    else if (k == "schedule") {
      ok &= call(kSchedules, "learning-rate schedule", out.schedule) &&
            (out.schedule->kind != "plateau" || check_watch(s, *e.value, *out.schedule));
    } else if (k == "early_stopping") {
      ok &= call(kEarlyStopping, "early stopping", out.early_stopping) && check_watch(s, *e.value, *out.early_stopping);
    }
    else if (k == "batch") ok &= ranged(out.batch);
    else if (k == "steps") ok &= ranged(out.steps);
    else if (k == "epochs") ok &= ranged(out.epochs);
    else if (k == "seed") ok &= ranged(out.seed);
    else if (k == "accumulate") ok &= ranged(out.accumulate);
    else if (k == "eval_every") ok &= ranged(out.eval_every);
    else if (k == "clip_grad_norm") ok &= ranged(out.clip_grad_norm);
    else if (k == "validation") ok &= ranged(out.validation);
    else if (k == "mem_budget") {
      const ast::Expr& v = *e.value;
      std::optional<int64_t> bytes;
      if (v.kind == ast::Expr::Kind::Str) {
        bytes = parse_bytes(v.text);
      } else {
        SVal n = s.eval(v);
        if (n.is_error()) {
          ok = false;
          continue;
        }
        if (n.kind == SVal::Kind::Int && n.i.is_const()) bytes = n.i.const_value();
      }
      if (!bytes || *bytes <= 0) {
        s.diags_.error(v.loc, "'mem_budget' must be a positive size such as \"8GiB\", \"512MiB\" or a number of bytes");
        ok = false;
      } else {
        out.mem_budget = bytes;
      }
    } else if (k == "freeze") {
      ok &= check_freeze(s, *e.value, out);
    } else if (k == "param_groups") {
      ok &= check_param_groups(s, *e.value, out);
    } else if (k == "precision") {
      const ast::Expr& v = *e.value;
      std::string p = v.kind == ast::Expr::Kind::Name ? v.text : v.kind == ast::Expr::Kind::Str ? v.text : "";
      if (p != "fp32" && p != "bf16" && p != "fp16") {
        s.diags_.error(v.loc, "'precision' must be fp32, bf16 or fp16");
        ok = false;
      } else {
        out.precision = p;
      }
    } else {
      std::vector<std::string> keys(std::begin(kKeys), std::end(kKeys));
      s.diags_.error(e.loc, fmt::format("unknown train setting '{}'{}", k, s.suggest(k, keys)));
      ok = false;
    }
  }
  // `batch` is the effective batch of one optimizer step, split into `accumulate`
  // micro-batches of batch/accumulate examples (docs/language.md): they must divide.
  if (ok && out.accumulate) {
    if (auto e = rt::check_batch_split(out.batch.value_or(rt::TrainSettings{}.batch), *out.accumulate)) {
      s.diags_.error(seen.at("accumulate"), *e);
      if (auto b = seen.find("batch"); b != seen.end()) s.diags_.note(b->second, "the batch is set here");
      ok = false;
    }
  }
  return ok;
}

}  // namespace modelc
