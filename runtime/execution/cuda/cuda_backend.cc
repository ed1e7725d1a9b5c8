// The CUDA backend: the device copies of the persistent buffers and the CUDA executors.
#include "runtime/execution/cuda/cuda_backend.h"

#include <algorithm>

#include "runtime/device/cuda/device.h"
#include "runtime/device/cuda/driver.h"

namespace modelc::rt::cuda {

namespace {

// A run launched on the device: finish() waits for it on its executor.
class CudaBackendRun final : public BackendRun {
 public:
  CudaBackendRun(CudaExecutor& exec, std::unique_ptr<CudaRun> run) : exec_(exec), run_(std::move(run)) {}
  std::map<std::string, HostTensor> finish() override { return exec_.finish(std::move(run_)); }

 private:
  CudaExecutor& exec_;
  std::unique_ptr<CudaRun> run_;  // null once finished; dropping it unfinished waits (CudaRun)
};

}  // namespace

CudaBackend::CudaBackend(const Program& program, const Driver& driver, int ordinal,
                         const std::vector<HostTensor>& persistent, bool allow_tf32)
    : program_(program), store_(persistent), device_(driver, ordinal) {
  device_.set_allow_tf32(allow_tf32);
  persistent_.resize(program.buffers.size());
  // The destructor does not run when the constructor throws: free what was allocated.
  try {
    for (size_t b = 0; b < program.buffers.size(); ++b) {
      const BufferRole r = program.buffers[b].role;
      if (!is_persistent(r)) continue;
      DeviceTensor& t = persistent_[b];
      t.type = store_[b].type;
      t.shape = store_[b].shape;
      t.data = device_.allocator().allocate(std::max<size_t>(t.bytes(), 1), stream_id(device_.stream()));
      upload(static_cast<uint32_t>(b));
    }
  } catch (...) {
    release();
    throw;
  }
}

CudaBackend::~CudaBackend() { release(); }

void CudaBackend::release() {
  executors_.clear();
  for (DeviceTensor& t : persistent_)
    if (t.data != nullptr) {
      device_.allocator().free(t.data);
      t.data = nullptr;
    }
}

void CudaBackend::upload(uint32_t b) {
  const HostTensor& t = store_[b];
  const Driver& d = device_.driver();
  if (!t.bytes.empty())
    MODELC_CU(d, cuMemcpyHtoDAsync_v2(reinterpret_cast<CUdeviceptr>(persistent_[b].data), t.bytes.data(),
                                      t.bytes.size(), device_.stream()));
  device_.synchronize();
}

HostTensor CudaBackend::read_persistent(uint32_t b) const {
  const DeviceTensor& src = persistent_[b];
  HostTensor t(src.type, src.shape);
  if (!t.bytes.empty())
    MODELC_CU(device_.driver(), cuMemcpyDtoHAsync_v2(t.bytes.data(), reinterpret_cast<CUdeviceptr>(src.data),
                                                     t.bytes.size(), device_.stream()));
  device_.synchronize();
  return t;
}

std::unique_ptr<BackendRun> CudaBackend::start(const Function& fn, std::span<const HostTensor* const> feeds,
                                               const std::map<std::string, int64_t>& symbols) {
  auto it = executors_.find(fn.name);
  if (it == executors_.end()) {
    it = executors_.emplace(fn.name, std::make_unique<CudaExecutor>(program_, fn, device_, persistent_)).first;
    if (profiling_) it->second->set_profiling(true);
  }
  CudaExecutor& exec = *it->second;
  return std::make_unique<CudaBackendRun>(exec, exec.launch(feeds, symbols));
}

MemoryUsage CudaBackend::memory_usage() const {
  MemoryUsage u;
  // The device copies of the parameters and state are the allocator's too (in rounded
  // blocks): the caller counts them once, as persistent.
  const CachingAllocator& alloc = device_.allocator();
  u.allocator = alloc.stats();
  for (const DeviceTensor& t : persistent_)
    if (t.data != nullptr) u.allocator.all.allocated_bytes.peak -= static_cast<int64_t>(alloc.allocation_size(t.data));
  return u;
}

std::string CudaBackend::memory_summary() const { return device_.allocator().memory_summary(); }

void CudaBackend::reset_peak_memory() { device_.allocator().reset_peak(); }

void CudaBackend::set_profiling(bool on) {
  profiling_ = on;
  for (auto& [name, e] : executors_) e->set_profiling(on);
}

std::vector<InstrTime> CudaBackend::profile(const std::string& fn) const {
  auto it = executors_.find(fn);
  return it == executors_.end() ? std::vector<InstrTime>{} : it->second->profile();
}

std::string CudaBackend::description() const { return device_.context().info().str(); }

}  // namespace modelc::rt::cuda
