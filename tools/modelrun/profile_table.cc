#include "tools/modelrun/profile_table.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>

namespace modelrun {

std::string profile_table(const std::vector<modelc::rt::cuda::InstrTime>& prof, double step_ms, int64_t top) {
  std::vector<const modelc::rt::cuda::InstrTime*> rows;
  double sum = 0;
  for (const auto& t : prof) {
    if (t.runs == 0) continue;
    rows.push_back(&t);
    sum += t.ms / static_cast<double>(t.runs);
  }
  std::stable_sort(rows.begin(), rows.end(), [](auto* a, auto* b) { return a->ms / a->runs > b->ms / b->runs; });
  std::string out = fmt::format("{:>4}  {:<24} {:>5}  {:<34} {:>10} {:>7} {:>11} {:>9}\n", "rank", "kernel", "nodes",
                                "source", "ms/step", "% step", "bytes", "GB/s");
  const size_t n = top > 0 ? std::min(rows.size(), static_cast<size_t>(top)) : rows.size();
  for (size_t i = 0; i < n; ++i) {
    const auto& t = *rows[i];
    const double ms = t.ms / static_cast<double>(t.runs);
    std::string where = t.where.empty() ? "-" : t.where;
    if (where.size() > 34) where = "..." + where.substr(where.size() - 31);
    out += fmt::format("{:>4}  {:<24} {:>5}  {:<34} {:>10.4f} {:>6.1f}% {:>11} {:>9.2f}\n", i + 1,
                       t.name.size() > 24 ? t.name.substr(0, 21) + "..." : t.name, t.nodes, where, ms,
                       step_ms > 0 ? 100 * ms / step_ms : 0.0, t.bytes, ms > 0 ? static_cast<double>(t.bytes) / ms / 1e6 : 0.0);
  }
  out += fmt::format("{} instructions{}: {:.4f} ms of the {:.4f} ms profiled step ({:.1f}%; the rest is dispatch, "
                     "copies of the updates and outputs, and waiting)\n",
                     rows.size(), n < rows.size() ? fmt::format(" ({} shown)", n) : "", sum, step_ms,
                     step_ms > 0 ? 100 * sum / step_ms : 0.0);
  return out;
}

std::string profile_steps(modelc::rt::Session& s, int64_t steps, int64_t top,
                          const std::function<std::map<std::string, modelc::rt::HostTensor>()>& next) {
  s.set_profiling(true);
  double wall = 0;
  for (int64_t i = 0; i < steps; ++i) {
    auto feed = next();
    const auto a = std::chrono::steady_clock::now();
    s.train_step(feed);
    wall += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - a).count();
  }
  s.set_profiling(false);
  return profile_table(s.profile("train_step"), wall / static_cast<double>(std::max<int64_t>(steps, 1)), top);
}

}  // namespace modelrun
