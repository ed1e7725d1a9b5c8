// The CPU's streams: worker threads, events and error propagation.
#include "runtime/execution/cpu/streams.h"

namespace modelc::rt {

StreamRunner::StreamRunner(uint32_t streams) {
  for (uint32_t s = 1; s < streams; ++s) workers_.emplace_back([this, s] { worker_loop(s); });
}

StreamRunner::~StreamRunner() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  for (std::thread& t : workers_) t.join();
}

void StreamRunner::worker_loop(uint32_t stream) {
  uint64_t seen = 0;
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
    }
    {
      SubnormalScope mode(subnormals_);
      run_stream(stream);
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      --running_;
    }
    cv_.notify_all();
  }
}

void StreamRunner::run_stream(uint32_t stream) {
  const StreamEvents& ev = *events_;
  for (uint32_t i : (*by_stream_)[stream]) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] {
        if (failed_) return true;
        for (uint32_t e : ev.waits[i])
          if (!recorded_[e]) return false;
        return true;
      });
      if (failed_) return;
    }
    try {
      (*run_instr_)(i);
    } catch (...) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (!error_) error_ = std::current_exception();
        failed_ = true;
      }
      cv_.notify_all();
      return;
    }
    if (!ev.records[i].empty()) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        for (uint32_t e : ev.records[i]) recorded_[e] = 1;
      }
      cv_.notify_all();
    }
  }
}

void StreamRunner::run(const std::vector<std::vector<uint32_t>>& by_stream, const StreamEvents& events,
                       const std::function<void(uint32_t)>& run_instr) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    by_stream_ = &by_stream;
    events_ = &events;
    run_instr_ = &run_instr;
    recorded_.assign(events.events, 0);
    failed_ = false;
    error_ = nullptr;
    running_ = static_cast<uint32_t>(workers_.size());
    subnormals_ = subnormal_state();
    ++generation_;
  }
  cv_.notify_all();
  run_stream(0);
  std::exception_ptr error;
  {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return running_ == 0; });
    error = error_;
    error_ = nullptr;
    by_stream_ = nullptr;
    events_ = nullptr;
    run_instr_ = nullptr;
  }
  if (error) std::rethrow_exception(error);
}

}  // namespace modelc::rt
