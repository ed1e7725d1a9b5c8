// The fixed worker pool behind every parallel loop of the CPU runtime.
#include "runtime/device/cpu/thread_pool.h"

#include <algorithm>
#include <atomic>
#include <exception>

#include "runtime/device/cpu/float_env.h"

namespace modelc::rt {

namespace {
thread_local bool t_inside_pool = false;  // set while a thread runs a chunk
}

struct ThreadPool::Job {
  const std::function<void(int64_t, int64_t)>* fn = nullptr;
  int64_t extent = 0, grain = 1, units = 0, chunks = 0;
  SubnormalState subnormals;  // the submitting thread's subnormal mode, which every chunk runs in
  std::atomic<int64_t> next{0}, finished{0};
  std::mutex error_mu;
  std::exception_ptr error;
};

ThreadPool::ThreadPool(int threads) {
  if (threads <= 0) threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  size_ = threads;
  workers_.reserve(static_cast<size_t>(threads - 1));
  for (int i = 1; i < threads; ++i) workers_.emplace_back([this] { worker_loop(); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  for (std::thread& t : workers_) t.join();
}

int64_t ThreadPool::chunks_for(int64_t extent, int64_t grain) const {
  if (extent <= 0) return 0;
  grain = std::max<int64_t>(grain, 1);
  int64_t units = (extent + grain - 1) / grain;
  return std::min<int64_t>(units, size_);
}

void ThreadPool::run_chunks(Job& job) {
  bool was_inside = t_inside_pool;
  t_inside_pool = true;
  SubnormalScope mode(job.subnormals);
  for (;;) {
    int64_t c = job.next.fetch_add(1);
    if (c >= job.chunks) break;
    int64_t b = c * job.units / job.chunks * job.grain;
    int64_t e = std::min(job.extent, (c + 1) * job.units / job.chunks * job.grain);
    try {
      if (b < e) (*job.fn)(b, e);
    } catch (...) {
      std::lock_guard<std::mutex> lock(job.error_mu);
      if (!job.error) job.error = std::current_exception();
    }
    job.finished.fetch_add(1);
  }
  t_inside_pool = was_inside;
}

void ThreadPool::worker_loop() {
  uint64_t seen = 0;
  for (;;) {
    Job* job = nullptr;
    {
      std::unique_lock<std::mutex> lock(mu_);
      wake_.wait(lock, [&] { return stop_ || (job_ && generation_ != seen); });
      if (stop_) return;
      seen = generation_;
      job = job_;
      ++active_;
    }
    run_chunks(*job);
    {
      std::lock_guard<std::mutex> lock(mu_);
      --active_;
    }
    done_.notify_all();
  }
}

void ThreadPool::parallel_for(int64_t extent, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) {
  if (extent <= 0) return;
  grain = std::max<int64_t>(grain, 1);
  int64_t chunks = chunks_for(extent, grain);
  // On this thread: the whole range at once (nested calls, one chunk), or the chunks the
  // pool would have run, one after another.
  auto run_inline = [&](bool chunked) {
    bool was_inside = t_inside_pool;
    t_inside_pool = true;
    struct Restore {
      bool v;
      ~Restore() { t_inside_pool = v; }
    } restore{was_inside};
    if (!chunked) return fn(0, extent);
    const int64_t units = (extent + grain - 1) / grain;
    for (int64_t c = 0; c < chunks; ++c) {
      int64_t b = c * units / chunks * grain;
      int64_t e = std::min(extent, (c + 1) * units / chunks * grain);
      if (b < e) fn(b, e);
    }
  };
  if (chunks <= 1 || t_inside_pool || workers_.empty()) return run_inline(false);
  // Another thread (another stream of an executor) has the pool: run this loop's chunks on
  // this thread rather than wait, so the streams' loops overlap instead of queueing. The
  // chunks are the pool's own, so a kernel that splits its work by them (a blocked sgemm)
  // computes the same bits either way.
  std::unique_lock<std::mutex> submit(submit_mu_, std::try_to_lock);
  if (!submit.owns_lock()) return run_inline(true);
  Job job;
  job.fn = &fn;
  job.extent = extent;
  job.grain = grain;
  job.units = (extent + grain - 1) / grain;
  job.chunks = chunks;
  job.subnormals = subnormal_state();
  {
    std::lock_guard<std::mutex> lock(mu_);
    job_ = &job;
    ++generation_;
  }
  wake_.notify_all();
  run_chunks(job);
  {
    std::unique_lock<std::mutex> lock(mu_);
    done_.wait(lock, [&] { return job.finished.load() == job.chunks && active_ == 0; });
    job_ = nullptr;
  }
  if (job.error) std::rethrow_exception(job.error);
}

}  // namespace modelc::rt
