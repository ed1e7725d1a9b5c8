#include "tools/modelrun/evaluate.h"

#include <fmt/format.h>

#include "runtime/session/data/loader.h"

namespace modelrun {

using namespace modelc;

std::vector<std::string> metric_names(const rt::Program& p) {
  std::vector<std::string> names;
  const rt::Function* eval = p.function("eval");
  if (!eval) return names;
  for (const auto& [name, buf] : eval->outputs) {
    const rt::BufferDesc& d = p.buffers.at(buf);
    if (name != "loss" && d.shape.empty() && d.type == rt::ElemType::F32)
      names.push_back(name);
  }
  return names;
}

bool count_correct(const rt::HostTensor& logits, const rt::HostTensor& labels, int64_t& correct, int64_t& predictions) {
  if (labels.type != rt::ElemType::I32 || logits.type != rt::ElemType::F32 ||
      logits.shape.size() != labels.shape.size() + 1 || logits.numel() != labels.numel() * logits.shape.back())
    return false;
  const int64_t classes = logits.shape.back();
  const float* lg = logits.f32();
  for (int64_t i = 0; i < labels.numel(); ++i) {
    int64_t best = 0;
    for (int64_t k = 1; k < classes; ++k)
      if (lg[i * classes + k] > lg[i * classes + best]) best = k;
    correct += best == labels.i32()[i];
    ++predictions;
  }
  return true;
}

EvalResult evaluate(rt::Session& s, const EvalFeeds& f, const std::shared_ptr<const rt::Dataset>& ds, int64_t batch) {
  rt::EvalLoader loader(ds, rt::Split::Heldout, batch, f.example_shape, f.prefetch, f.workers);
  EvalResult r;
  const std::vector<std::string> names = metric_names(s.program());
  std::vector<double> sums(names.size(), 0.0);
  double loss_sum = 0;
  int64_t correct = 0, predictions = 0;
  while (auto b = loader.next()) {
    const int64_t n = b->size();
    std::map<std::string, rt::HostTensor> in;
    for (auto& [name, t] : b->named) in[name] = std::move(t);  // an array source: every input by name
    if (b->named.empty()) {
      in[f.features] = std::move(b->features);
      in[f.labels] = std::move(b->labels);
    }
    auto out = s.eval(in);
    loss_sum += static_cast<double>(out.at("loss").f32()[0]) * static_cast<double>(n);
    for (size_t k = 0; k < names.size(); ++k) sums[k] += static_cast<double>(out.at(names[k]).f32()[0]) * static_cast<double>(n);
    r.examples += n;
    if (auto it = out.find("logits"); it != out.end()) count_correct(it->second, in.at(f.labels), correct, predictions);
  }
  const double denom = r.examples ? static_cast<double>(r.examples) : NAN;
  r.loss = loss_sum / denom;
  for (size_t k = 0; k < names.size(); ++k) r.metrics.emplace_back(names[k], sums[k] / denom);
  if (predictions) r.accuracy = static_cast<double>(correct) / static_cast<double>(predictions);
  return r;
}

std::string eval_summary(const EvalResult& r) {
  std::string s = std::isnan(r.accuracy) ? "" : fmt::format("  accuracy {:.2f}%", 100 * r.accuracy);
  for (const auto& [name, v] : r.metrics) s += fmt::format("  {} {:.4f}", name, v);
  return s;
}

std::vector<std::pair<std::string, double>> eval_row(const EvalResult& r, int64_t step) {
  std::vector<std::pair<std::string, double>> row = {{"step", static_cast<double>(step)},
                                                     {"loss", r.loss},
                                                     {"examples", static_cast<double>(r.examples)}};
  if (!std::isnan(r.accuracy)) row.emplace_back("accuracy", r.accuracy);
  for (const auto& m : r.metrics) row.push_back(m);
  return row;
}

}  // namespace modelrun
