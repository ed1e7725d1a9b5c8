#include "runtime/device/cuda/driver.h"

#include "runtime/device/cuda/dynlib.h"

#include <dlfcn.h>
#include <fmt/format.h>

#include <cstdlib>
#include <string_view>

namespace modelc::rt::cuda {

std::string default_driver_path() {
  const char* env = std::getenv("MODELC_LIBCUDA");
  return env != nullptr && *env != '\0' ? std::string(env) : std::string("libcuda.so.1");
}

Driver& Driver::instance() {
  static Driver* driver = new Driver(default_driver_path());  // never destroyed: see the constructor
  return *driver;
}

Driver::Driver(const std::string& path) : path_(path) {
  // RTLD_NODELETE: the driver stays mapped even if a handle were closed.
  void* lib = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
  if (lib == nullptr) {
    const char* err = dlerror();
    reason_ = fmt::format("the CUDA driver {} could not be loaded ({})", path, err != nullptr ? err : "unknown error");
    return;
  }
  const DynLib loaded{lib, path, ""};
  std::string missing;
#define MODELC_CUDA_RESOLVE(name, type) resolve(loaded, #name, api_.name, missing);
  MODELC_CUDA_DRIVER_FUNCTIONS(MODELC_CUDA_RESOLVE)
#undef MODELC_CUDA_RESOLVE
  if (!missing.empty()) {
    reason_ = fmt::format("the CUDA driver {} lacks entry points the runtime needs: {} (a driver for CUDA 12 or later "
                          "is needed)",
                          path, missing);
    return;
  }
  CUresult r = api_.cuInit(0);
  if (r != CUDA_SUCCESS) {
    const char* vis = std::getenv("CUDA_VISIBLE_DEVICES");
    reason_ = fmt::format("cuInit failed: {}{}{}", error_name(r),
                          error_string(r).empty() ? "" : " (" + error_string(r) + ")",
                          vis != nullptr ? fmt::format(" with CUDA_VISIBLE_DEVICES='{}'", vis) : "");
    return;
  }
  if (api_.cuDriverGetVersion(&version_) != CUDA_SUCCESS) version_ = 0;
  available_ = true;
}

const DriverApi& Driver::api() const {
  if (!available_) throw CudaError(fmt::format("CUDA is not available: {}", reason_), CUDA_ERROR_NOT_INITIALIZED);
  return api_;
}

std::string Driver::error_name(CUresult r) const {
  const char* name = nullptr;
  if (api_.cuGetErrorName != nullptr && api_.cuGetErrorName(r, &name) == CUDA_SUCCESS && name != nullptr) return name;
  return fmt::format("CUDA error {}", r);
}

std::string Driver::error_string(CUresult r) const {
  const char* text = nullptr;
  if (api_.cuGetErrorString != nullptr && api_.cuGetErrorString(r, &text) == CUDA_SUCCESS && text != nullptr) return text;
  return "";
}

void call_failed(const char* call, const char* file, int line, const std::string& status, int code) {
  std::string_view entry(call);
  entry = entry.substr(0, entry.find('('));
  throw CudaError(fmt::format("{}:{}: {} failed: {}", file, line, entry, status), code);
}

void Driver::check(CUresult r, const char* call, const char* file, int line) const {
  if (r == CUDA_SUCCESS) return;
  const std::string desc = error_string(r);
  call_failed(call, file, line, desc.empty() ? error_name(r) : error_name(r) + " (" + desc + ")", r);
}

}  // namespace modelc::rt::cuda
