#include "tools/modelrun/commands.h"

#include <charconv>
#include <cmath>
#include <deque>
#include <filesystem>
#include <fmt/format.h>
#include <iostream>
#include <map>
#include <unistd.h>

#include "compiler/pipeline.h"
#include "compiler/lowered/schedule.h"
#include "runtime/base/bytes.h"
#include "runtime/base/train_rules.h"
#include "runtime/session/checkpoint.h"
#include "runtime/device/cuda/device.h"
#include "runtime/device/cuda/driver.h"
#include "runtime/session/data/dataset.h"
#include "runtime/session/data/loader.h"
#include "runtime/session/plan.h"
#include "runtime/session/session.h"
#include "tools/modelrun/divergence.h"
#include "tools/modelrun/evaluate.h"
#include "tools/modelrun/watch.h"
#include "tools/modelrun/init_from.h"
#include "tools/modelrun/profile_table.h"
#include "tools/modelrun/progress.h"
#include "tools/modelrun/run_header.h"
#include "tools/modelrun/fusion_bench.h"
#include "tools/modelrun/train_state.h"

namespace modelrun {

namespace fs = std::filesystem;
using namespace modelc;

namespace {

// An error already explained to the user (diagnostics printed): exit status 1.
struct Reported {};

struct Loaded {
  std::shared_ptr<rt::Program> program;
  std::string base_dir;  // the .model or .plan file's directory: data paths are relative to it
  std::string features, labels;          // the model's two inputs the data feeds, in order
  std::vector<int64_t> example_shape;    // of one example of `features`
};

// A .plan file (its suffix, or the plan magic whatever the suffix) is loaded as compiled;
// anything else is compiled from source.
bool is_plan(const std::string& file) { return fs::path(file).extension() == ".plan" || rt::is_plan_file(file); }

// The GPU target to compile PTX for: the device's, when --device resolves to a CUDA device
// (the newest LLVM's NVPTX knows, sm_90, for a newer one: the driver JIT-compiles PTX
// forward), else "" (no GPU code; the session runs on the CPU and says why). An explicit
// --device cuda that cannot be used is an error here, before compiling.
std::string gpu_target(const CommonOptions& c) {
  const rt::cuda::DeviceSpec spec = rt::cuda::parse_device(c.device);
  if (spec.kind == rt::cuda::DeviceSpec::Kind::Cpu) return "";
  const rt::cuda::DeviceChoice choice = rt::cuda::choose_device(spec, rt::cuda::Driver::instance());
  if (!choice.cuda) return "";
  const int cc = choice.device->cc_major * 10 + choice.device->cc_minor;
  for (int sm : {90, 89, 87, 86, 80, 75})
    if (cc >= sm) return fmt::format("sm_{}", sm);
  throw std::runtime_error(fmt::format("{} is too old: modelc's GPU code needs sm_75 or later", choice.device->str()));
}

std::shared_ptr<rt::Program> compile_model(const CommonOptions& c, bool train) {
  CompileOptions opts;
  opts.model = c.model;
  for (const std::string& d : c.defines) {
    auto eq = d.find('=');
    if (eq == std::string::npos || eq == 0)
      throw std::runtime_error(fmt::format("-D expects NAME=VALUE, got '{}'", d));
    opts.defines.emplace_back(d.substr(0, eq), d.substr(eq + 1));
  }
  Compilation comp(opts);
  ProgramOptions po;
  po.train = train;
  if (!c.mem_budget.empty()) {
    po.mem_budget = parse_bytes(c.mem_budget);
    if (!po.mem_budget || *po.mem_budget <= 0)
      throw UsageError(fmt::format("--mem-budget {}: expected a size such as 8GiB, 512MiB or 1.5GB", c.mem_budget));
  }
  po.recompute = c.recompute != "none";
  po.annotations = !c.ignore_annotations;
  po.recompute_algorithm = c.recompute == "sqrtn" ? RecomputeAlgorithm::SqrtN : RecomputeAlgorithm::Greedy;
  po.batch = c.batch;
  po.streams = c.streams.value_or(1);
  po.precision = c.precision;
  po.ptx_target = gpu_target(c);
  auto program = compile_program(comp, c.file, po);
  std::cerr << comp.diags().render();
  if (!program) throw Reported{};
  return program;
}

Loaded compile(const CommonOptions& c, bool train) {
  Loaded l;
  if (is_plan(c.file)) {
    if (!c.defines.empty())
      throw UsageError(fmt::format("-D does not apply to {}: a .plan is already compiled (bind dimensions when "
                                   "compiling it: modelc -D NAME=VALUE FILE.model -o FILE.plan)", c.file));
    if (!c.model.empty())
      throw UsageError(fmt::format("--model does not apply to {}: a .plan holds one compiled model (choose it "
                                   "when compiling: modelc --model NAME FILE.model -o FILE.plan)", c.file));
    if (!c.mem_budget.empty() || c.recompute != "greedy" || c.ignore_annotations)
      throw UsageError(fmt::format("--mem-budget, --recompute and --ignore-annotations do not apply to {}: a .plan is already compiled "
                                   "(give them to modelc: modelc --mem-budget BYTES FILE.model -o FILE.plan)", c.file));
    if (c.precision)
      throw UsageError(fmt::format("--precision does not apply to {}: a .plan is already compiled (give it to "
                                   "modelc: modelc --precision {} FILE.model -o FILE.plan)", c.file, *c.precision));
    l.program = rt::read_plan(c.file);
    // A plan keeps the schedule modelc gave it unless --streams asks for another.
    if (c.streams)
      for (rt::Function& f : l.program->functions) schedule_streams(*l.program, f, *c.streams);
  } else {
    l.program = compile_model(c, train);
  }
  fs::path dir = fs::path(c.file).parent_path();
  l.base_dir = dir.empty() ? fs::path(".").string() : dir.string();

  const rt::Program& p = *l.program;
  const rt::Function* eval = p.function("eval");
  if (!eval || eval->feeds.size() != 2)
    throw std::runtime_error(fmt::format("{}: modelrun feeds models with two inputs (features, then labels or targets); "
                                         "model '{}' has {}", c.file, p.model, eval ? eval->feeds.size() : 0));
  bool has_loss = false;
  for (const auto& [name, buf] : eval->outputs) has_loss |= name == "loss";
  if (!has_loss) throw std::runtime_error(fmt::format("{}: model '{}' has no output named 'loss'", c.file, p.model));
  l.features = eval->feeds[0].name;
  l.labels = eval->feeds[1].name;
  const rt::BufferDesc& f = p.buffers[eval->feeds[0].buffer];
  // A -D that fixes the batch dim to another size than the batches the run feeds.
  const int64_t fed = c.batch.value_or(p.train.batch) / std::max<int64_t>(1, p.train.accumulate);
  if (!f.shape.empty() && f.shape[0].is_constant() && f.shape[0].eval({}) != fed)
    for (const std::string& d : c.defines)
      if (d.substr(d.find('=') + 1) == std::to_string(f.shape[0].eval({})))
        throw UsageError(fmt::format("-D {}: this fixes the batch dim of input '{}' to {}, but the run feeds batches of "
                                     "{}; set the batch with --batch {} instead", d, l.features, f.shape[0].eval({}),
                                     fed, f.shape[0].eval({})));
  for (size_t k = 1; k < f.shape.size(); ++k) {
    if (!f.shape[k].is_constant())
      throw std::runtime_error(fmt::format("{}: input '{}' has a size other than the batch that is not known ({}); bind it with -D",
                                           c.file, l.features, f.shape[k].str(p.symbols)));
    l.example_shape.push_back(f.shape[k].eval({}));
  }
  const rt::ElemType lt = p.buffers[eval->feeds[1].buffer].type;
  if (lt != rt::ElemType::I32 && lt != rt::ElemType::F32)
    throw std::runtime_error(fmt::format("{}: input '{}' must be i32 (class labels or target tokens) or f32 (regression "
                                         "targets from csv())", c.file, l.labels));
  return l;
}

// VALUE of --data NAME=VALUE as the number argument NAME of data source `kind` takes.
template <class T>
T data_number(const std::string& arg, const std::string& kind, const std::string& name, const std::string& value) {
  if constexpr (std::is_integral_v<T>) {
    if (value == "true") return 1;  // a bool argument (normalize, header)
    if (value == "false") return 0;
  }
  T v{};
  auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), v);
  if (value.empty() || ec != std::errc() || end != value.data() + value.size())
    throw UsageError(fmt::format("--data {}: {}()'s '{}' is {}, not '{}'", arg, kind, name,
                                 std::is_integral_v<T> ? "an integer (or true or false)" : "a number", value));
  return v;
}

