// Backend: what a Session (runtime/session/session.h) does differently on each device, behind
// one interface, so that the Session itself (feeding, micro-batches, runtime scalars, the
// queue of submitted steps, the accessors' checks) never asks where it runs.
//
//   CpuBackend   runtime/execution/cpu/cpu_backend.h    the CPU executors, run at once
//   CudaBackend  runtime/execution/cuda/cuda_backend.h  a GPU, runs in flight
//
// The persistent store: the caller (the Session) owns one HostTensor per buffer id, each
// Param and State buffer holding its initial value, and keeps it, in place, for the
// backend's life. The CPU runs on it; the CUDA backend copies it to the device when it is
// made and serves it as the host staging area of write_persistent.
//
// Lifetimes: a BackendRun must be finished or dropped before its backend is destroyed (it
// refers to the backend's executors), and the program, the store and the thread pool a
// backend was made with must outlive it.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "runtime/base/program.h"
#include "runtime/base/tensor.h"
#include "runtime/device/memory/caching_allocator.h"
#include "runtime/execution/instr_time.h"

namespace modelc::rt {

class ThreadPool;

// What a session holds, and the most it held at once (the measured side of the memory
// plan's prediction, compiler/lowered/memory_report.h).
struct MemoryUsage {
  int64_t persistent = 0;  // parameters and optimizer state
  int64_t inputs = 0;      // CPU: the most bytes one call was fed (read in place; micro-batch
                           // copies); CUDA: 0, the inputs' device copies are the allocator's
  MemoryStats allocator;   // the caching allocator's statistics (arenas; on CUDA also the
                           // fed inputs, kernel tables and library workspace)
  // persistent + inputs + the allocator's peak of allocated bytes since reset_peak_memory.
  int64_t peak() const { return persistent + inputs + allocator.all.allocated_bytes.peak; }
};

// A function's run, started (Backend::start): in flight on CUDA, already done on the CPU.
// Dropping it unfinished waits for the device and frees what the run held.
class BackendRun {
 public:
  virtual ~BackendRun() = default;
  // Waits for the run and returns the function's outputs by name; throws what the run
  // found (on CUDA: what the device found). Call it once.
  virtual std::map<std::string, HostTensor> finish() = 0;

 protected:
  BackendRun() = default;
};

class Backend {
 public:
  virtual ~Backend() = default;
  Backend(const Backend&) = delete;
  Backend& operator=(const Backend&) = delete;

  // Starts a run of `fn` (a function of the backend's program): `feeds` holds one tensor
  // per Function::feeds slot, in order; `symbols` the named symbol values ("$seed",
  // "$step"). The feeds may be reused when it returns. The executor of `fn` is made on
  // first use, and its errors (and the run's, on the CPU) are thrown here.
  virtual std::unique_ptr<BackendRun> start(const Function& fn, std::span<const HostTensor* const> feeds,
                                            const std::map<std::string, int64_t>& symbols) = 0;

  // The current value of persistent buffer `b` (a Param or State), copied to the host;
  // ordered after the runs started before.
  virtual HostTensor read_persistent(uint32_t b) const = 0;
  // The store's tensor `b` was just assigned (in place, same type and shape): make the value
  // the functions run on equal to it. Returns when it is (the store may change again).
  virtual void write_persistent(uint32_t b) = 0;

  // Memory: `inputs` and `allocator` of MemoryUsage (persistent is 0: the caller counts its
  // store), the allocator's summary table, and a new peak window for both.
  virtual MemoryUsage memory_usage() const = 0;
  virtual std::string memory_summary() const = 0;
  virtual void reset_peak_memory() = 0;

  // Per-instruction timing of the functions run from now on, and the figures of function
  // `fn` so far (empty before it ran). CUDA only: the CPU throws RuntimeError.
  virtual void set_profiling(bool on) = 0;
  virtual std::vector<cuda::InstrTime> profile(const std::string& fn) const = 0;

  // "cpu", or the CUDA device ("cuda:0 NVIDIA H200 (sm_90, 132 SMs, 139.8 GiB)").
  virtual std::string description() const = 0;
  virtual bool is_cuda() const = 0;

 protected:
  Backend() = default;
};

struct BackendOptions {
  // "auto", "cpu", "cuda" or "cuda:N" (SessionOptions::device has the rules).
  std::string device = "auto";
  // CPU: lay each function's temporaries out in one arena (ExecutorOptions::arena), and
  // the most bytes the host caching allocator may take at once (0: no limit).
  bool arena = true;
  size_t memory_limit = 0;
  // CUDA: let f32 matmuls use TF32 tensor cores.
  bool allow_tf32 = false;
  // CPU: run with subnormal floats flushed to zero (runtime/device/cpu/float_env.h).
  bool flush_subnormals = true;
};

// Chooses where `program` runs by options.device (runtime/device/cuda/device.h) and makes
// that backend over the store `persistent` and `pool`. auto takes cuda:0 when there is a
// driver, a device and the program can run there (cuda_unsupported), else the CPU, and then
// sets `note` to why; an explicit cuda that cannot be used throws RuntimeError saying why.
std::unique_ptr<Backend> make_backend(const Program& program, std::vector<HostTensor>& persistent, ThreadPool& pool,
                                      const BackendOptions& options, std::string& note);

}  // namespace modelc::rt
