// Tests that need a GPU (ctest label `gpu`): each skips, saying why, where there is none.
// tools/gpu-check runs them on a lent GPU (docs/gpu.md):
//  - the device, the driver and cuBLASLt as the runtime sees them;
//  - the caching allocator on real device memory, with copies both ways;
//  - matmul through cuBLASLt against the CPU twin: shapes with batches, broadcasts and
//    vectors, every epilogue, f32 / tf32 / bf16 / fp16;
//  - the prepared plans (tools/gpu-check --prepare, $MODELC_GPU_BUNDLE): a few training steps
//    of each on the GPU, from the same initial parameters and batches as the CPU run that
//    recorded the reference losses, within a stated tolerance.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include "kernels/cpu/library.h"
#include "kernels/cuda/run_op.h"
#include "runtime/session/checkpoint.h"
#include "runtime/device/cuda/cuda_device.h"
#include "runtime/device/cuda/device.h"
#include "kernels/cuda/library.h"
#include "runtime/session/plan.h"
#include "runtime/session/session.h"

namespace modelc::test {
namespace {

namespace fs = std::filesystem;
using rt::ElemType;
using rt::HostTensor;

// The first CUDA device, or a skip with the reason.
#define MODELC_REQUIRE_GPU()                                                                   \
  do {                                                                                         \
    auto choice = rt::cuda::choose_device(rt::cuda::parse_device("auto"), rt::cuda::Driver::instance()); \
    if (!choice.cuda) GTEST_SKIP() << "no GPU: " << choice.reason;                             \
  } while (0)

rt::cuda::CudaDevice& device() {
  static rt::cuda::CudaDevice* d = new rt::cuda::CudaDevice(rt::cuda::Driver::instance(), 0);
  return *d;
}

std::mt19937& rng() {
  static std::mt19937 r(std::random_device{}());
  return r;
}

HostTensor random_tensor(ElemType t, std::vector<int64_t> shape, float scale = 1.0f) {
  HostTensor x(t, std::move(shape));
  std::normal_distribution<float> nd(0.0f, scale);
  for (int64_t i = 0; i < x.numel(); ++i) {
    const float v = nd(rng());
    if (t == ElemType::F32) x.f32()[i] = v;
    else reinterpret_cast<uint16_t*>(x.bytes.data())[i] = kernels::f32_to_low(v, t);
  }
  return x;
}

float value(const HostTensor& t, int64_t i) {
  return t.type == ElemType::F32 ? t.f32()[i] : kernels::low_to_f32(reinterpret_cast<const uint16_t*>(t.bytes.data())[i], t.type);
}

TEST(GpuDevice, ReportsTheDeviceDriverAndLibraries) {
  MODELC_REQUIRE_GPU();
  const rt::cuda::Driver& d = rt::cuda::Driver::instance();
  std::cout << "driver: CUDA " << d.version() / 1000 << "." << d.version() % 1000 / 10 << " (" << d.path() << ")\n";
  for (const auto& info : rt::cuda::list_devices(d)) std::cout << "device: " << info.str() << "\n";
  std::cout << "cuBLASLt: " << rt::cuda::blaslt_status() << "\n";
  EXPECT_GE(device().context().info().cc_major, 7);
}

TEST(GpuMemory, TheCachingAllocatorOnDeviceMemory) {
  MODELC_REQUIRE_GPU();
  rt::cuda::CudaDevice& dev = device();
  rt::CachingAllocator& alloc = dev.allocator();
  const rt::cuda::Driver& drv = dev.driver();
  std::vector<std::pair<void*, std::vector<uint8_t>>> live;
  for (int i = 0; i < 300; ++i) {
    if (!live.empty() && rng()() % 3 == 0) {
      const size_t k = rng()() % live.size();
      // What was written is still there: blocks never overlap.
      std::vector<uint8_t> back(live[k].second.size());
      MODELC_CU(drv, cuMemcpyDtoHAsync_v2(back.data(), reinterpret_cast<rt::cuda::CUdeviceptr>(live[k].first), back.size(),
                                          dev.stream()));
      dev.synchronize();
      ASSERT_EQ(back, live[k].second);
      alloc.free(live[k].first);
      live.erase(live.begin() + static_cast<long>(k));
    } else {
      const size_t n = 1 + rng()() % (rng()() % 4 == 0 ? (24u << 20) : (64u << 10));
      void* p = alloc.allocate(n, rt::cuda::stream_id(dev.stream()));
      std::vector<uint8_t> data(n);
      for (auto& b : data) b = static_cast<uint8_t>(rng()());
      MODELC_CU(drv, cuMemcpyHtoDAsync_v2(reinterpret_cast<rt::cuda::CUdeviceptr>(p), data.data(), n, dev.stream()));
      live.emplace_back(p, std::move(data));
    }
    alloc.check_invariants();
  }
  dev.synchronize();
  for (auto& [p, d] : live) alloc.free(p);
  std::cout << alloc.memory_summary();
  alloc.empty_cache();
}

struct MatmulCase {
  std::vector<int64_t> a, b, out;
  int64_t bias = 0, act = 0;  // the epilogue: bias flag, EpilogueActivation code
};

void check_matmul(const MatmulCase& m, ElemType t, bool tf32) {
  device().set_allow_tf32(tf32);
  HostTensor a = random_tensor(t, m.a), b = random_tensor(t, m.b), bias = random_tensor(ElemType::F32, {m.out.back()});
  std::vector<const HostTensor*> in = {&a, &b};
  kernels::cuda::OpInts ints;
  if (m.bias || m.act) {
    ints["epilogue"] = {m.bias, m.act};
    if (m.bias) in.push_back(&bias);
  }
  std::vector<HostTensor> gpu = {HostTensor(ElemType::F32, m.out)}, cpu = gpu;
  kernels::cuda::run_cuda_op(device(), "matmul", in, gpu, ints);
  // The reference: the CPU twin on the same (rounded) operands widened to f32.
  auto widen = [](const HostTensor& x) {
    HostTensor w(ElemType::F32, x.shape);
    for (int64_t i = 0; i < x.numel(); ++i) w.f32()[i] = value(x, i);
    return w;
  };
  HostTensor aw = widen(a), bw = widen(b);
  std::vector<const HostTensor*> in32 = {&aw, &bw};
  if (m.bias) in32.push_back(&bias);
  kernels::cuda::run_cpu_op("matmul", in32, cpu, ints);
  const int64_t K = m.a.back();
  // f32: summation order only; tf32 and f16/bf16 inputs: 10-bit mantissas in the products.
  const double tol = (t == ElemType::F32 && !tf32 ? 2e-6 : 2e-3) * std::sqrt(static_cast<double>(K)) * 4;
  double worst = 0;
  for (int64_t i = 0; i < gpu[0].numel(); ++i) {
    const double g = gpu[0].f32()[i], c = cpu[0].f32()[i];
    worst = std::max(worst, std::abs(g - c) / std::max(1.0, std::abs(c)));
  }
  EXPECT_LE(worst, tol) << dtype_name(t) << (tf32 ? " tf32" : "") << " " << rt::shape_str(m.a) << " @ "
                        << rt::shape_str(m.b) << " epilogue " << m.bias << "," << m.act;
  device().set_allow_tf32(false);
}

TEST(GpuLibrary, MatmulThroughCublasLtMatchesTheCpu) {
  MODELC_REQUIRE_GPU();
  const std::vector<MatmulCase> cases = {
      {{64, 784}, {784, 256}, {64, 256}},
      {{64, 784}, {784, 256}, {64, 256}, 1, 1},      // bias + relu: cuBLASLt's epilogue
      {{8, 33, 96}, {96, 48}, {8, 33, 48}, 1, 3},    // folded stack, gelu_tanh
      {{8, 33, 96}, {96, 48}, {8, 33, 48}, 1, 2},    // gelu (erf): the hand epilogue
      {{5, 7, 16}, {5, 16, 9}, {5, 7, 9}, 0, 5},     // strided batches, sigmoid
      {{2, 1, 7, 16}, {1, 3, 16, 9}, {2, 3, 7, 9}},  // broadcast batches: one call each
      {{16}, {16, 9}, {9}},                          // vector @ matrix
      {{4, 16}, {16}, {4}},                          // matrix @ vector
      {{3, 0}, {0, 5}, {3, 5}, 1, 4},                // K = 0: zeros, then the epilogue
      {{513, 1025}, {1025, 257}, {513, 257}, 1, 0},
  };
  for (const MatmulCase& m : cases) check_matmul(m, ElemType::F32, false);
  for (const MatmulCase& m : cases) check_matmul(m, ElemType::F32, true);
  for (ElemType t : {ElemType::BF16, ElemType::F16})
    for (const MatmulCase& m : cases)
      if (m.a.size() > 1 && m.b.size() > 1 && m.bias == 0 && m.act == 0) check_matmul(m, t, false);
}

// conv2d and its gradients through cuDNN against the CPU twins (f32; tf32 off).
TEST(GpuLibrary, ConvolutionsThroughCudnnMatchTheCpu) {
  MODELC_REQUIRE_GPU();
  std::cout << "cuDNN: " << rt::cuda::dnn_status() << "\n";
  struct Case {
    int64_t N, C, H, W, O, K, stride, pad, dil, groups;
  };
  const std::vector<Case> cases = {{8, 1, 28, 28, 16, 3, 1, 1, 1, 1}, {4, 16, 14, 14, 32, 3, 2, 1, 1, 1},
                                   {2, 6, 9, 11, 9, 5, 1, 2, 2, 3}, {3, 4, 7, 7, 4, 1, 1, 0, 1, 4}};
  // f32: summation order only. f16/bf16 (tensor cores, f32 accumulation; the CPU widens the
  // same rounded operands): both results are rounded to the type, so they may differ by an
  // ulp of it (2^-10, 2^-7 relative) plus the summation order.
  for (ElemType t : {ElemType::F32, ElemType::F16, ElemType::BF16})
    for (const Case& k : cases) {
      const double tol = t == ElemType::F32 ? 1e-4 : t == ElemType::F16 ? 4e-3 : 2.5e-2;
      const int64_t HO = (k.H + 2 * k.pad - k.dil * (k.K - 1) - 1) / k.stride + 1;
      const int64_t WO = (k.W + 2 * k.pad - k.dil * (k.K - 1) - 1) / k.stride + 1;
      HostTensor x = random_tensor(t, {k.N, k.C, k.H, k.W});
      HostTensor w = random_tensor(t, {k.O, k.C / k.groups, k.K, k.K}, 0.3f);
      HostTensor gy = random_tensor(t, {k.N, k.O, HO, WO});
      HostTensor bias = random_tensor(ElemType::F32, {k.O});
      HostTensor own_bias = random_tensor(t, {k.O});
      kernels::cuda::OpInts ints = {{"stride", {k.stride, k.stride}}, {"padding", {k.pad, k.pad}},
                                    {"dilation", {k.dil, k.dil}}, {"groups", {k.groups}}};
      auto compare = [&](const std::string& op, const std::vector<const HostTensor*>& in, std::vector<int64_t> out_shape,
                         const kernels::cuda::OpInts& attrs, const char* what) {
        std::vector<HostTensor> gpu = {HostTensor(t, out_shape)}, cpu = gpu;
        kernels::cuda::run_cuda_op(device(), op, in, gpu, attrs);
        kernels::cuda::run_cpu_op(op, in, cpu, attrs);
        double worst = 0;
        for (int64_t i = 0; i < cpu[0].numel(); ++i)
          worst = std::max(worst, std::abs(static_cast<double>(value(gpu[0], i)) - value(cpu[0], i)) /
                                      std::max(1.0, std::abs(static_cast<double>(value(cpu[0], i)))));
        EXPECT_LE(worst, tol) << op << " " << what << " " << dtype_name(t) << " N" << k.N << " C" << k.C << " O" << k.O
                              << " K" << k.K << " stride " << k.stride << " groups " << k.groups;
      };
      compare("conv2d", {&x, &w}, {k.N, k.O, HO, WO}, ints, "");
      kernels::cuda::OpInts relu = ints;
      relu["epilogue"] = {1, 1};  // an f32 epilogue bias + relu: cudnnAddTensor (f32) or the hand kernel
      compare("conv2d", {&x, &w, nullptr, &bias}, {k.N, k.O, HO, WO}, relu, "f32 bias + relu");
      compare("conv2d", {&x, &w, &own_bias}, {k.N, k.O, HO, WO}, ints, "own bias");  // cudnnAddTensor in the type
      compare("conv2d_grad_input", {&gy, &w}, {k.N, k.C, k.H, k.W}, ints, "");
      compare("conv2d_grad_weight", {&x, &gy}, {k.O, k.C / k.groups, k.K, k.K}, ints, "");
    }
}

// The prepared plans: $MODELC_GPU_BUNDLE/plans/NAME.plan with NAME.batches.safetensors (the
// batches fed, "stepK.INPUT"), NAME.losses (one CPU loss per step) and NAME.run ("steps seed
// tolerance").
TEST(GpuPlans, TrainingStepsMatchTheCpuReference) {
  MODELC_REQUIRE_GPU();
  const char* bundle = std::getenv("MODELC_GPU_BUNDLE");
  if (bundle == nullptr) GTEST_SKIP() << "no prepared plans: set MODELC_GPU_BUNDLE (tools/gpu-check --prepare)";
  int checked = 0;
  for (const auto& entry : fs::directory_iterator(fs::path(bundle) / "plans")) {
    if (entry.path().extension() != ".plan") continue;
    const std::string stem = (entry.path().parent_path() / entry.path().stem()).string();
    std::ifstream run(stem + ".run"), losses_in(stem + ".losses");
    int64_t steps = 0;
    uint64_t seed = 0;
    double tol = 0;
    ASSERT_TRUE(run >> steps >> seed >> tol) << stem << ".run";
    std::vector<double> want;
    for (double l; losses_in >> l;) want.push_back(l);
    ASSERT_EQ(static_cast<int64_t>(want.size()), steps) << stem << ".losses";
    auto program = rt::read_plan(entry.path().string());
    rt::Checkpoint batches = rt::load_checkpoint(stem + ".batches.safetensors");
    rt::Session s(program, {.threads = 4, .seed = seed, .total_steps = steps, .device = "cuda"});
    ASSERT_TRUE(s.on_cuda());
    double worst = 0;
    for (int64_t k = 0; k < steps; ++k) {
      std::map<std::string, HostTensor> feed;
      const std::string prefix = "step" + std::to_string(k) + ".";
      for (const auto& [name, t] : batches.tensors)
        if (name.rfind(prefix, 0) == 0) feed[name.substr(prefix.size())] = t;
      const double got = s.train_step(feed);
      const double err = std::abs(got - want[static_cast<size_t>(k)]) / std::max(1.0, std::abs(want[static_cast<size_t>(k)]));
      worst = std::max(worst, err);
      EXPECT_LE(err, tol) << entry.path().filename() << " step " << k << ": GPU loss " << got << ", CPU "
                          << want[static_cast<size_t>(k)];
    }
    std::cout << entry.path().filename().string() << ": " << steps << " steps on " << s.device()
              << ", largest relative loss difference from the CPU " << worst << " (tolerance " << tol << ")\n";
    ++checked;
  }
  EXPECT_GT(checked, 0) << "no plans in " << bundle << "/plans";
}

}  // namespace
}  // namespace modelc::test
