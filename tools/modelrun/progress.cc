#include "tools/modelrun/progress.h"

#include <algorithm>
#include <cmath>
#include <fmt/format.h>
#include <stdexcept>

namespace modelrun {

using Clock = std::chrono::steady_clock;

std::string format_duration(double s) {
  if (!std::isfinite(s) || s < 0) return "?";
  auto t = static_cast<int64_t>(s + 0.5);
  if (t >= 3600) return fmt::format("{}h{:02}m", t / 3600, (t % 3600) / 60);
  if (t >= 60) return fmt::format("{}m{:02}s", t / 60, t % 60);
  return fmt::format("{}s", t);
}

Progress::Progress(int64_t total, int64_t first, bool tty, bool quiet)
    : total_(total), first_(first), step_(first), tty_(tty), quiet_(quiet),
      start_(Clock::now()), last_draw_(start_) {}

double Progress::elapsed_seconds() const {
  return std::chrono::duration<double>(Clock::now() - start_).count();
}

double Progress::samples_per_second() const {
  double t = elapsed_seconds();
  return t > 0 ? static_cast<double>(samples_) / t : 0.0;
}

void Progress::step(int64_t step, double loss, int64_t samples, double lr) {
  step_ = step + 1;
  samples_ += samples;
  loss_ = loss;
  lr_ = lr;
  // A smoothed loss for the bar: the raw one jumps from batch to batch.
  ema_ = step_ - first_ == 1 ? loss : 0.95 * ema_ + 0.05 * loss;
  auto now = Clock::now();
  bool due = tty_ ? now - last_draw_ > std::chrono::milliseconds(100)
                  : (step_ - first_) % std::max<int64_t>(1, total_ / 20) == 0;
  if (due || step_ == total_) {
    last_draw_ = now;
    draw(false);
  }
}

void Progress::draw(bool final) {
  if (quiet_) return;
  double done = total_ > first_ ? static_cast<double>(step_ - first_) / static_cast<double>(total_ - first_) : 1.0;
  double el = elapsed_seconds();
  double eta = done > 0 ? el * (1 - done) / done : NAN;
  int width = 24, fill = static_cast<int>(done * width + 0.5);
  std::string bar = std::string(static_cast<size_t>(fill), '#') + std::string(static_cast<size_t>(width - fill), '.');
  std::string text = fmt::format("[{}] step {}/{}  loss {:.4f} (avg {:.4f})  lr {:.3g}  {:.0f} samples/s  {} {}",
                                 bar, step_, total_, loss_, ema_, lr_, samples_per_second(),
                                 final ? "took" : "eta", format_duration(final ? el : eta));
  if (tty_) fmt::print(stderr, "\r\033[K{}", text);
  else fmt::print(stderr, "{}\n", text);
  drawn_ = tty_;
  if (final && tty_) fmt::print(stderr, "\n");
  std::fflush(stderr);
}

void Progress::line(const std::string& text) {
  if (quiet_) return;
  if (drawn_) fmt::print(stderr, "\r\033[K");
  fmt::print(stderr, "{}\n", text);
  drawn_ = false;
  if (tty_ && step_ > first_) draw(false);
}

void Progress::finish() {
  if (step_ > first_) draw(true);
}

MetricsWriter::MetricsWriter(const std::string& path, std::vector<std::string> columns)
    : path_(path), columns_(std::move(columns)) {
  auto ends = [&](const char* ext) { return path.size() >= std::string(ext).size() && path.ends_with(ext); };
  if (ends(".csv")) csv_ = true;
  else if (!ends(".jsonl") && !ends(".json"))
    throw std::runtime_error(fmt::format("{}: metrics file must end in .jsonl, .json or .csv", path));
  out_.open(path, std::ios::out | std::ios::trunc);
  if (!out_) throw std::runtime_error(fmt::format("{}: cannot open for writing", path));
  if (csv_) {
    out_ << "kind";
    for (const auto& c : columns_) out_ << "," << c;
    out_ << "\n";
  }
}

static std::string num(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "Infinity" : "-Infinity";
  return fmt::format("{}", v);
}

void MetricsWriter::write(const std::string& kind, const std::vector<std::pair<std::string, double>>& values) {
  if (!out_.is_open()) return;
  for (const auto& [k, v] : values)
    if (std::find(columns_.begin(), columns_.end(), k) == columns_.end())
      throw std::logic_error("metrics: column '" + k + "' was not declared");
  if (csv_) {
    out_ << kind;
    for (const auto& c : columns_) {
      out_ << ",";
      for (const auto& [k, v] : values)
        if (k == c) out_ << num(v);
    }
    out_ << "\n";
  } else {
    out_ << "{\"kind\": \"" << kind << "\"";
    for (const auto& [k, v] : values) {
      // JSON has no NaN or infinity: write null for them.
      out_ << ", \"" << k << "\": " << (std::isfinite(v) ? fmt::format("{}", v) : "null");
    }
    out_ << "}\n";
  }
  out_.flush();
  if (!out_) throw std::runtime_error(fmt::format("{}: write failed", path_));
}

}  // namespace modelrun
