#include "runtime/device/cuda/context.h"

#include <fmt/format.h>

namespace modelc::rt::cuda {

Context::Context(const Driver& driver, int ordinal) : driver_(driver) {
  std::vector<DeviceInfo> devices = list_devices(driver);
  if (ordinal < 0 || ordinal >= static_cast<int>(devices.size()))
    throw RuntimeError(fmt::format("there is no device cuda:{}: the driver sees {}", ordinal, devices.size()));
  info_ = devices[static_cast<size_t>(ordinal)];
  MODELC_CU(driver_, cuDeviceGet(&device_, ordinal));
  MODELC_CU(driver_, cuDevicePrimaryCtxRetain(&ctx_, device_));
  make_current();
}

Context::~Context() {
  if (ctx_ != nullptr) driver_.api().cuDevicePrimaryCtxRelease_v2(device_);
}

void Context::make_current() const { MODELC_CU(driver_, cuCtxSetCurrent(ctx_)); }

void Context::synchronize() const { MODELC_CU(driver_, cuCtxSynchronize()); }

CUstream Context::create_stream() const {
  CUstream s = nullptr;
  MODELC_CU(driver_, cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  return s;
}

void Context::destroy_stream(CUstream s) const noexcept {
  if (s != nullptr) driver_.api().cuStreamDestroy_v2(s);
}

}  // namespace modelc::rt::cuda
