// The error words of the hand kernels (kernels/cuda/errors.h).
#include "kernels/cuda/errors.h"

#include <string>
#include <utility>

#include "kernels/cuda/bodies.h"
#include "kernels/cuda/launches.h"
#include "runtime/device/cuda/cuda_device.h"

namespace modelc::kernels::cuda {

namespace {

using rt::cuda::CudaDevice;

struct ErrorState {
  CudaDevice* device = nullptr;
  unsigned long long* words = nullptr;  // kErrorWords device words
  std::vector<IdCheck> pending;    // pending[i] is about words[i]
  bool deferred = false;
};

void destroy_state(void* p) {
  auto* s = static_cast<ErrorState*>(p);
  if (s->words != nullptr) s->device->allocator().free(s->words);
  delete s;
}

ErrorState& state(CudaDevice& d) {
  CudaDevice::LibraryState& slot = d.library_state("modelc.kernel_errors");
  if (slot.handle == nullptr) {
    auto* s = new ErrorState;
    s->device = &d;
    slot.handle = s;
    slot.destroy = destroy_state;
    s->words = static_cast<unsigned long long*>(
        d.allocator().allocate(sizeof(unsigned long long) * kErrorWords, rt::cuda::stream_id(d.stream())));
  }
  return *static_cast<ErrorState*>(slot.handle);
}

rt::cuda::CUdeviceptr dptr(const void* p) { return reinterpret_cast<rt::cuda::CUdeviceptr>(p); }

// Throws the first error among the words of `checks` (in issue order).
void throw_first(const std::vector<IdCheck>& checks, const unsigned long long* words) {
  for (size_t i = 0; i < checks.size(); ++i) {
    if (words[i] == kNoError) continue;
    LibCall c;
    c.op = checks[i].op;
    c.where = checks[i].where;
    fail_id_error(c, words[i], checks[i].ids_shape, checks[i].rows);
  }
}

}  // namespace

unsigned long long* reserve_error_word(const rt::cuda::CudaLibCall& c) {
  ErrorState& s = state(*c.device);
  if (s.pending.size() >= static_cast<size_t>(kErrorWords)) check_kernel_errors(*c.device);
  unsigned long long* w = s.words + s.pending.size();
  MODELC_CU(c.device->driver(), cuMemsetD8Async(dptr(w), 0xff, sizeof(unsigned long long), c.stream));
  return w;
}

void commit_id_check(const rt::cuda::CudaLibCall& c, const std::vector<int64_t>& ids_shape, int64_t rows) {
  ErrorState& s = state(*c.device);
  s.pending.push_back({c.call.op, c.call.where, ids_shape, rows});
  if (!s.deferred) check_kernel_errors(*c.device);
}

void set_deferred_error_checks(CudaDevice& device, bool deferred) { state(device).deferred = deferred; }

void check_kernel_errors(CudaDevice& device) {
  ErrorState& s = state(device);
  if (s.pending.empty()) return;
  std::vector<IdCheck> pending = std::move(s.pending);
  s.pending.clear();
  std::vector<unsigned long long> words(pending.size(), kNoError);
  // Every stream's kernels must be done before the words are read.
  device.context().synchronize();
  const auto& drv = device.driver();
  MODELC_CU(drv, cuMemcpyDtoHAsync_v2(words.data(), dptr(s.words), words.size() * sizeof(unsigned long long), device.stream()));
  device.synchronize();
  throw_first(pending, words.data());
}

KernelErrorReadback& KernelErrorReadback::operator=(KernelErrorReadback&& o) noexcept {
  if (this != &o) {
    this->~KernelErrorReadback();
    device_ = std::exchange(o.device_, nullptr);
    checks_ = std::move(o.checks_);
    words_ = std::exchange(o.words_, nullptr);
  }
  return *this;
}

KernelErrorReadback::~KernelErrorReadback() {
  if (words_ != nullptr) device_->pinned().free(words_);
  words_ = nullptr;
}

void KernelErrorReadback::check() const {
  if (words_ != nullptr) throw_first(checks_, words_);
}

KernelErrorReadback read_back_kernel_errors(CudaDevice& device, rt::cuda::CUstream stream) {
  ErrorState& s = state(device);
  if (s.pending.empty()) return {};
  const size_t bytes = s.pending.size() * sizeof(unsigned long long);
  auto* words = static_cast<unsigned long long*>(device.pinned().allocate(bytes));
  KernelErrorReadback r(device, std::move(s.pending), words);
  s.pending.clear();
  MODELC_CU(device.driver(), cuMemcpyDtoHAsync_v2(words, dptr(s.words), bytes, stream));
  return r;
}

}  // namespace modelc::kernels::cuda
