// Choosing where a model runs: `--device auto|cpu|cuda|cuda:N`.
//
//   cpu      the CPU.
//   cuda:N   CUDA device N as the driver numbers them, which is after CUDA_VISIBLE_DEVICES
//            (the driver applies it: with CUDA_VISIBLE_DEVICES=3, cuda:0 is the machine's
//            fourth GPU). An error, saying why, when it cannot be used. `cuda` is cuda:0.
//   auto     cuda:0 when a driver and a device are there, else the CPU, with the reason.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

namespace modelc::rt::cuda {

class Driver;

struct DeviceSpec {
  enum class Kind : unsigned char { Auto, Cpu, Cuda } kind = Kind::Auto;
  int index = 0;  // Cuda: the ordinal
  std::string str() const;  // "auto", "cpu", "cuda:1"
};

// Parses a --device value; throws RuntimeError naming the value and the accepted forms.
DeviceSpec parse_device(const std::string& text);

struct DeviceInfo {
  int ordinal = 0;
  std::string name;  // "NVIDIA H200"
  int cc_major = 0, cc_minor = 0;
  int multiprocessors = 0;
  size_t total_memory = 0;
  std::string str() const;  // "cuda:0 NVIDIA H200 (sm_90, 132 SMs, 139.8 GiB)"
  std::string sm() const;   // "sm_90"
};

// The devices the driver sees (after CUDA_VISIBLE_DEVICES); throws CudaError when the driver
// is unavailable or a query fails.
std::vector<DeviceInfo> list_devices(const Driver& driver);

struct DeviceChoice {
  bool cuda = false;
  std::optional<DeviceInfo> device;  // when cuda
  std::string reason;                // when the CPU was chosen for `auto`: why not CUDA
  std::string str() const;           // "cpu (no CUDA: ...)" or the device's str()
};

// Resolves a spec against the driver. `auto` never throws; `cuda[:N]` throws RuntimeError
// saying why the device cannot be used (no driver, cuInit failed, no such ordinal, with
// CUDA_VISIBLE_DEVICES when it is set).
DeviceChoice choose_device(const DeviceSpec& spec, const Driver& driver);

}  // namespace modelc::rt::cuda
