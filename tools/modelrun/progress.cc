#include "tools/modelrun/progress.h"

#include <algorithm>
#include <cmath>
#include <fmt/format.h>
#include <stdexcept>
#include <utility>

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <unistd.h>

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
  fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) throw std::runtime_error(fmt::format("{}: cannot open the metrics file for writing: {}", path, std::strerror(errno)));
  if (csv_) {
    std::string header = "kind";
    for (const auto& c : columns_) header += "," + c;
    try {
      append(header + "\n");
    } catch (...) {
      ::close(fd_);
      fd_ = -1;
      ::unlink(path.c_str());
      throw;
    }
  }
}

MetricsWriter& MetricsWriter::operator=(MetricsWriter&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) ::close(fd_);
    path_ = std::move(o.path_);
    fd_ = std::exchange(o.fd_, -1);
    written_ = o.written_;
    csv_ = o.csv_;
    columns_ = std::move(o.columns_);
  }
  return *this;
}

MetricsWriter::~MetricsWriter() {
  if (fd_ >= 0) ::close(fd_);
}

// One row, whole: a short or failed write is cut back to the rows before it.
void MetricsWriter::append(const std::string& record) {
  size_t done = 0;
  while (done < record.size()) {
    ssize_t n = ::write(fd_, record.data() + done, record.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = n < 0 ? errno : ENOSPC;
      if (::ftruncate(fd_, static_cast<off_t>(written_)) == 0) ::lseek(fd_, static_cast<off_t>(written_), SEEK_SET);
      throw std::runtime_error(fmt::format("{}: cannot write metrics: {} (the file keeps the {} before it)", path_,
                                           std::strerror(err), written_ ? "rows" : "nothing"));
    }
    done += static_cast<size_t>(n);
  }
  written_ += static_cast<int64_t>(record.size());
}

static std::string num(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "Infinity" : "-Infinity";
  return fmt::format("{}", v);
}

void MetricsWriter::write(const std::string& kind, const std::vector<std::pair<std::string, double>>& values) {
  if (fd_ < 0) return;
  for (const auto& [k, v] : values)
    if (std::find(columns_.begin(), columns_.end(), k) == columns_.end())
      throw std::logic_error("metrics: column '" + k + "' was not declared");
  std::string row;
  if (csv_) {
    row = kind;
    for (const auto& c : columns_) {
      row += ",";
      for (const auto& [k, v] : values)
        if (k == c) row += num(v);
    }
  } else {
    row = "{\"kind\": \"" + kind + "\"";
    // JSON has no NaN or infinity: write null for them.
    for (const auto& [k, v] : values) row += ", \"" + k + "\": " + (std::isfinite(v) ? fmt::format("{}", v) : "null");
    row += "}";
  }
  append(row + "\n");
}

}  // namespace modelrun
