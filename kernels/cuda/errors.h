// Errors the hand kernels find in data on the GPU: an embedding id out of range. The CPU twin
// checks ids before it copies; a GPU kernel cannot throw, so it records the first bad
// position and its id in an error word in device memory (kernels/cuda/bodies.h,
// record_error), and the host reads the word back and throws RuntimeError with the CPU's
// words: "embedding at m.model:3:7: id 9 at position 4 of the ids [2,3] is out of range for
// a table of 8 rows".
//
// Where the check happens: by default right after the op's kernel, in the op itself: the
// op then waits for the device (one context synchronization per embedding op). A caller
// that synchronizes anyway (an executor at the end of a run) can defer the checks with
// set_deferred_error_checks(device, true) and call check_kernel_errors(device) after its
// synchronization; the words of up to kErrorWords ops wait for it (one more op checks
// them all first). An executor that keeps several runs in flight reads the words back per
// run instead: read_back_kernel_errors queues a copy of the pending words into pinned memory
// at the end of the run and hands the checks over; check() after the run's end throws the
// first error, without waiting for the runs behind it. The state lives in the device's
// library slot "modelc.kernel_errors".
#pragma once

#include <cstdint>
#include <string>
#include <vector>
#include <utility>

#include "kernels/cuda/library.h"

namespace modelc::kernels::cuda {

constexpr int kErrorWords = 256;

// A device word for the next error-checking op of `c`, reset to "no error" on c's stream.
unsigned long long* reserve_error_word(const rt::cuda::CudaLibCall& c);
// Registers the reserved word's check after the op's kernel is launched on c's stream;
// checks at once (synchronizing the device) unless checks are deferred.
void commit_id_check(const rt::cuda::CudaLibCall& c, const std::vector<int64_t>& ids_shape, int64_t rows);

void set_deferred_error_checks(rt::cuda::CudaDevice& device, bool deferred);

// One deferred check: the op, its ids' shape and the table's rows.
struct IdCheck {
  std::string op, where;
  std::vector<int64_t> ids_shape;
  int64_t rows = 0;
};

// The checks of one run and a pinned copy of their words (read_back_kernel_errors).
class KernelErrorReadback {
 public:
  KernelErrorReadback() = default;
  KernelErrorReadback(rt::cuda::CudaDevice& device, std::vector<IdCheck> checks, unsigned long long* words)
      : device_(&device), checks_(std::move(checks)), words_(words) {}
  ~KernelErrorReadback();
  KernelErrorReadback(KernelErrorReadback&& o) noexcept { *this = std::move(o); }
  KernelErrorReadback& operator=(KernelErrorReadback&& o) noexcept;
  // Throws the first recorded error in issue order. Call once the copy is done (the stream
  // it was queued on passed it).
  void check() const;

 private:
  rt::cuda::CudaDevice* device_ = nullptr;
  std::vector<IdCheck> checks_;
  unsigned long long* words_ = nullptr;  // pinned, one per check
};

// Hands over the pending checks, with their words copied into pinned memory on `stream` (the
// stream the run ends on, after every op); none pending: an empty readback.
KernelErrorReadback read_back_kernel_errors(rt::cuda::CudaDevice& device, rt::cuda::CUstream stream);
// Synchronizes the device and throws the first recorded error (in the order the ops were
// issued), clearing every pending check either way. Does nothing when none is pending.
void check_kernel_errors(rt::cuda::CudaDevice& device);

}  // namespace modelc::kernels::cuda
