// modelrun predict and generate: a trained model's forward pass in eval mode (the Program's
// predict function, compiler/passes/predict.h) on data, and text continued token by token.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cmath>
#include <filesystem>
#include <map>

#include "runtime/session/data/preprocess.h"
#include "runtime/session/temp_files.h"
#include "tools/modelrun/commands.h"
#include "tools/modelrun/evaluate.h"
#include "tools/modelrun/load.h"
#include "tools/modelrun/train_state.h"

namespace modelrun {

namespace fs = std::filesystem;
using namespace modelc;

namespace {

// --- predict -----------------------------------------------------------------------------

// One example's row: its place, its label (when the data has one per example) and every output.
struct Rows {
  bool jsonl = false;
  std::string text;
  bool header_done = false;

  static std::string number(float v) {
    if (std::isnan(v)) return "NaN";
    if (std::isinf(v)) return v > 0 ? "Infinity" : "-Infinity";
    return fmt::format("{}", v);
  }
  // JSON has no NaN: null there.
  std::string json_number(float v) const { return std::isfinite(v) ? fmt::format("{}", v) : "null"; }

  void add(const std::string& split, int64_t example, const rt::HostTensor& labels, int64_t i,
           const std::map<std::string, rt::HostTensor>& out, const std::vector<std::string>& names) {
    std::vector<std::pair<std::string, std::string>> cols = {{"split", split}, {"example", std::to_string(example)}};
    if (labels.shape.size() == 1 && (labels.type == rt::ElemType::I32 || labels.type == rt::ElemType::F32))
      cols.emplace_back("label", labels.type == rt::ElemType::I32 ? std::to_string(labels.i32()[i]) : number(labels.f32()[i]));
    for (const std::string& name : names) {
      const rt::HostTensor& t = out.at(name);
      const int64_t per = t.shape.empty() ? 1 : t.numel() / t.shape[0];
      const int64_t at = t.shape.empty() ? 0 : i * per;
      auto value = [&](int64_t k) {
        return t.type == rt::ElemType::I32 ? static_cast<float>(t.i32()[at + k]) : t.f32()[at + k];
      };
      if (name == "logits" && t.shape.size() == 2 && t.type == rt::ElemType::F32) {  // a classifier's scores
        int64_t best = 0;
        for (int64_t k = 1; k < per; ++k) best = value(k) > value(best) ? k : best;
        double sum = 0;
        for (int64_t k = 0; k < per; ++k) sum += std::exp(static_cast<double>(value(k) - value(best)));
        cols.emplace_back("predicted", std::to_string(best));
        cols.emplace_back("probability", number(static_cast<float>(1.0 / sum)));
      }
      if (jsonl) {
        std::string v = per == 1 ? json_number(value(0)) : "[";
        for (int64_t k = 0; per > 1 && k < per; ++k) v += (k ? "," : "") + json_number(value(k));
        cols.emplace_back(name, per == 1 ? v : v + "]");
      } else {
        for (int64_t k = 0; k < per; ++k) cols.emplace_back(per == 1 ? name : fmt::format("{}.{}", name, k), number(value(k)));
      }
    }
    if (jsonl) {
      std::string line;
      for (const auto& [k, v] : cols) {
        const bool quoted = k == "split";
        line += fmt::format("{}\"{}\":{}", line.empty() ? "{" : ",", k, quoted ? "\"" + v + "\"" : v);
      }
      text += line + "}\n";
      return;
    }
    if (!header_done) {
      for (size_t k = 0; k < cols.size(); ++k) text += (k ? "," : "") + cols[k].first;
      text += "\n";
      header_done = true;
    }
    for (size_t k = 0; k < cols.size(); ++k) text += (k ? "," : "") + cols[k].second;
    text += "\n";
  }
};

std::vector<rt::Split> splits_of(const std::string& split) {
  if (split == "train") return {rt::Split::Train};
  if (split == "all") return {rt::Split::Train, rt::Split::Heldout};
  return {rt::Split::Heldout};
}

}  // namespace

int run_predict(const PredictOptions& o) {
  return guarded([&] {
    check_options(o.common);
    const std::string ext = fs::path(o.out).extension().string();
    if (!o.out.empty() && ext != ".csv" && ext != ".jsonl")
      throw UsageError(fmt::format("-o {}: predictions are written as .csv or .jsonl", o.out));
    Loaded l = compile(o.common, false, o.outputs);
    apply_common(l.program->train, o.common);
    predict_feed(l, o.common.file);
    if (!o.inputs.empty() && o.split != "held-out")
      throw UsageError("--split does not apply with --input: every example of the input is predicted, in file order");
    if (!o.inputs.empty()) check_input(l, o.inputs);
    rt::Session s(l.program, session_options(o.common));
    const rt::Checkpoint c = load_trained(s, o.checkpoint);
    const std::optional<rt::Standardization> stats = rt::recorded_standardization(c);
    auto ds = o.inputs.empty() ? open_data(l, stats ? &*stats : nullptr) : open_input(l, o.inputs, stats ? &*stats : nullptr);
    if (!stats && !ds->feature_mean().empty() && !o.common.quiet)
      fmt::print(stderr, "note: {} records no standardisation statistics (an older modelrun wrote it); {} is "
                 "standardised with its own training split's\n", o.checkpoint, ds->origin());
    std::vector<std::string> names;
    for (const auto& [name, buf] : l.program->function("predict")->outputs) names.push_back(name);
    Rows rows;
    rows.jsonl = ext == ".jsonl";
    int64_t n = 0, correct = 0, classified = 0, regressed = 0;
    std::map<std::string, double> abs_err;  // per output of one value per example, against f32 targets
    for (rt::Split split : splits_of(o.split)) {
      rt::EvalLoader loader(ds, split, micro_batch(l.program->train), l.example_shape, l.prefetch, l.workers);
      int64_t pos = 0;
      while (auto b = loader.next()) {
        auto out = s.predict(predict_inputs(l, *b));
        static const rt::HostTensor unlabeled;
        const rt::HostTensor& labels = ds->labeled() ? batch_labels(l, *b) : unlabeled;
        for (int64_t i = 0; i < b->size(); ++i, ++pos) {
          rows.add(o.inputs.empty() ? rt::split_name(split) : "input", ds->indices(split)[static_cast<size_t>(pos)], labels,
                   i, out, names);
          if (labels.shape.size() == 1 && labels.type == rt::ElemType::F32) {
            for (const auto& [name, t] : out)
              if (t.type == rt::ElemType::F32 && t.shape.size() == 1)
                abs_err[name] += std::fabs(static_cast<double>(t.f32()[i]) - labels.f32()[i]);
            ++regressed;
          }
        }
        // A classifier's accuracy, counted as modelrun eval counts it.
        if (auto lg = out.find("logits"); lg != out.end() && lg->second.shape.size() == 2)
          count_correct(lg->second, labels, correct, classified);
        n += b->size();
      }
    }
    if (o.out.empty()) fmt::print("{}", rows.text);
    else rt::write_file_atomically(o.out, rows.text);
    if (!o.common.quiet) {
      std::string acc = classified ? fmt::format("; accuracy {:.2f}% against their labels",
                                                 100.0 * static_cast<double>(correct) / static_cast<double>(classified))
                                   : "";
      for (const auto& [name, sum] : abs_err)
        acc += fmt::format("; {}: mean absolute error {:.4f} against their targets", name,
                           sum / static_cast<double>(regressed));
      fmt::print(stderr, "{}: {} examples ({}) predicted{}{}\n", l.program->model, n,
                 o.inputs.empty() ? o.split + " split" : fmt::format("{}", fmt::join(o.inputs, " ")),
                 o.out.empty() ? "" : " into " + o.out, acc);
    }
    return 0;
  });
}

}  // namespace modelrun
