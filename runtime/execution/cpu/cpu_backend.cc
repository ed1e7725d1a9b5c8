// The CPU backend: runs each function on its CPU executor at once.
#include "runtime/execution/cpu/cpu_backend.h"

#include <algorithm>

#include "runtime/base/error.h"
#include "runtime/device/cpu/float_env.h"

namespace modelc::rt {

namespace {

// A CPU run is over when it starts: it holds the outputs until they are asked for.
class CpuRun final : public BackendRun {
 public:
  explicit CpuRun(std::map<std::string, HostTensor> outputs) : outputs_(std::move(outputs)) {}
  std::map<std::string, HostTensor> finish() override { return std::move(outputs_); }

 private:
  std::map<std::string, HostTensor> outputs_;
};

}  // namespace

CpuBackend::CpuBackend(const Program& program, std::vector<HostTensor>& persistent, ThreadPool& pool, bool arena,
                       size_t memory_limit, bool flush_subnormals)
    : program_(program),
      persistent_(persistent),
      pool_(pool),
      arena_(arena),
      flush_subnormals_(flush_subnormals),
      raw_memory_(memory_limit, "host"),
      memory_("cpu", raw_memory_, events_) {}

CpuBackend::~CpuBackend() = default;

std::unique_ptr<BackendRun> CpuBackend::start(const Function& fn, std::span<const HostTensor* const> feeds,
                                              const std::map<std::string, int64_t>& symbols) {
  int64_t fed = 0;
  for (const HostTensor* t : feeds) fed += t ? static_cast<int64_t>(t->bytes.size()) : 0;
  input_peak_ = std::max(input_peak_, fed);
  auto it = executors_.find(fn.name);
  if (it == executors_.end()) {
    auto e = std::make_unique<Executor>(program_, fn, pool_, persistent_,
                                        ExecutorOptions{.arena = arena_, .allocator = &memory_});
    if (profiling_) e->set_profiling(true);
    it = executors_.emplace(fn.name, std::move(e)).first;
  }
  SubnormalScope mode(flush_subnormals_);
  return std::make_unique<CpuRun>(it->second->run(feeds, symbols));
}

MemoryUsage CpuBackend::memory_usage() const {
  MemoryUsage u;
  u.inputs = input_peak_;
  u.allocator = memory_.stats();
  return u;
}

void CpuBackend::reset_peak_memory() {
  memory_.reset_peak();
  input_peak_ = 0;
}

void CpuBackend::set_profiling(bool on) {
  profiling_ = on;
  for (auto& [name, e] : executors_) e->set_profiling(on);
}

std::vector<cuda::InstrTime> CpuBackend::profile(const std::string& fn) const {
  auto it = executors_.find(fn);
  return it == executors_.end() ? std::vector<cuda::InstrTime>{} : it->second->profile();
}

}  // namespace modelc::rt
