// The driver's loading, its errors and the choice of device, against a missing driver and
// the fake one (tests/cuda/fake).
#include <gtest/gtest.h>

#include <regex>
#include <string>

#include "runtime/device/cuda/device.h"
#include "runtime/device/cuda/driver.h"
#include "tests/cuda/fake_driver.h"

namespace modelc::test {
namespace {

using rt::cuda::choose_device;
using rt::cuda::CudaError;
using rt::cuda::DeviceSpec;
using rt::cuda::Driver;
using rt::cuda::parse_device;

TEST(CudaDriver, AMissingLibraryIsUnavailableWithTheLoadersReason) {
  Driver d("/nonexistent/libcuda.so.1");
  EXPECT_FALSE(d.available());
  EXPECT_NE(d.reason().find("the CUDA driver /nonexistent/libcuda.so.1 could not be loaded ("), std::string::npos) << d.reason();
  EXPECT_NE(d.reason().find("No such file"), std::string::npos) << d.reason();
  std::string msg = message_of([&] { d.api(); });
  EXPECT_EQ(msg, "CUDA is not available: " + d.reason());
  // auto falls back to the CPU and says why; an explicit cuda is an error saying why.
  auto c = choose_device(parse_device("auto"), d);
  EXPECT_FALSE(c.cuda);
  EXPECT_EQ(c.reason, d.reason());
  EXPECT_EQ(c.str(), "cpu (CUDA not used: " + d.reason() + ")");
  EXPECT_EQ(message_of([&] { choose_device(parse_device("cuda"), d); }), "cannot use cuda:0: " + d.reason());
  EXPECT_FALSE(choose_device(parse_device("cpu"), d).cuda);
  EXPECT_EQ(choose_device(parse_device("cpu"), d).reason, "");
}

TEST(CudaDriver, ALibraryWithoutTheEntryPointsIsUnavailable) {
  // libz is a real shared library that is not a CUDA driver.
  Driver d("libz.so.1");
  ASSERT_FALSE(d.available());
  EXPECT_NE(d.reason().find("lacks entry points the runtime needs: cuGetErrorName, cuGetErrorString, cuInit"),
            std::string::npos)
      << d.reason();
}

TEST(CudaDriver, TheEnvironmentNamesTheLibrary) {
  {
    ScopedEnv e("MODELC_LIBCUDA", std::nullopt);
    EXPECT_EQ(rt::cuda::default_driver_path(), "libcuda.so.1");
  }
  ScopedEnv e("MODELC_LIBCUDA", fake_libcuda());
  EXPECT_EQ(rt::cuda::default_driver_path(), fake_libcuda());
}

TEST(CudaDriver, TheFakeDriverLoadsAndListsItsDevices) {
  ScopedEnv n("FAKE_CUDA_DEVICES", "2");
  ScopedEnv sm("FAKE_CUDA_SM", "80");
  Driver d(fake_libcuda());
  ASSERT_TRUE(d.available()) << d.reason();
  EXPECT_EQ(d.version(), 13000);
  auto devices = rt::cuda::list_devices(d);
  ASSERT_EQ(devices.size(), 2u);
  EXPECT_EQ(devices[1].str(), "cuda:1 Fake GPU 1 (sm_80, 4 SMs, 1.0 GiB)");
  auto c = choose_device(parse_device("auto"), d);
  ASSERT_TRUE(c.cuda);
  EXPECT_EQ(c.device->ordinal, 0);
  EXPECT_EQ(choose_device(parse_device("cuda:1"), d).device->name, "Fake GPU 1");
  EXPECT_EQ(message_of([&] { choose_device(parse_device("cuda:2"), d); }),
            "cannot use cuda:2: there is no device cuda:2: the driver sees 2 devices");
  ScopedEnv vis("CUDA_VISIBLE_DEVICES", "1");
  ScopedEnv one("FAKE_CUDA_DEVICES", "1");
  EXPECT_EQ(message_of([&] { choose_device(parse_device("cuda:1"), d); }),
            "cannot use cuda:1: there is no device cuda:1: the driver sees 1 device (CUDA_VISIBLE_DEVICES='1')");
}

TEST(CudaDriver, NoVisibleDeviceFallsBackOrFails) {
  ScopedEnv n("FAKE_CUDA_DEVICES", "0");
  ScopedEnv vis("CUDA_VISIBLE_DEVICES", "");
  Driver d(fake_libcuda());
  ASSERT_TRUE(d.available());
  auto c = choose_device(parse_device("auto"), d);
  EXPECT_FALSE(c.cuda);
  EXPECT_EQ(c.reason, "the driver sees no CUDA device (CUDA_VISIBLE_DEVICES='')");
  EXPECT_EQ(message_of([&] { choose_device(parse_device("cuda"), d); }),
            "cannot use cuda:0: the driver sees no CUDA device (CUDA_VISIBLE_DEVICES='')");
}

TEST(CudaDriver, AFailedInitIsUnavailableWithTheErrorsName) {
  ScopedEnv init("FAKE_CUDA_INIT", "100");
  ScopedEnv vis("CUDA_VISIBLE_DEVICES", std::nullopt);
  Driver d(fake_libcuda());
  EXPECT_FALSE(d.available());
  EXPECT_EQ(d.reason(), "cuInit failed: CUDA_ERROR_NO_DEVICE (no CUDA-capable device is detected)");
  EXPECT_FALSE(choose_device(parse_device("auto"), d).cuda);
}

TEST(CudaDriver, FailedCallsCarryFileLineAndTheErrorsName) {
  Driver d(fake_libcuda());
  ASSERT_TRUE(d.available()) << d.reason();
  rt::cuda::CUdevice dev = 0;
  const int line = __LINE__ + 2;
  try {
    MODELC_CU(d, cuDeviceGet(&dev, 7));
    FAIL() << "no exception";
  } catch (const CudaError& e) {
    EXPECT_EQ(std::string(e.what()), "tests/cuda/driver_test.cc:" + std::to_string(line) +
                                         ": cuDeviceGet failed: CUDA_ERROR_INVALID_DEVICE (invalid device ordinal)");
    EXPECT_EQ(e.code(), rt::cuda::CUDA_ERROR_INVALID_DEVICE);
  }
  EXPECT_NO_THROW(MODELC_CU(d, cuDeviceGet(&dev, 0)));
  EXPECT_EQ(d.error_name(12345), "CUDA error 12345");
  EXPECT_EQ(d.error_string(12345), "");
}

TEST(DeviceSpec, ParsesEveryFormAndRejectsTheRest) {
  EXPECT_EQ(parse_device("auto").kind, DeviceSpec::Kind::Auto);
  EXPECT_EQ(parse_device("cpu").kind, DeviceSpec::Kind::Cpu);
  EXPECT_EQ(parse_device("cuda").str(), "cuda:0");
  EXPECT_EQ(parse_device("cuda:0").str(), "cuda:0");
  EXPECT_EQ(parse_device("cuda:12").index, 12);
  for (const char* bad : {"", "gpu", "cuda:", "cuda:-1", "cuda:1x", "cuda:x", "CPU", "cuda0", " cpu"})
    EXPECT_EQ(message_of([&] { parse_device(bad); }),
              std::string("bad device '") + bad + "': expected auto, cpu, cuda or cuda:N (N a device number from 0)")
        << bad;
}

}  // namespace
}  // namespace modelc::test