// --data PATH sets the data's first file argument; --data NAME=VALUE any argument. A path
// given on the command line is relative to the current directory, as every command-line path
// is (a path written in the .model or .plan stays relative to that file's directory).
void override_data(rt::TrainSettings& t, const std::vector<std::string>& data) {
  if (data.empty()) return;
  if (!t.data) throw std::runtime_error("--data: the model's train section names no data source to override");
  for (const std::string& d : data) {
    auto eq = d.find('=');
    if (eq == std::string::npos) {
      const char* first = t.data->kind == "idx" ? "images" : "path";
      t.data->strs[first] = fs::absolute(d).string();
      continue;
    }
    std::string name = d.substr(0, eq), value = d.substr(eq + 1);
    if (t.data->strs.count(name)) t.data->strs[name] = value.empty() ? value : fs::absolute(value).string();
    else if (t.data->ints.count(name)) t.data->ints[name] = data_number<int64_t>(d, t.data->kind, name, value);
    else if (t.data->floats.count(name)) t.data->floats[name] = data_number<double>(d, t.data->kind, name, value);
    else throw std::runtime_error(fmt::format("--data: {}() has no argument '{}'", t.data->kind, name));
  }
}

std::shared_ptr<const rt::Dataset> open_data(const Loaded& l) {
  const rt::TrainSettings& t = l.program->train;
  if (!t.data) throw std::runtime_error(fmt::format("model '{}' has no data source (train {{ data = ... }})", l.program->model));
  const rt::Function& e = *l.program->function("eval");
  auto ds = rt::Dataset::open(*t.data, l.base_dir, static_cast<uint64_t>(t.seed), t.validation,
                              l.program->buffers[e.feeds[1].buffer].type);
  ds->check_input(l.features, l.program->buffers[l.program->function("eval")->feeds[0].buffer].type, l.example_shape);
  // Labels and ids the model indexes with: checked once here, so that the error names the
  // file and the example (the session checks every batch again, by position).
  ds->check_indices(*l.program, l.features, false);
  ds->check_indices(*l.program, l.labels, true);
  return ds;
}

