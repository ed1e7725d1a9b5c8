#include "runtime/device/cuda/device.h"

#include <fmt/format.h>

#include <charconv>
#include <cstdlib>

#include "runtime/device/cuda/driver.h"

namespace modelc::rt::cuda {
namespace {

std::string visible_note() {
  const char* vis = std::getenv("CUDA_VISIBLE_DEVICES");
  return vis != nullptr ? fmt::format(" (CUDA_VISIBLE_DEVICES='{}')", vis) : "";
}

}  // namespace

std::string DeviceSpec::str() const {
  switch (kind) {
    case Kind::Auto: return "auto";
    case Kind::Cpu: return "cpu";
    case Kind::Cuda: return fmt::format("cuda:{}", index);
  }
  return "?";
}

DeviceSpec parse_device(const std::string& text) {
  DeviceSpec s;
  if (text == "auto") return s;
  if (text == "cpu") {
    s.kind = DeviceSpec::Kind::Cpu;
    return s;
  }
  if (text == "cuda" || text.rfind("cuda:", 0) == 0) {
    s.kind = DeviceSpec::Kind::Cuda;
    if (text.size() > 5) {
      const char* first = text.data() + 5;
      const char* last = text.data() + text.size();
      auto [p, ec] = std::from_chars(first, last, s.index);
      if (ec == std::errc() && p == last && s.index >= 0) return s;
    } else if (text == "cuda") {
      return s;
    }
  }
  throw RuntimeError(fmt::format("bad device '{}': expected auto, cpu, cuda or cuda:N (N a device number from 0)", text));
}

std::string DeviceInfo::sm() const { return fmt::format("sm_{}{}", cc_major, cc_minor); }

std::string DeviceInfo::str() const {
  return fmt::format("cuda:{} {} ({}, {} SMs, {:.1f} GiB)", ordinal, name, sm(), multiprocessors,
                     static_cast<double>(total_memory) / (1024.0 * 1024.0 * 1024.0));
}

std::vector<DeviceInfo> list_devices(const Driver& driver) {
  int count = 0;
  MODELC_CU(driver, cuDeviceGetCount(&count));
  std::vector<DeviceInfo> out;
  for (int i = 0; i < count; ++i) {
    CUdevice dev = 0;
    MODELC_CU(driver, cuDeviceGet(&dev, i));
    DeviceInfo info;
    info.ordinal = i;
    char name[256] = {};
    MODELC_CU(driver, cuDeviceGetName(name, sizeof(name) - 1, dev));
    info.name = name;
    MODELC_CU(driver, cuDeviceGetAttribute(&info.cc_major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev));
    MODELC_CU(driver, cuDeviceGetAttribute(&info.cc_minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev));
    MODELC_CU(driver, cuDeviceGetAttribute(&info.multiprocessors, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev));
    MODELC_CU(driver, cuDeviceTotalMem_v2(&info.total_memory, dev));
    out.push_back(std::move(info));
  }
  return out;
}

std::string DeviceChoice::str() const {
  if (cuda && device) return device->str();
  return reason.empty() ? "cpu" : fmt::format("cpu (CUDA not used: {})", reason);
}

DeviceChoice choose_device(const DeviceSpec& spec, const Driver& driver) {
  DeviceChoice c;
  if (spec.kind == DeviceSpec::Kind::Cpu) return c;
  std::string why;
  std::vector<DeviceInfo> devices;
  if (!driver.available()) {
    why = driver.reason();
  } else {
    try {
      devices = list_devices(driver);
      if (devices.empty()) why = "the driver sees no CUDA device" + visible_note();
    } catch (const CudaError& e) {
      why = e.what();
    }
  }
  if (why.empty() && spec.kind == DeviceSpec::Kind::Cuda && spec.index >= static_cast<int>(devices.size()))
    why = fmt::format("there is no device cuda:{}: the driver sees {} device{}{}", spec.index, devices.size(),
                      devices.size() == 1 ? "" : "s", visible_note());
  if (!why.empty()) {
    if (spec.kind == DeviceSpec::Kind::Cuda) throw RuntimeError(fmt::format("cannot use {}: {}", spec.str(), why));
    c.reason = why;
    return c;
  }
  c.cuda = true;
  c.device = devices[static_cast<size_t>(spec.kind == DeviceSpec::Kind::Cuda ? spec.index : 0)];
  return c;
}

}  // namespace modelc::rt::cuda
