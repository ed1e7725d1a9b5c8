// The CPU executor: runs one Function of a Program.
//
// A run binds the Program's symbols from the shapes of the fed inputs (a dim that is a
// single symbol with coefficient 1 binds it; every other dim must then evaluate equal) and
// from the caller's named values ("$seed", "$step"), lays out the function's buffers (the
// static memory plan, runtime/execution/memory_plan.h, kept between runs while the symbol values do
// not change; the arena itself is taken from the allocator for each run and given back at
// its end), runs each instruction in order (a Kernel: parallel_for over its extent calling
// the host code; a Library op: the table in kernels/cpu/library.h), or, when the function
// has several streams, each on its stream (runtime/execution/cpu/streams.h; the layout then adds the
// waits that arena reuse needs, runtime/execution/streams.h), copies each update (new value -> persistent buffer) and returns
// copies of the outputs. Inputs are read in place (never copied); params and optimizer
// state live in the caller's persistent store, indexed by buffer id.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "runtime/execution/cpu/streams.h"
#include "runtime/execution/instr_time.h"
#include "runtime/device/cpu/thread_pool.h"
#include "runtime/base/error.h"
#include "runtime/base/program.h"
#include "runtime/base/tensor.h"

namespace modelc::rt {

class CachingAllocator;

struct ExecutorOptions {
  // Lay the function's temps and outputs out in one arena at the offsets of its static
  // memory plan (runtime/execution/memory_plan.h); false: one allocation per buffer (for tests that
  // check the plan against buffers that cannot alias).
  bool arena = true;
  // Where the arena (or the buffers) come from; null: the C heap. Must outlive the executor.
  CachingAllocator* allocator = nullptr;
  // Run a function with more than one stream on its streams (runtime/execution/cpu/streams.h);
  // false: one instruction after another in list order (the sequential reference).
  bool streams = true;
};

class Executor {
 public:
  // `persistent` is indexed by buffer id and must hold a tensor of the right type and
  // shape for every Param and State buffer the function touches; it must outlive the
  // executor and keep its storage in place (set values by copying into it). Checks the
  // function (buffer ids, kernels, library ops, feeds) and throws RuntimeError naming the
  // function and instruction on a problem.
  Executor(const Program& program, const Function& fn, ThreadPool& pool, std::vector<HostTensor>& persistent,
           ExecutorOptions options = {});
  ~Executor();
  Executor(const Executor&) = delete;
  Executor& operator=(const Executor&) = delete;

  // Runs the function. `feeds` holds one tensor per Function::feeds slot, in order (a null
  // pointer is a missing feed); `symbols` gives named symbol values ("$seed", "$step";
  // names the Program does not have are ignored). Returns the function's outputs by name.
  std::map<std::string, HostTensor> run(std::span<const HostTensor* const> feeds,
                                        const std::map<std::string, int64_t>& symbols);

  // The symbol values of the last run (Program::symbols order).
  const std::vector<int64_t>& symbol_values() const;
  // How many times the buffers were laid out (a new layout happens when symbols change).
  int64_t layouts() const { return layouts_; }
  const Function& function() const { return fn_; }
  // The bytes of the last run's arena (0 before the first run or without an arena; at
  // least kArenaAlignment), and the size the memory plan of the current layout asks for.
  int64_t arena_bytes() const;
  int64_t planned_arena_bytes() const;
  // The waits the current layout adds because buffers share arena bytes (pairs (earlier,
  // later) of instructions, runtime/execution/streams.h arena_hazards); empty when the function runs
  // on one stream.
  const std::vector<std::pair<uint32_t, uint32_t>>& arena_hazards() const;

  // Profiling: with it on, every run adds each instruction's wall time (from its start on
  // the calling thread or its stream's thread to its end, its worker threads included) to
  // profile(); turning it on starts the figures afresh. Off, runs are not timed.
  void set_profiling(bool on);
  const std::vector<cuda::InstrTime>& profile() const { return profile_; }

 private:
  struct Layout;
  [[noreturn]] void fail(const std::string& msg) const;
  void bind(std::span<const HostTensor* const> feeds, const std::map<std::string, int64_t>& symbols);
  void lay_out();
  void run_instr(size_t i);

  const Program& program_;
  const Function& fn_;
  ThreadPool& pool_;
  std::vector<HostTensor>& persistent_;
  ExecutorOptions options_;
  std::unique_ptr<Layout> layout_;
  int64_t layouts_ = 0;
  bool laid_out_ = false;  // the CPU's part of the layout is made for the bound symbols
  // Streams (functions with more than one): the order their schedule gives, each stream's
  // instructions, and the threads that run them.
  std::unique_ptr<StreamOrder> order_;
  std::vector<std::vector<uint32_t>> by_stream_;
  std::unique_ptr<StreamRunner> runner_;
  bool profiling_ = false;
  std::vector<cuda::InstrTime> profile_;
};

}  // namespace modelc::rt
