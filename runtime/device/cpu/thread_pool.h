// A fixed pool of worker threads for the CPU runtime: parallel_for splits an extent of work
// items into chunks of at least `grain` items and runs them on the pool.
//
// The pool holds N-1 background threads; the calling thread is the N-th worker, so a pool
// of 1 runs everything inline. A parallel_for issued from inside a chunk (a nested call)
// runs inline on that thread. Calls from several threads at once (the streams of an
// executor, runtime/execution/cpu/streams.h) are safe: the first one gets the pool, and a call that
// finds the pool busy runs the same chunks one after another on its own thread instead of
// waiting (so the results do not depend on who got the pool). The first exception a chunk
// throws is rethrown to the caller after every chunk has finished (inline: at once). Every
// chunk runs in the caller's subnormal mode (runtime/device/cpu/float_env.h).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace modelc::rt {

class ThreadPool {
 public:
  // threads <= 0: one per hardware thread.
  explicit ThreadPool(int threads = 0);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return size_; }

  // Calls fn(begin, end) on disjoint ranges covering [0, extent) exactly once. Each range
  // except the last holds a multiple of `grain` items (grain < 1 counts as 1); there are at
  // most size() ranges, and fewer when the extent is small.
  void parallel_for(int64_t extent, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);

  // The number of chunks parallel_for would use (exposed for tests and benchmarks).
  int64_t chunks_for(int64_t extent, int64_t grain) const;

 private:
  struct Job;
  void worker_loop();
  static void run_chunks(Job& job);

  int size_ = 1;
  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable wake_, done_;
  Job* job_ = nullptr;
  uint64_t generation_ = 0;
  int active_ = 0;  // workers inside the current job
  bool stop_ = false;
  std::mutex submit_mu_;  // held by the one outside caller whose loop the pool runs
};

}  // namespace modelc::rt