std::map<std::string, rt::HostTensor> feed(const Loaded& l, rt::Batch& b) {
  std::map<std::string, rt::HostTensor> m;
  m[l.features] = std::move(b.features);
  m[l.labels] = std::move(b.labels);
  return m;
}

EvalResult evaluate(rt::Session& s, const Loaded& l, const std::shared_ptr<const rt::Dataset>& ds, int64_t batch) {
  return modelrun::evaluate(s, EvalFeeds{l.features, l.labels, l.example_shape}, ds, batch);
}

rt::NamedTensors persistent_tensors(const rt::Session& s, bool with_state) {
  rt::NamedTensors out;
  for (const std::string& n : s.param_names()) out.emplace_back(n, s.param(n));
  for (const std::string& n : s.buffer_names()) out.emplace_back(n, s.buffer(n));
  if (with_state)
    for (const std::string& n : s.state_names()) out.emplace_back(n, s.state(n));
  return out;
}

// The train step's peak memory as the memory plan predicts it at the program's batch: what
// Session::memory_usage().peak() measures (compiler/lowered/memory_report.h).
int64_t predicted_peak(const rt::Program& p) {
  return predict_memory(p, "train_step", {}, bind_symbols(p, "train_step", {})).peak;
}

// The session's threads and memory limit from the command line.
rt::SessionOptions session_options(const CommonOptions& c) {
  rt::SessionOptions so;
  so.threads = c.threads;
  so.device = c.device;
  so.allow_tf32 = c.tf32;
  so.flush_subnormals = c.subnormals == "flush";
  if (!c.memory_limit.empty()) {
    std::optional<int64_t> limit = parse_bytes(c.memory_limit);
    if (!limit || *limit <= 0)
      throw UsageError(fmt::format("--memory-limit {}: expected a size such as 8GiB, 512MiB or 1.5GB", c.memory_limit));
    so.memory_limit = static_cast<size_t>(*limit);
  }
  return so;
}

// The examples of one optimizer step, all micro-batches together: the train section's (or
// --batch's) batch, which must split evenly (a plan's accumulate is fixed when it compiles).
int64_t step_batch(const rt::TrainSettings& t, const rt::Function& step) {
  if (auto e = rt::check_batch_split(t.batch, std::max<int64_t>(1, step.micro_batches)))
    throw UsageError(fmt::format("--batch {}: {}", t.batch, *e));
  return t.batch;
}

