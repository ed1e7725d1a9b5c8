// The CUDA driver, loaded at run time with dlopen (never linked): a machine without a driver
// runs the runtime on the CPU and can say why. Every failed driver call throws CudaError,
// whose message carries the file and line of the call, the entry point and the error's name
// and description:
//
//   runtime/device/cuda/memory.cc:41: cuMemAlloc_v2 failed: CUDA_ERROR_OUT_OF_MEMORY (out of memory)
//
// The library is $MODELC_LIBCUDA when that is set (a driver installed in an unusual place,
// or the fake driver the tests use), else "libcuda.so.1" found the usual way.
#pragma once

#include <memory>
#include <string>

#include "runtime/device/cuda/driver_api.h"
#include "runtime/base/error.h"

namespace modelc::rt::cuda {

class CudaError : public RuntimeError {
 public:
  CudaError(const std::string& what, CUresult code) : RuntimeError(what), code_(code) {}
  CUresult code() const { return code_; }

 private:
  CUresult code_;
};

// The error of a failed call to a GPU library (the driver, cuBLASLt, cuDNN): CudaError
// "FILE:LINE: ENTRY failed: STATUS", where ENTRY is `call`'s text up to its '(' and STATUS
// the library's name (and description) of the status `code`.
[[noreturn]] void call_failed(const char* call, const char* file, int line, const std::string& status, int code);

class Driver {
 public:
  // The process's driver, loaded and initialised (cuInit) on first use. Never throws: when
  // the library is missing or cuInit fails, available() is false and reason() says why.
  static Driver& instance();

  // Loads the library at `path` (a name dlopen searches for, or a path) and calls cuInit(0).
  // Never throws. The library stays loaded for the life of the process (unloading a CUDA
  // driver is not safe), so two Drivers of one path share its state.
  explicit Driver(const std::string& path);
  Driver(const Driver&) = delete;
  Driver& operator=(const Driver&) = delete;

  bool available() const { return available_; }
  // Why the driver cannot be used ("" when it can), e.g. "libcuda.so.1 could not be loaded
  // (libcuda.so.1: cannot open shared object file: No such file or directory)".
  const std::string& reason() const { return reason_; }
  const std::string& path() const { return path_; }
  // The driver's CUDA version as cuDriverGetVersion gives it (13000 for 13.0); 0 if unknown.
  int version() const { return version_; }

  // The entry points; throws CudaError carrying reason() when the driver is unavailable.
  const DriverApi& api() const;

  // "CUDA_ERROR_OUT_OF_MEMORY"; "CUDA error 12345" for a code the driver does not know.
  std::string error_name(CUresult r) const;
  // The driver's description of the error ("out of memory"), or "" when it has none.
  std::string error_string(CUresult r) const;
  // Throws CudaError "FILE:LINE: ENTRY failed: NAME (DESCRIPTION)" unless r is CUDA_SUCCESS.
  // `call` is the call's text; the entry point is the part before its '('.
  void check(CUresult r, const char* call, const char* file, int line) const;

 private:
  DriverApi api_;
  std::string path_, reason_;
  bool available_ = false;
  int version_ = 0;
};

// The library path Driver::instance() loads: $MODELC_LIBCUDA or "libcuda.so.1".
std::string default_driver_path();

}  // namespace modelc::rt::cuda

// Calls a driver entry point through `driver` and throws CudaError with this file and line
// when it fails: MODELC_CU(drv, cuMemAlloc_v2(&ptr, bytes));
#define MODELC_CU(driver, call) (driver).check((driver).api().call, #call, __FILE__, __LINE__)
