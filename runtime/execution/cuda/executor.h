// The CUDA executor: runs one Function of a Program on a GPU, the twin of the CPU executor
// (runtime/execution/cpu/executor.h). Binding and layout are the shared FunctionLayout's. A run is
// launched (queued on the device, the host goes on) and later finished (waited for, outputs
// returned), so a caller may keep several runs in flight (Session::submit_step):
//   - the fed inputs go through pinned memory and up on the device's copy stream, which
//     overlaps the runs still computing; compute stream 0 waits for them (an event);
//   - each kernel instruction gets its buffer-address and size tables (the GPU ABI in
//     runtime/base/program.h) in one table block per run, copied up on stream 0;
//   - instructions run on the streams of the function's schedule (Instr::stream, waits,
//     records; plus the waits arena reuse needs, runtime/execution/streams.h), which fork from stream
//     0 after the uploads and join it before the updates: runs never overlap each other;
//   - kernels come from the Program's PTX module with the configuration the compiler chose,
//     library ops from kernels/cuda/library.h, each with the workspace of its stream;
//   - updates are device-to-device copies; outputs come down into pinned memory.
// The arena is held while any run of the function is in flight. Parameters and optimizer
// state live on the device in the caller's DeviceTensors, indexed by buffer id.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "runtime/device/cuda/driver_api.h"
#include "runtime/execution/function_layout.h"
#include "runtime/execution/instr_time.h"
#include "runtime/base/program.h"
#include "runtime/execution/streams.h"
#include "runtime/base/tensor.h"

namespace modelc::rt::cuda {

class CudaDevice;
class CudaExecutor;
class Module;

// A run in flight (CudaExecutor::launch). Dropping it unfinished waits for the device and
// frees what the run held.
class CudaRun {
 public:
  ~CudaRun();
  CudaRun(const CudaRun&) = delete;
  CudaRun& operator=(const CudaRun&) = delete;

 private:
  friend class CudaExecutor;
  struct State;
  explicit CudaRun(std::unique_ptr<State> s);
  std::unique_ptr<State> s_;
};

// A tensor in device memory (from the device's caching allocator).
struct DeviceTensor {
  ElemType type = ElemType::F32;
  std::vector<int64_t> shape;
  void* data = nullptr;  // a device address
  size_t bytes() const;
};

// Why `program` cannot run on CUDA ("" when it can): it has kernels but no GPU code, or a
// library op without a CUDA implementation.
std::string cuda_unsupported(const Program& program);

class CudaExecutor {
 public:
  // `persistent` is indexed by buffer id and must hold a DeviceTensor for every Param and
  // State buffer the function touches, and outlive the executor. Checks the function (as
  // the CPU executor does, plus: the Program has PTX when it has kernels, and every library
  // op has a CUDA implementation) and throws RuntimeError naming what is wrong.
  CudaExecutor(const Program& program, const Function& fn, CudaDevice& device, std::vector<DeviceTensor>& persistent);
  ~CudaExecutor();
  CudaExecutor(const CudaExecutor&) = delete;
  CudaExecutor& operator=(const CudaExecutor&) = delete;

  // As Executor::run: feeds in Function::feeds order, named symbol values; returns the
  // outputs by name, on the host. launch() + finish().
  std::map<std::string, HostTensor> run(std::span<const HostTensor* const> feeds,
                                        const std::map<std::string, int64_t>& symbols);
  // Queues a run and returns at once: the feeds are copied (into pinned memory) before it
  // returns, so the caller may reuse them. Errors found on the host (feeds, symbols, memory)
  // are thrown here.
  std::unique_ptr<CudaRun> launch(std::span<const HostTensor* const> feeds, const std::map<std::string, int64_t>& symbols);
  // Waits for a run of this executor and returns its outputs; throws what the device found
  // (an embedding id out of range). Runs finish in any order; each exactly once.
  std::map<std::string, HostTensor> finish(std::unique_ptr<CudaRun> run);
  // Runs launched and not finished.
  int in_flight() const { return in_flight_; }

  // Per-instruction timing with CUDA events (off by default: it adds two event records per
  // instruction). The figures accumulate over the runs since it was turned on.
  void set_profiling(bool on);
  const std::vector<InstrTime>& profile() const { return profile_; }

  const Function& function() const { return layout_.function(); }
  int64_t layouts() const { return layout_.layouts(); }
  int64_t arena_bytes() const { return arena_bytes_; }
  // The compute streams a run uses (the schedule's; 1 when the function has one).
  uint32_t streams() const { return static_cast<uint32_t>(by_stream_.empty() ? 1 : by_stream_.size()); }
  int64_t planned_arena_bytes() const { return layout_.plan().size; }

 private:
  friend class CudaRun;
  void prepare_tables();
  void end_run(CudaRun::State& r);
  [[noreturn]] void name_error(const RuntimeError& e) const;
  void lay_out_streams();
  void enqueue_instr(size_t i, const std::vector<uint8_t*>& ptr, uint8_t* tables, Module* module);
  void harvest_profile();
  CUevent take_event();

  const Program& program_;
  const Function& fn_;
  CudaDevice& device_;
  std::vector<DeviceTensor>& persistent_;
  FunctionLayout layout_;
  std::vector<size_t> table_offset_;  // per instruction: byte offset of its tables (kernels)
  size_t table_bytes_ = 0;
  int64_t arena_bytes_ = 0;
  void* arena_ = nullptr;  // held while runs are in flight
  size_t arena_size_ = 0;
  int in_flight_ = 0;
  // Streams (functions with more than one): each stream's instructions, the order the
  // schedule gives, and per layout its events plus arena reuse's (runtime/execution/streams.h).
  std::vector<std::vector<uint32_t>> by_stream_;
  std::unique_ptr<StreamOrder> order_;
  StreamEvents stream_events_;
  std::vector<CUevent> cu_events_;  // by event id of stream_events_
  std::vector<CUevent> join_;       // per stream: its end of a run (stream 0 waits for them)
  CUevent fork_ = nullptr, uploaded_ = nullptr;
  std::vector<CUevent> spare_;      // per-run end events, for reuse
  bool profiling_ = false;
  bool profile_pending_ = false;  // a run recorded the profiling events; not read yet
  std::vector<CUevent> events_;   // two per instruction while profiling
  std::vector<InstrTime> profile_;
};

}  // namespace modelc::rt::cuda