// The examples of one micro-batch, and of one evaluation call: the forward pass runs at the
// size the memory plan assumed for it.
int64_t micro_batch(const rt::TrainSettings& t) { return t.batch / std::max<int64_t>(1, t.accumulate); }

// --memory-limit caps the CPU runtime's allocator; on CUDA the device's memory is the limit,
// which the user is told rather than left to believe (docs/memory.md).
void note_memory_limit(const rt::Session& s, const CommonOptions& c) {
  if (s.on_cuda() && !c.memory_limit.empty() && !c.quiet)
    fmt::print(stderr, "note: --memory-limit {} applies to the CPU runtime; on {} the device's memory is the limit\n",
               c.memory_limit, s.device());
}

void apply_common(rt::TrainSettings& t, const CommonOptions& c) {
  if (c.batch) t.batch = *c.batch;
  if (c.seed) t.seed = *c.seed;
  override_data(t, c.data);
}

int guarded(const std::function<int()>& body) {
  try {
    return body();
  } catch (const Reported&) {
    return 1;
  } catch (const UsageError& e) {
    std::cerr << "modelrun: error: " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "modelrun: error: " << e.what() << "\n";
    return 1;
  }
}

}  // namespace

namespace {

// The training loop's state: steps are pipelined (Session::submit_step): the next batch is
// loaded and submitted while the step before it runs (on CUDA its upload overlaps that
// step), except after a step that an evaluation or checkpoint follows, which must see
// exactly its parameters.
struct TrainLoop {
  const TrainOptions& o;
  const Loaded& l;
  const rt::TrainSettings& t;
  std::shared_ptr<const rt::Dataset> ds;
  rt::Session& s;
  rt::TrainLoader& loader;
  MetricsWriter& metrics;
  Progress& bar;
  const std::string& ckpt_path;
  const RunShape& shape;
  bool scaling;  // fp16 training's dynamic loss scaling (docs/precision.md): two more outputs
  Watches& watches;  // the plateau schedule and early stopping

  struct Submitted {
    int64_t step, epoch, n;  // step: the number of steps done once it has run
    double lr;
    bool epoch_end, due;
  };
  std::deque<Submitted> in_flight;
  rt::NamedTensors dumped;
  EvalResult last_eval;
  bool evaluated = false;
  double epoch_loss = 0;
  int64_t epoch_steps = 0;
  int64_t skipped = 0, scaled_steps = 0;
  double loss_scale = 0;
  std::vector<StepFacts> history;  // this run's steps, for the divergence diagnosis

  void eval() {
    last_eval = evaluate(s, l, ds, micro_batch(t));
    evaluated = true;
    bar.line(fmt::format("step {}: held-out loss {:.4f}{} ({} examples)", s.step(), last_eval.loss,
                         eval_summary(last_eval), last_eval.examples));
    metrics.write("eval", eval_row(last_eval, s.step()));
    for (const std::string& line : watches.observe(s, last_eval, s.step())) bar.line(line);
    if (!ckpt_path.empty()) {
      std::map<std::string, std::string> md = checkpoint_metadata(s, shape, loader.position());
      watches.put(md);
      rt::save_checkpoint(ckpt_path, persistent_tensors(s, true), md);
      // Early stopping keeps the best model so far beside the checkpoint.
      if (watches.new_best)
        rt::save_checkpoint((fs::path(ckpt_path).parent_path() / "best.safetensors").string(), persistent_tensors(s, false),
                            {{"model", l.program->model}, {"step", std::to_string(s.step())}});
    }
  }

