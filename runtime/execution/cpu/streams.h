// The CPU's streams: one thread per stream, events as flags under one lock.
//
// A StreamRunner holds streams-1 worker threads (the caller's thread is stream 0) for the
// life of an executor. run() gives each stream its instructions in list order; before an
// instruction starts, its thread waits until every event the instruction waits for was
// recorded; after it finished, the thread records its events (runtime/base/program.h, Function,
// has the semantics). Kernels inside an instruction still use the ThreadPool, which takes
// concurrent callers (runtime/device/cpu/thread_pool.h). Every stream runs in the caller's
// subnormal mode (runtime/device/cpu/float_env.h).
//
// Errors: when an instruction throws, its stream stops and the others stop before their
// next instruction (a waiter does not wait for events that will never come); run() returns
// only after every stream has stopped and rethrows the first exception thrown. The runner
// is then ready for the next run.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "runtime/device/cpu/float_env.h"
#include "runtime/execution/streams.h"

namespace modelc::rt {

class StreamRunner {
 public:
  explicit StreamRunner(uint32_t streams);
  ~StreamRunner();
  StreamRunner(const StreamRunner&) = delete;
  StreamRunner& operator=(const StreamRunner&) = delete;

  uint32_t streams() const { return static_cast<uint32_t>(workers_.size() + 1); }

  // `by_stream[s]`: the instructions of stream s, in list order (by_stream.size() ==
  // streams()); `events`: the waits and records of every instruction and the event count;
  // `run_instr(i)` runs instruction i. Not reentrant: one run at a time.
  void run(const std::vector<std::vector<uint32_t>>& by_stream, const StreamEvents& events,
           const std::function<void(uint32_t)>& run_instr);

 private:
  void worker_loop(uint32_t stream);
  void run_stream(uint32_t stream);

  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable cv_;
  // The current run (guarded by mu_ where written; read-only while streams run).
  const std::vector<std::vector<uint32_t>>* by_stream_ = nullptr;
  const StreamEvents* events_ = nullptr;
  const std::function<void(uint32_t)>* run_instr_ = nullptr;
  std::vector<char> recorded_;  // by event, guarded by mu_
  bool failed_ = false;         // guarded by mu_
  std::exception_ptr error_;    // guarded by mu_
  uint64_t generation_ = 0;     // guarded by mu_
  SubnormalState subnormals_;   // the caller's subnormal mode, which the streams run in (guarded by mu_)
  uint32_t running_ = 0;        // workers still in the current run, guarded by mu_
  bool stop_ = false;           // guarded by mu_
};

}  // namespace modelc::rt
