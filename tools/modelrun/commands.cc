#include "tools/modelrun/commands.h"

#include <cmath>
#include <deque>
#include <filesystem>
#include <fmt/format.h>
#include <iostream>
#include <map>
#include <unistd.h>

#include "compiler/pipeline.h"
#include "runtime/base/bytes.h"
#include "runtime/base/train_rules.h"
#include "runtime/session/checkpoint.h"
#include "runtime/session/data/dataset.h"
#include "runtime/session/data/loader.h"
#include "runtime/session/data/preprocess.h"
#include "runtime/session/session.h"
#include "tools/modelrun/divergence.h"
#include "tools/modelrun/evaluate.h"
#include "tools/modelrun/watch.h"
#include "tools/modelrun/init_from.h"
#include "tools/modelrun/load.h"
#include "tools/modelrun/profile_table.h"
#include "tools/modelrun/progress.h"
#include "tools/modelrun/run_header.h"
#include "tools/modelrun/fusion_bench.h"
#include "tools/modelrun/train_state.h"

namespace modelrun {

namespace fs = std::filesystem;
using namespace modelc;

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
      rt::put_preprocessing(md, *ds);
      rt::save_checkpoint(ckpt_path, persistent_tensors(s, true), md);
      // Early stopping keeps the best model so far beside the checkpoint.
      if (watches.new_best) {
        std::map<std::string, std::string> best = {{"model", l.program->model}, {"step", std::to_string(s.step())}};
        rt::put_preprocessing(best, *ds);
        rt::save_checkpoint((fs::path(ckpt_path).parent_path() / "best.safetensors").string(), persistent_tensors(s, false),
                            best);
      }
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
          for (const auto& [name, tensor] : b.named) dumped.emplace_back(fmt::format("step{}.{}", s.step(), name), tensor);
          if (b.named.empty()) {
            dumped.emplace_back(fmt::format("step{}.{}", s.step(), l.features), b.features);
            dumped.emplace_back(fmt::format("step{}.{}", s.step(), l.labels), b.labels);
          }
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
    rt::TrainLoader loader(ds, batch, l.example_shape, static_cast<uint64_t>(t.seed), start, l.prefetch, l.workers);
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
