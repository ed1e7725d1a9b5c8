// The CUDA halves of the caching allocator and the module loader, on the fake driver: the
// real allocator algorithm over cuMemAlloc, events, out of memory, pinned memory; PTX
// loading with the JIT's log, launches with the ABI's grid, target checks.
#include <gtest/gtest.h>

#include <random>

#include "runtime/device/cuda/context.h"
#include "runtime/device/cuda/memory.h"
#include "runtime/device/cuda/module.h"
#include "runtime/device/memory/caching_allocator.h"
#include "tests/cuda/fake_driver.h"

namespace modelc::test {
namespace {

using namespace rt::cuda;

Driver& fake() {
  static Driver d(fake_libcuda());
  return d;
}

TEST(CudaMemory, TheCachingAllocatorRunsOnDeviceMemory) {
  ScopedEnv mem("FAKE_CUDA_MEMORY", std::to_string(256 << 20));
  FakeCounts before = fake_counts();
  {
    Context ctx(fake(), 0);
    EXPECT_EQ(fake_counts().contexts, before.contexts + 1);
    DeviceRawAllocator raw(ctx);
    CudaEventBackend events(ctx);
    rt::CachingAllocator alloc(raw.name(), raw, events);
    CUstream s = ctx.create_stream();
    std::mt19937 rng(std::random_device{}());
    std::vector<void*> live;
    for (int i = 0; i < 200; ++i) {
      if (!live.empty() && rng() % 3 == 0) {
        size_t k = rng() % live.size();
        alloc.free(live[k]);
        live.erase(live.begin() + static_cast<long>(k));
      } else {
        void* p = alloc.allocate(1 + rng() % (1 << 20), rng() % 2 ? stream_id(s) : rt::kDefaultStream);
        EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 256, 0u);
        if (rng() % 4 == 0) alloc.record_stream(p, stream_id(s));
        live.push_back(p);
      }
      alloc.check_invariants();
    }
    // The fake's own count of device bytes is what the allocator reserved.
    EXPECT_EQ(fake_counts().device_bytes - before.device_bytes, static_cast<size_t>(alloc.stats().all.reserved_bytes.current));
    // More than the device holds: release-and-retry, then a clear out-of-memory error.
    std::string msg = message_of([&] { alloc.allocate(size_t{300} << 20); });
    EXPECT_NE(msg.find("out of memory"), std::string::npos) << msg;
    EXPECT_NE(msg.find("cuda:0"), std::string::npos) << msg;
    for (void* p : live) alloc.free(p);
    alloc.empty_cache();
    EXPECT_EQ(fake_counts().device_bytes, before.device_bytes);
    EXPECT_GT(fake_counts().events, before.events - 1);
    ctx.destroy_stream(s);
  }
  FakeCounts after = fake_counts();
  EXPECT_EQ(after.device_bytes, before.device_bytes);
  EXPECT_EQ(after.events, before.events) << "every event destroyed";
  EXPECT_EQ(after.contexts, before.contexts) << "the primary context released";
  EXPECT_EQ(after.streams, before.streams);
}

TEST(CudaMemory, PinnedHostMemoryIsUsableAndReturned) {
  Context ctx(fake(), 0);
  PinnedRawAllocator raw(ctx);
  rt::ImmediateEventBackend events;
  size_t before = fake_counts().pinned;
  {
    rt::CachingAllocator alloc("pinned", raw, events);
    auto* p = static_cast<unsigned char*>(alloc.allocate(4096));
    for (int i = 0; i < 4096; ++i) p[i] = static_cast<unsigned char>(i);
    EXPECT_EQ(p[4095], 255);
    alloc.free(p);
    EXPECT_EQ(fake_counts().pinned, before + 1) << "kept in the cache";
  }
  EXPECT_EQ(fake_counts().pinned, before);
}

TEST(CudaMemory, EventsOfAnUnknownIdAreErrors) {
  Context ctx(fake(), 0);
  CudaEventBackend events(ctx);
  rt::EventId e = events.create();
  events.record(e, rt::kDefaultStream);
  EXPECT_TRUE(events.query(e));
  events.synchronize(e);
  events.destroy(e);
  EXPECT_EQ(message_of([&] { events.query(e); }), "CUDA event backend: unknown event " + std::to_string(e));
}

TEST(CudaLaunch, TheGridFollowsTheAbi) {
  using rt::GpuMapping;
  std::mt19937 rng(std::random_device{}());
  for (int i = 0; i < 1000; ++i) {
    const uint32_t block = 32u * (1 + rng() % 32);
    const int sms = 1 + static_cast<int>(rng() % 200);
    const int64_t n = static_cast<int64_t>(rng() % 10'000'000);
    const int64_t cap = 32 * sms;
    const uint32_t t = launch_grid(GpuMapping::Thread, block, n, sms);
    const uint32_t b = launch_grid(GpuMapping::Block, block, n, sms);
    EXPECT_GE(t, 1u);
    EXPECT_LE(t, cap);
    // Thread: enough threads for 4 items each, unless capped.
    if (t < cap && n > 0) {
      EXPECT_GE(int64_t{t} * 4 * block, n);
      EXPECT_LT(int64_t{t - 1} * 4 * block, n);
    }
    EXPECT_EQ(b, n == 0 ? 1u : static_cast<uint32_t>(std::min<int64_t>(n, cap)));
  }
  EXPECT_EQ(launch_grid(GpuMapping::Thread, 256, -5, 10), 1u);
}

TEST(CudaLaunch, TargetsMustSuitTheDevice) {
  DeviceInfo h200{0, "NVIDIA H200", 9, 0, 132, 0};
  DeviceInfo a100{1, "NVIDIA A100", 8, 0, 108, 0};
  EXPECT_NO_THROW(check_target("sm_80", h200));
  EXPECT_NO_THROW(check_target("sm_90", h200));
  EXPECT_NO_THROW(check_target("sm_90a", h200));
  EXPECT_NO_THROW(check_target("sm_80", a100));
  EXPECT_EQ(message_of([&] { check_target("sm_90", a100); }),
            "the plan's GPU code is compiled for sm_90 but cuda:1 (NVIDIA A100) is sm_80: recompile with --target sm_80");
  EXPECT_EQ(message_of([&] { check_target("sm_80a", h200); }),
            "the plan's GPU code is compiled for sm_80a but cuda:0 (NVIDIA H200) is sm_90: recompile with --target sm_90");
  EXPECT_EQ(message_of([&] { check_target("gfx90a", h200); }), "the plan's GPU code names an unknown target 'gfx90a'");
}

const char* kPtx = R"(.version 8.0
.target sm_80
.address_size 64
.visible .entry k0_add(.param .u64 a, .param .u64 b, .param .u64 c, .param .u64 d) { ret; }
.visible .entry k1_sum (.param .u64 a, .param .u64 b, .param .u64 c, .param .u64 d) { ret; }
)";

