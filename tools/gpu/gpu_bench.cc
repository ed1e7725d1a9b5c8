// gpu_bench: the benchmark half of tools/gpu-check (docs/gpu.md), on the first CUDA device.
//  1. matmul through cuBLASLt: TFLOP/s for f32, tf32, bf16 and fp16 at 8192^3 (median of 10
//     timed products after 3 warm-ups, timed with CUDA events);
//  2. each prepared plan in $MODELC_GPU_BUNDLE/plans: the median train step (wall clock, 20
//     steps after 3 warm-ups, on the plan's first batch), the fused plan against its unfused
//     twin (NAME_unfused.plan), and the memory bandwidth the fused kernels achieve (bytes
//     each reads and writes over its event-timed duration, over 5 profiled steps).
// Prints two tables; exit status 2 without a GPU.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <iostream>
#include <map>
#include <random>

#include "kernels/cpu/library.h"
#include "runtime/session/checkpoint.h"
#include "runtime/device/cuda/cuda_device.h"
#include "runtime/device/cuda/device.h"
#include "runtime/execution/cuda/executor.h"
#include "kernels/cuda/library.h"
#include "runtime/session/plan.h"
#include "runtime/session/session.h"

namespace fs = std::filesystem;
using namespace modelc;
using rt::ElemType;

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// Median milliseconds of one matmul [n, n] @ [n, n] of type t.
double time_matmul(rt::cuda::CudaDevice& dev, ElemType t, int64_t n) {
  const rt::cuda::Driver& drv = dev.driver();
  const size_t in_bytes = static_cast<size_t>(n * n) * dtype_bytes(t), out_bytes = static_cast<size_t>(n * n) * 4;
  void* a = dev.allocator().allocate(in_bytes, rt::cuda::stream_id(dev.stream()));
  void* b = dev.allocator().allocate(in_bytes, rt::cuda::stream_id(dev.stream()));
  void* d = dev.allocator().allocate(out_bytes, rt::cuda::stream_id(dev.stream()));
  std::vector<uint8_t> host(in_bytes);
  std::mt19937 rng(1);
  std::normal_distribution<float> nd;
  for (int64_t i = 0; i < n * n; ++i) {
    const float v = nd(rng);
    if (t == ElemType::F32) std::memcpy(host.data() + 4 * i, &v, 4);
    else {
      const uint16_t h = kernels::f32_to_low(v, t);
      std::memcpy(host.data() + 2 * i, &h, 2);
    }
  }
  for (void* p : {a, b})
    MODELC_CU(drv, cuMemcpyHtoDAsync_v2(reinterpret_cast<rt::cuda::CUdeviceptr>(p), host.data(), in_bytes, dev.stream()));
  rt::cuda::CudaLibCall c;
  c.call.op = "matmul";
  c.call.where = "gpu_bench";
  c.call.inputs = {{a, t, {n, n}}, {b, t, {n, n}}};
  c.call.outputs = {{d, ElemType::F32, {n, n}}};
  c.device = &dev;
  c.stream = dev.stream();
  auto matmul = rt::cuda::find_cuda_library_op("matmul");
  rt::cuda::CUevent e0 = nullptr, e1 = nullptr;
  MODELC_CU(drv, cuEventCreate(&e0, 0));
  MODELC_CU(drv, cuEventCreate(&e1, 0));
  std::vector<double> ms;
  for (int i = 0; i < 13; ++i) {
    MODELC_CU(drv, cuEventRecord(e0, dev.stream()));
    matmul(c);
    MODELC_CU(drv, cuEventRecord(e1, dev.stream()));
    MODELC_CU(drv, cuEventSynchronize(e1));
    float t_ms = 0;
    MODELC_CU(drv, cuEventElapsedTime(&t_ms, e0, e1));
    if (i >= 3) ms.push_back(t_ms);
  }
  drv.api().cuEventDestroy_v2(e0);
  drv.api().cuEventDestroy_v2(e1);
  for (void* p : {a, b, d}) dev.allocator().free(p);
  return median(ms);
}

struct PlanResult {
  double ms = 0;
  double fused_gbs = 0, best_gbs = 0;
  std::string best;
  int64_t codelets = 0;
};

