// What `modelrun train` prints while it runs: a one-line progress bar (step, loss,
// samples/s, ETA) redrawn in place on a terminal and printed every N steps otherwise, and
// metrics written as JSON lines or CSV.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

namespace modelrun {

class Progress {
 public:
  // total: steps in the run; first: the step it starts at (resumed runs start later).
  Progress(int64_t total, int64_t first, bool tty, bool quiet);
  // After each step: its loss and how many samples it consumed.
  void step(int64_t step, double loss, int64_t samples, double lr);
  // A line that must not be overwritten by the bar (evaluations, checkpoints).
  void line(const std::string& text);
  void finish();
  double samples_per_second() const;
  double elapsed_seconds() const;

 private:
  void draw(bool final);
  int64_t total_, first_, step_ = 0, samples_ = 0;
  double loss_ = 0, ema_ = 0, lr_ = 0;
  bool tty_, quiet_, drawn_ = false;
  std::chrono::steady_clock::time_point start_, last_draw_;
};

std::string format_duration(double seconds);  // "1h02m", "3m05s", "12s"

// Metrics as JSON lines (.jsonl, .json) or CSV (.csv), chosen by the file's extension.
// A row is its kind ("train" or "eval") and numbers by name; the names come from the fixed
// column list (CSV cells a row does not have stay empty). Each row reaches the file whole,
// in one write: a write that fails (a full disk) is cut back to the rows before it and
// throws, naming the file and the reason ("No space left on device"); a CSV whose header
// cannot be written is removed.
class MetricsWriter {
 public:
  MetricsWriter() = default;
  // Throws std::runtime_error naming the file when it cannot be opened or has another extension.
  MetricsWriter(const std::string& path, std::vector<std::string> columns);
  MetricsWriter(MetricsWriter&& o) noexcept { *this = std::move(o); }
  MetricsWriter& operator=(MetricsWriter&& o) noexcept;
  MetricsWriter(const MetricsWriter&) = delete;
  MetricsWriter& operator=(const MetricsWriter&) = delete;
  ~MetricsWriter();
  void write(const std::string& kind, const std::vector<std::pair<std::string, double>>& values);
  bool active() const { return fd_ >= 0; }

 private:
  void append(const std::string& record);
  std::string path_;
  int fd_ = -1;
  int64_t written_ = 0;  // bytes of whole rows in the file
  bool csv_ = false;
  std::vector<std::string> columns_;
};

}  // namespace modelrun