  void finish_one() {
    const Submitted f = in_flight.front();
    in_flight.pop_front();
    const rt::StepResult r = s.finish_step();
    const double loss = r.loss;
    bar.step(f.step - 1, loss, f.n, f.lr);
    epoch_loss += loss;
    ++epoch_steps;
    std::vector<std::pair<std::string, double>> row = {{"step", static_cast<double>(f.step)},
                                                       {"epoch", static_cast<double>(f.epoch)},
                                                       {"loss", loss},
                                                       {"lr", f.lr},
                                                       {"grad_norm", r.grad_norm},
                                                       {"samples_per_second", bar.samples_per_second()}};
    if (scaling) {
      loss_scale = r.outputs.at("loss_scale").f32()[0];
      const bool skip = r.outputs.at("skipped").f32()[0] != 0;
      skipped += skip;
      ++scaled_steps;
      row.emplace_back("loss_scale", loss_scale);
      row.emplace_back("skipped", skip ? 1.0 : 0.0);
    }
    metrics.write("train", row);
    if (!std::isfinite(loss)) {
      bar.finish();
      throw std::runtime_error(explain_divergence({{f.step, loss, r.grad_norm}, history, f.lr, t.clip_grad_norm, scaling,
                                                   loss_scale, skipped, scaled_steps, non_finite_params(s)}));
    }
    history.push_back({f.step, loss, r.grad_norm});
    if (f.due || f.step == shape.total) {
      if (f.epoch_end && !o.common.quiet)
        bar.line(fmt::format("epoch {} done: mean training loss {:.4f}", f.epoch + 1, epoch_loss / static_cast<double>(epoch_steps)));
      if (f.epoch_end) epoch_loss = 0, epoch_steps = 0;
      eval();
    }
  }

  void run() {
    while ((s.step() < shape.total && !watches.stop) || !in_flight.empty()) {
      if (s.step() < shape.total && !watches.stop && (in_flight.empty() || (in_flight.size() < 2 && !in_flight.back().due))) {
        rt::Batch b = loader.next();
        if (!o.dump_batches.empty()) {
          dumped.emplace_back(fmt::format("step{}.{}", s.step(), l.features), b.features);
          dumped.emplace_back(fmt::format("step{}.{}", s.step(), l.labels), b.labels);
        }
        Submitted f{s.step() + 1, b.epoch, b.size(), s.current_lr(), false, false};
        s.submit_step(feed(l, b));
        f.epoch_end = loader.position().batch == 0;
        f.due = (t.eval_every > 0 ? f.step % t.eval_every == 0 : f.epoch_end) || f.step == shape.total;
        in_flight.push_back(f);
        continue;
      }
      finish_one();
    }
    bar.finish();
    if (!o.dump_batches.empty()) rt::save_checkpoint(o.dump_batches, dumped, {{"model", l.program->model}});
    if (!evaluated) eval();
  }
};

// Whether the step does fp16 training's dynamic loss scaling (docs/precision.md): its two
// more outputs.
bool loss_scaling(const rt::Function& step) {
  auto has_output = [&](const char* name) {
    for (const auto& out : step.outputs)
      if (out.first == name) return true;
    return false;
  };
  return has_output("loss_scale") && has_output("skipped");
}

// The metrics file of --metrics (none when `path` is empty), with a column per figure.
MetricsWriter open_metrics(const std::string& path, const rt::Program& p, bool scaling) {
  if (path.empty()) return {};
  std::vector<std::string> columns = {"step", "epoch", "loss", "lr", "grad_norm", "samples_per_second", "accuracy", "examples"};
  if (scaling) columns.insert(columns.begin() + 5, {"loss_scale", "skipped"});
  for (const std::string& m : metric_names(p)) columns.push_back(m);
  return MetricsWriter(path, columns);
}

// train's flags over the train section's settings.
void apply_train_flags(rt::TrainSettings& t, const TrainOptions& o) {
  if (o.epochs) t.epochs = *o.epochs, t.steps = 0;
  if (o.steps) t.steps = *o.steps, t.epochs = 0;
  if (o.lr) t.schedule.lr = *o.lr;
  if (o.eval_every) t.eval_every = *o.eval_every;
  if (o.accumulate && *o.accumulate != t.accumulate)
    throw UsageError(fmt::format("--accumulate {}: must match the train section's accumulate ({}), which shapes the "
                                 "compiled step", *o.accumulate, t.accumulate));
}

}  // namespace