PlanResult bench_plan(const fs::path& plan) {
  const std::string stem = (plan.parent_path() / plan.stem()).string();
  auto program = rt::read_plan(plan.string());
  rt::Checkpoint batches = rt::load_checkpoint(stem + ".batches.safetensors");
  std::map<std::string, rt::HostTensor> feed;
  for (const auto& [name, t] : batches.tensors)
    if (name.rfind("step0.", 0) == 0) feed[name.substr(6)] = t;
  rt::Session s(program, {.threads = 4, .seed = 1, .total_steps = 1000, .device = "cuda"});
  for (int i = 0; i < 3; ++i) s.train_step(feed);
  std::vector<double> ms;
  for (int i = 0; i < 20; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    s.train_step(feed);
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  PlanResult r;
  r.ms = median(ms);
  s.set_profiling(true);
  for (int i = 0; i < 5; ++i) s.train_step(feed);
  double bytes = 0, time = 0;
  for (const rt::cuda::InstrTime& t : s.profile("train_step")) {
    if (!t.codelet) continue;
    ++r.codelets;
    if (t.nodes <= 1 || t.runs == 0 || t.ms <= 0) continue;
    const double b = static_cast<double>(t.bytes) * static_cast<double>(t.runs), sec = t.ms / 1e3;
    bytes += b;
    time += sec;
    if (t.bytes >= (1 << 20) && b / sec / 1e9 > r.best_gbs) {
      r.best_gbs = b / sec / 1e9;
      r.best = t.name;
    }
  }
  r.fused_gbs = time > 0 ? bytes / time / 1e9 : 0;
  return r;
}

}  // namespace

int main() {
  try {
    const rt::cuda::Driver& driver = rt::cuda::Driver::instance();
    auto choice = rt::cuda::choose_device(rt::cuda::parse_device("auto"), driver);
    if (!choice.cuda) {
      std::cerr << "gpu_bench: no GPU: " << choice.reason << "\n";
      return 2;
    }
    std::cout << "\n" << choice.device->str() << ", " << rt::cuda::blaslt_status() << "\n\n";
    {
      rt::cuda::CudaDevice dev(driver, 0);
      const int64_t n = 8192;
      fmt::print("{:<22} {:>10} {:>10}\n", "matmul 8192^3", "ms", "TFLOP/s");
      for (auto [name, t, tf32] : {std::tuple{"f32", ElemType::F32, false}, std::tuple{"tf32", ElemType::F32, true},
                                   std::tuple{"bf16 (f32 out)", ElemType::BF16, false},
                                   std::tuple{"fp16 (f32 out)", ElemType::F16, false}}) {
        dev.set_allow_tf32(tf32);
        const double ms = time_matmul(dev, t, n);
        fmt::print("{:<22} {:>10.3f} {:>10.1f}\n", name, ms, 2.0 * n * n * n / (ms / 1e3) / 1e12);
      }
    }
    const char* bundle = std::getenv("MODELC_GPU_BUNDLE");
    if (bundle == nullptr) {
      std::cout << "\nno prepared plans (MODELC_GPU_BUNDLE unset): step times skipped\n";
      return 0;
    }
    std::vector<fs::path> plans;
    for (const auto& e : fs::directory_iterator(fs::path(bundle) / "plans"))
      if (e.path().extension() == ".plan") plans.push_back(e.path());
    std::sort(plans.begin(), plans.end());
    std::map<std::string, PlanResult> results;
    for (const fs::path& p : plans) results[p.stem().string()] = bench_plan(p);
    fmt::print("\n{:<20} {:>10} {:>12} {:>8} {:>8} {:>14} {:>14}  {}\n", "plan", "ms/step", "unfused ms", "speedup",
               "kernels", "fused GB/s", "best GB/s", "best kernel");
    for (const auto& [name, r] : results) {
      if (name.ends_with("_unfused")) continue;
      auto u = results.find(name + "_unfused");
      fmt::print("{:<20} {:>10.3f} {:>12} {:>8} {:>8} {:>14.0f} {:>14.0f}  {}\n", name, r.ms,
                 u == results.end() ? "" : fmt::format("{:.3f}", u->second.ms),
                 u == results.end() ? "" : fmt::format("{:.2f}x", u->second.ms / r.ms), r.codelets, r.fused_gbs, r.best_gbs,
                 r.best);
    }
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "gpu_bench: error: " << e.what() << "\n";
    return 1;
  }
}