// A host kernel of the runtime's ABI: out[i] = in[i] + sizes[0].
void add_k(void* const* buffers, const int64_t* sizes, int64_t begin, int64_t end) {
  const auto* in = static_cast<const float*>(buffers[0]);
  auto* out = static_cast<float*>(buffers[1]);
  for (int64_t i = begin; i < end; ++i) out[i] = in[i] + static_cast<float>(sizes[0]);
}

TEST(CudaModule, LoadsFindsAndLaunchesWithThePlansConfiguration) {
  ScopedEnv sm("FAKE_CUDA_SM", "90");
  Context ctx(fake(), 0);
  Module m(ctx, kPtx, "sm_80");
  EXPECT_EQ(message_of([&] { m.function("k2_missing"); }), "the plan's PTX has no kernel 'k2_missing'");
  fake_reset();
  fake_register("k0_add", add_k);
  fake_register("k1_sum", [](void* const*, const int64_t*, int64_t, int64_t) {});  // the fake reads its ABI parameters
  // Tables and data in "device" memory, as the executor lays them out.
  DeviceRawAllocator raw(ctx);
  const int64_t n = 5000;
  auto* in = static_cast<float*>(raw.allocate(n * 4));
  auto* out = static_cast<float*>(raw.allocate(n * 4));
  auto* table = static_cast<uint64_t*>(raw.allocate(16));
  auto* sizes = static_cast<int64_t*>(raw.allocate(8));
  for (int64_t i = 0; i < n; ++i) in[i] = static_cast<float>(i);
  table[0] = reinterpret_cast<uint64_t>(in);
  table[1] = reinterpret_cast<uint64_t>(out);
  sizes[0] = 3;
  rt::CodeletDesc k;
  k.name = "k0_add";
  k.gpu_block = 128;
  m.launch(k, reinterpret_cast<CUdeviceptr>(table), reinterpret_cast<CUdeviceptr>(sizes), 0, n, nullptr);
  m.launch(k, reinterpret_cast<CUdeviceptr>(table), reinterpret_cast<CUdeviceptr>(sizes), 7, 7, nullptr);  // empty: no launch
  k.name = "k1_sum";
  k.gpu_mapping = rt::GpuMapping::Block;
  k.gpu_block = 512;
  m.launch(k, reinterpret_cast<CUdeviceptr>(table), reinterpret_cast<CUdeviceptr>(sizes), 10, 1000, nullptr);
  auto launches = fake_launches();
  ASSERT_EQ(launches.size(), 2u);
  EXPECT_EQ(launches[0].name, "k0_add");
  EXPECT_EQ(launches[0].block, 128u);
  EXPECT_EQ(launches[0].grid, 10u);  // ceil(5000 / 512)
  EXPECT_EQ(launches[0].end, n);
  EXPECT_EQ(launches[1].name, "k1_sum");
  EXPECT_EQ(launches[1].grid, 128u);  // min(990, 32 * 4 SMs)
  EXPECT_EQ(launches[1].block, 512u);
  EXPECT_EQ(launches[1].begin, 10);
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(out[i], static_cast<float>(i + 3)) << i;
  for (void* p : {static_cast<void*>(in), static_cast<void*>(out), static_cast<void*>(table), static_cast<void*>(sizes)})
    raw.free(p);
  fake_reset();
}

TEST(CudaModule, AFailedJitCarriesItsLog) {
  Context ctx(fake(), 0);
  ScopedEnv jit("FAKE_CUDA_JIT_ERROR", "1");
  std::string msg = message_of([&] { Module m(ctx, kPtx, "sm_80"); });
  EXPECT_NE(msg.find("runtime/device/cuda/module.cc:"), std::string::npos) << msg;
  EXPECT_NE(msg.find(": loading the plan's PTX (sm_80) on cuda:0 failed: CUDA_ERROR_INVALID_PTX (a PTX JIT compilation failed)\n"
                     "JIT log:\nptxas application ptx input, line 7; error   : Unknown symbol 'x'"),
            std::string::npos)
      << msg;
}

TEST(CudaModule, CodeForANewerDeviceIsRefusedBeforeTheJit) {
  ScopedEnv sm("FAKE_CUDA_SM", "80");
  Context ctx(fake(), 0);
  EXPECT_EQ(message_of([&] { Module m(ctx, kPtx, "sm_90"); }),
            "the plan's GPU code is compiled for sm_90 but cuda:0 (Fake GPU 0) is sm_80: recompile with --target sm_80");
}

}  // namespace
}  // namespace modelc::test