int run_train(const TrainOptions& o) {
  return guarded([&] {
    check_options(o);
    Loaded l = compile(o.common, true);
    rt::TrainSettings& t = l.program->train;
    apply_common(t, o.common);
    apply_train_flags(t, o);
    auto ds = open_data(l);
    const rt::Function* step_fn = l.program->function("train_step");
    if (!step_fn) throw std::runtime_error(fmt::format("model '{}' has no train section", l.program->model));

    // The loader draws a step's effective batch whole; it splits into micro-batches (docs/language.md).
    const int64_t batch = step_batch(t, *step_fn);
    int64_t per_epoch = ds->size(rt::Split::Train) / batch;
    if (per_epoch == 0)
      throw std::runtime_error(fmt::format("{}: {} training examples are fewer than one batch of {}", ds->origin(),
                                           ds->size(rt::Split::Train), batch));
    const int64_t total = t.steps > 0 ? t.steps : std::max<int64_t>(1, t.epochs) * per_epoch;
    const RunShape run{l.program->model, per_epoch, total, t.schedule.kind};

    rt::SessionOptions so = session_options(o.common);
    so.seed = static_cast<uint64_t>(t.seed);
    so.total_steps = total;
    rt::Session s(l.program, so);
    note_memory_limit(s, o.common);

    Watches::check(*l.program);
    Watches watches(t);
    rt::DataPosition start;
    std::string ckpt_path = o.checkpoint_dir.empty() ? "" : (fs::path(o.checkpoint_dir) / "checkpoint.safetensors").string();
    if (o.resume) {
      std::string path = o.resume->empty() ? ckpt_path : *o.resume;
      if (path.empty()) throw std::runtime_error("--resume needs a checkpoint path or --checkpoint-dir");
      std::map<std::string, std::string> md;
      start = resume_from(s, path, run, o.common.quiet, &md);
      watches.read(s, md, path);
    }
    if (!o.init_from.empty()) {
      const std::string what = init_from(s, o.init_from, o.init_only);
      if (!o.common.quiet) fmt::print(stderr, "{}\n", what);
    }
    if (!o.save_initial.empty()) rt::save_checkpoint(o.save_initial, persistent_tensors(s, false), {{"model", l.program->model}});
    if (!o.checkpoint_dir.empty()) fs::create_directories(o.checkpoint_dir);

    const bool scaling = loss_scaling(*step_fn);
    MetricsWriter metrics = open_metrics(o.metrics, *l.program, scaling);

    if (!o.common.quiet) print_train_header(s, l.program->model, *ds, t, total, batch, per_epoch);
    rt::TrainLoader loader(ds, batch, l.example_shape, static_cast<uint64_t>(t.seed), start);
    const int64_t first = s.step();
    Progress bar(total, first, isatty(2) != 0, o.common.quiet);
    TrainLoop loop{o, l, t, ds, s, loader, metrics, bar, ckpt_path, run, scaling, watches};
    if (watches.stop && !o.common.quiet) fmt::print(stderr, "the run was stopped early: {}\n", watches.stop_reason(first));
    loop.run();
    const EvalResult& last_eval = loop.last_eval;
    // Only the steps this run ran: a resumed run names the steps it continued from, an
    // early-stopped one the steps it had.
    const int64_t done = s.step();
    std::string ran = first == 0 ? count_of(total, "step")
                                 : fmt::format("{} (of {}, from step {})", count_of(total - first, "step"), total, first);
    if (done < total)
      ran = first == 0 ? fmt::format("{} of {}, stopped early", count_of(done, "step"), total)
                       : fmt::format("{} (from step {}), stopped early at step {} of {}", count_of(done - first, "step"),
                                     first, done, total);
    fmt::print("{}: {} in {}, {:.0f} samples/s on {}\n", l.program->model, ran, format_duration(bar.elapsed_seconds()),
               bar.samples_per_second(), count_of(s.threads(), "thread"));
    fmt::print("held-out: loss {:.4f}{} on {} examples\n", last_eval.loss, eval_summary(last_eval), last_eval.examples);
    if (scaling)
      fmt::print("fp16 loss scaling: {} of {} steps skipped (inf/NaN gradients), scale {:g} at the end\n", loop.skipped,
                 loop.scaled_steps, loop.loss_scale);
    if (ds->windowed())
      fmt::print("unigram entropy of the training targets: {:.4f} nats (the loss of a model that ignores its input)\n",
                 ds->unigram_entropy());
    if (!ckpt_path.empty()) fmt::print("checkpoint: {}\n", ckpt_path);
    fmt::print("memory: peak {} measured, {} predicted (modelc --emit=memory)\n", format_bytes(s.memory_usage().peak()),
               format_bytes(predicted_peak(*l.program)));
    return 0;
  });
}

