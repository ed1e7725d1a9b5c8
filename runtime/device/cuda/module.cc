#include "runtime/device/cuda/module.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cstring>
#include <vector>

namespace modelc::rt::cuda {

uint32_t launch_grid(GpuMapping mapping, uint32_t block, int64_t n, int multiprocessors) {
  if (n <= 0) return 1;
  const int64_t cap = 32 * static_cast<int64_t>(std::max(multiprocessors, 1));
  int64_t g = mapping == GpuMapping::Thread ? (n + 4 * static_cast<int64_t>(block) - 1) / (4 * static_cast<int64_t>(block)) : n;
  return static_cast<uint32_t>(std::clamp<int64_t>(g, 1, cap));
}

void check_target(const std::string& target, const DeviceInfo& device) {
  int sm = 0;
  const bool ok = target.rfind("sm_", 0) == 0 && target.size() > 3 &&
                  std::from_chars(target.data() + 3, target.data() + target.size(), sm).ec == std::errc() && sm > 0;
  // "sm_90a" parses as 90: its arch-specific features need exactly a 9.0 device.
  if (!ok) throw RuntimeError(fmt::format("the plan's GPU code names an unknown target '{}'", target));
  const int have = device.cc_major * 10 + device.cc_minor;
  const bool arch_specific = target.back() == 'a';
  if (sm > have || (arch_specific && sm != have))
    throw RuntimeError(fmt::format("the plan's GPU code is compiled for {} but {} is {}: recompile with --target {}", target,
                                   fmt::format("cuda:{} ({})", device.ordinal, device.name), device.sm(), device.sm()));
}

Module::Module(const Context& ctx, const std::string& ptx, const std::string& target) : ctx_(ctx) {
  check_target(target, ctx.info());
  std::vector<char> error_log(64 * 1024, '\0'), info_log(16 * 1024, '\0');
  CUjit_option options[] = {CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES, CU_JIT_INFO_LOG_BUFFER,
                            CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES, CU_JIT_WALL_TIME};
  // Option values travel as void*: sizes by value, as the driver API documents.
  float wall = 0;
  void* values[] = {error_log.data(), reinterpret_cast<void*>(static_cast<uintptr_t>(error_log.size() - 1)), info_log.data(),
                    reinterpret_cast<void*>(static_cast<uintptr_t>(info_log.size() - 1)), nullptr};
  const Driver& d = ctx_.driver();
  CUresult r = d.api().cuModuleLoadDataEx(&module_, ptx.c_str(), 5, options, values);
  if (r != CUDA_SUCCESS) {
    std::string log(error_log.data());
    while (!log.empty() && (log.back() == '\n' || log.back() == '\0')) log.pop_back();
    std::string desc = d.error_string(r);
    throw CudaError(fmt::format("{}:{}: loading the plan's PTX ({}) on cuda:{} failed: {}{}{}", __FILE__, __LINE__, target,
                                ctx_.info().ordinal, d.error_name(r), desc.empty() ? "" : " (" + desc + ")",
                                log.empty() ? "" : "\nJIT log:\n" + log),
                    r);
  }
  // CU_JIT_WALL_TIME comes back in the value slot itself, as a float's bits.
  uintptr_t bits = reinterpret_cast<uintptr_t>(values[4]);
  uint32_t b32 = static_cast<uint32_t>(bits);
  static_assert(sizeof(float) == sizeof(uint32_t));
  std::memcpy(&wall, &b32, sizeof(wall));
  jit_ms_ = wall;
  info_log_ = info_log.data();
}

Module::~Module() {
  if (module_ != nullptr) ctx_.driver().api().cuModuleUnload(module_);
}

CUfunction Module::function(const std::string& name) {
  auto it = functions_.find(name);
  if (it != functions_.end()) return it->second;
  CUfunction f = nullptr;
  CUresult r = ctx_.driver().api().cuModuleGetFunction(&f, module_, name.c_str());
  if (r == CUDA_ERROR_NOT_FOUND) throw RuntimeError(fmt::format("the plan's PTX has no kernel '{}'", name));
  ctx_.driver().check(r, "cuModuleGetFunction", __FILE__, __LINE__);
  functions_.emplace(name, f);
  return f;
}

void Module::launch(const CodeletDesc& k, CUdeviceptr buffers, CUdeviceptr sizes, int64_t begin, int64_t end, CUstream stream) {
  if (end <= begin) return;
  CUfunction f = function(k.name);
  const uint32_t grid = launch_grid(k.gpu_mapping, k.gpu_block, end - begin, ctx_.info().multiprocessors);
  uint64_t b = buffers, s = sizes;
  int64_t lo = begin, hi = end;
  void* params[] = {&b, &s, &lo, &hi};
  MODELC_CU(ctx_.driver(), cuLaunchKernel(f, grid, 1, 1, k.gpu_block, 1, 1, 0, stream, params, nullptr));
}

void Module::launch_raw(const std::string& name, uint32_t grid, uint32_t block, void** params, CUstream stream) {
  CUfunction f = function(name);
  MODELC_CU(ctx_.driver(), cuLaunchKernel(f, std::max<uint32_t>(grid, 1), 1, 1, block, 1, 1, 0, stream, params, nullptr));
}

}  // namespace modelc::rt::cuda