namespace {

// Why an evaluation's loss is not finite, for its error: the parameters of the checkpoint that
// hold NaN or infinities (PyTorch gives a NaN loss there too), else the outputs themselves.
std::string non_finite_eval(rt::Session& s, const std::string& checkpoint, const EvalResult& r) {
  const std::string bad = non_finite_params(s);
  const std::string loss = std::isnan(r.loss) ? "NaN" : r.loss > 0 ? "inf" : "-inf";
  if (!bad.empty())
    return fmt::format("the held-out loss is {} on {} examples: {} has parameters that are not finite: {}", loss,
                       r.examples, checkpoint, bad);
  return fmt::format("the held-out loss is {} on {} examples, although every parameter of {} is finite: the "
                     "model's outputs overflow or the data holds NaN or infinities",
                     loss, r.examples, checkpoint);
}

}  // namespace

int run_eval(const EvalOptions& o) {
  return guarded([&] {
    check_options(o.common);
    Loaded l = compile(o.common, false);
    apply_common(l.program->train, o.common);
    auto ds = open_data(l);
    rt::SessionOptions so = session_options(o.common);
    rt::Session s(l.program, so);
    note_memory_limit(s, o.common);
    rt::Checkpoint c = rt::load_checkpoint(o.checkpoint);
    rt::check_against(c, persistent_specs(s, false), /*allow_extra=*/true);
    load_model_tensors(s, c);
    EvalResult r = evaluate(s, l, ds, micro_batch(l.program->train));
    if (!std::isfinite(r.loss)) throw std::runtime_error(non_finite_eval(s, o.checkpoint, r));
    fmt::print("{}: held-out loss {:.4f}{} on {} examples\n", l.program->model, r.loss, eval_summary(r), r.examples);
    return 0;
  });
}

int run_bench(const BenchOptions& o) {
  if (int rc = guarded([&] { check_options(o); return 0; })) return rc;
  if (o.compare_fusion) return run_fusion_bench(o);
  return guarded([&] {
    Loaded l = compile(o.common, true);
    rt::TrainSettings& t = l.program->train;
    apply_common(t, o.common);
    const rt::Function* step_fn = l.program->function("train_step");
    if (!step_fn) throw std::runtime_error(fmt::format("model '{}' has no train section", l.program->model));
    auto ds = open_data(l);
    const int64_t batch = step_batch(t, *step_fn);
    rt::SessionOptions so = session_options(o.common);
    so.total_steps = o.warmup + (o.profile ? 2 : 1) * o.steps;
    rt::Session s(l.program, so);
    note_memory_limit(s, o.common);
    rt::TrainLoader loader(ds, batch, l.example_shape, static_cast<uint64_t>(t.seed));
    // Batches are made before the clock starts: the benchmark times the steps alone.
    std::vector<rt::Batch> batches;
    for (int64_t i = 0; i < o.warmup + o.steps; ++i) batches.push_back(loader.next());
    for (int64_t i = 0; i < o.warmup; ++i) s.train_step(feed(l, batches[static_cast<size_t>(i)]));
    auto t0 = std::chrono::steady_clock::now();
    std::vector<double> times;
    for (int64_t i = 0; i < o.steps; ++i) {
      auto a = std::chrono::steady_clock::now();
      s.train_step(feed(l, batches[static_cast<size_t>(o.warmup + i)]));
      times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - a).count());
    }
    double total = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::sort(times.begin(), times.end());
    double median = times[times.size() / 2];
    const int64_t predicted = predicted_peak(*l.program);
    fmt::print("{:<14} {:>6} {:>8} {:>10} {:>12} {:>14} {:>14} {:>14}  {}\n", "model", "batch", "threads", "steps/s",
               "samples/s", "median ms/step", "peak MiB", "predicted MiB", "device");
    fmt::print("{:<14} {:>6} {:>8} {:>10.2f} {:>12.0f} {:>14.2f} {:>14.2f} {:>14.2f}  {}\n", l.program->model, batch,
               s.threads(), static_cast<double>(o.steps) / total, static_cast<double>(o.steps * batch) / total,
               1e3 * median, static_cast<double>(s.memory_usage().peak()) / 1048576.0,
               static_cast<double>(predicted) / 1048576.0, s.on_cuda() ? s.device() : "cpu");
    if (o.profile)  // timed apart from the figures above, which are the unprofiled step's
      fmt::print("\n{}", profile_steps(s, o.steps, o.top, [&] {
        rt::Batch b = loader.next();
        return feed(l, b);
      }));
    return 0;
  });
}

}  // namespace modelrun
