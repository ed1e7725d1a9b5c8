// A Session on CUDA, against the fake driver: the program's host kernels stand in for its
// PTX (the fake runs the host function registered under each entry point's name on the
// "device" memory, which is host memory), so everything the CUDA executor does around the
// kernels -- tables of buffer addresses and sizes, arena offsets, fed inputs, in-place and
// copied updates, outputs, parameters up and down -- is checked against the CPU executor
// running the same code: the results must be bit-identical.
#include <gtest/gtest.h>

#include <random>

#include "runtime/cuda/executor.h"
#include "runtime/session.h"
#include "tests/cuda/fake_driver.h"
#include "tests/runtime/program_builder.h"

namespace modelc::test {
namespace {

using rt::BufferRole;
using rt::ElemType;
using rt::HostTensor;
using rt::test::ProgramBuilder;

// h[i] = x[i] * w[i % C] + sizes[1]   (sizes: C, bias)
void k_scale(void* const* b, const int64_t* s, int64_t lo, int64_t hi) {
  const auto* x = static_cast<const float*>(b[0]);
  const auto* w = static_cast<const float*>(b[1]);
  auto* h = static_cast<float*>(b[2]);
  for (int64_t i = lo; i < hi; ++i) h[i] = x[i] * w[i % s[0]] + static_cast<float>(s[1]);
}
// loss[0] = sum h^2 / n   (sizes: n); one work item
void k_loss(void* const* b, const int64_t* s, int64_t lo, int64_t hi) {
  const auto* h = static_cast<const float*>(b[0]);
  auto* loss = static_cast<float*>(b[1]);
  for (int64_t i = lo; i < hi; ++i) {
    double acc = 0;
    for (int64_t j = 0; j < s[0]; ++j) acc += static_cast<double>(h[j]) * h[j];
    loss[0] = static_cast<float>(acc / static_cast<double>(s[0]));
  }
}
// w_new[c] = w[c] - 0.1 * sum_r 2 h[r, c] x[r, c] / n; m[c] += 1 in place   (sizes: C, rows)
void k_update(void* const* b, const int64_t* s, int64_t lo, int64_t hi) {
  const auto* x = static_cast<const float*>(b[0]);
  const auto* h = static_cast<const float*>(b[1]);
  const auto* w = static_cast<const float*>(b[2]);
  auto* m = static_cast<float*>(b[4]);  // b[3] too: the in-place output is its input
  auto* w_new = static_cast<float*>(b[5]);
  for (int64_t c = lo; c < hi; ++c) {
    double g = 0;
    for (int64_t r = 0; r < s[1]; ++r) g += 2.0 * h[r * s[0] + c] * x[r * s[0] + c];
    w_new[c] = static_cast<float>(w[c] - 0.1 * g / static_cast<double>(s[0] * s[1]));
    m[c] += 1.0f;
  }
}

constexpr int64_t kC = 7;

std::shared_ptr<rt::Program> toy_program(bool with_ptx) {
  ProgramBuilder pb;
  auto x = pb.buffer("x", BufferRole::Input, {pb.dim("B"), pb.dim(kC)});
  auto w = pb.buffer("w", BufferRole::Param, {pb.dim(kC)}, ElemType::F32, {rt::Init::Kind::Normal, 0.0, 1.0});
  auto m = pb.buffer("m", BufferRole::State, {pb.dim(kC)});
  auto h = pb.buffer("h", BufferRole::Temp, {pb.dim("B"), pb.dim(kC)});
  auto loss = pb.buffer("loss", BufferRole::Output, {pb.dim(1)});
  auto w_new = pb.buffer("w_new", BufferRole::Temp, {pb.dim(kC)});
  auto ks = pb.kernel("k0_scale", k_scale);
  auto kl = pb.kernel("k1_loss", k_loss);
  auto ku = pb.kernel("k2_update", k_update);
  rt::SizeExpr n = pb.scaled(kC, "B");
  rt::Function& f = pb.function("train_step");
  f.feeds.push_back({"x", 0, x});
  f.instrs.push_back(ProgramBuilder::kernel_call(ks, {x, w}, {h}, {pb.dim(kC), pb.dim(3)}, n, 64));
  f.instrs.push_back(ProgramBuilder::kernel_call(kl, {h}, {loss}, {n}, pb.dim(1)));
  f.instrs.push_back(ProgramBuilder::kernel_call(ku, {x, h, w, m}, {m, w_new}, {pb.dim(kC), pb.dim("B")}, pb.dim(kC)));
  f.outputs.push_back({"loss", loss});
  f.updates.push_back({w_new, w});
  f.updates.push_back({m, m});
  pb.p.model = "toy";
  pb.p.kernels[0].gpu_block = 64;
  pb.p.kernels[1].gpu_mapping = rt::GpuMapping::Block;
  if (with_ptx) {
    pb.p.ptx_target = "sm_80";
    for (const rt::KernelDesc& k : pb.p.kernels)
      pb.p.ptx += ".visible .entry " + k.name + "(.param .u64 b, .param .u64 s, .param .u64 lo, .param .u64 hi) { ret; }\n";
  }
  return std::make_shared<rt::Program>(std::move(pb.p));
}

std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "(no exception)";
}

class CudaSession : public ::testing::Test {
 protected:
  void SetUp() override {
    fake_reset();
    fake_register("k0_scale", k_scale);
    fake_register("k1_loss", k_loss);
    fake_register("k2_update", k_update);
  }
  void TearDown() override { fake_reset(); }
  ScopedEnv lib_{"MODELC_LIBCUDA", fake_libcuda()};
};

TEST_F(CudaSession, TrainsBitIdenticallyToTheCpu) {
  auto program = toy_program(true);
  rt::SessionOptions cpu_opts{.threads = 2, .seed = 11, .device = "cpu"};
  rt::SessionOptions gpu_opts = cpu_opts;
  gpu_opts.device = "cuda";
  rt::Session cpu(program, cpu_opts), gpu(program, gpu_opts);
  ASSERT_FALSE(cpu.on_cuda());
  ASSERT_TRUE(gpu.on_cuda());
  EXPECT_EQ(gpu.device(), "cuda:0 Fake GPU 0 (sm_90, 4 SMs, 1.0 GiB)");
  EXPECT_EQ(cpu.device(), "cpu");
  EXPECT_EQ(gpu.param("w").bytes, cpu.param("w").bytes) << "the same initial values, uploaded";
  std::mt19937 rng(std::random_device{}());
  std::normal_distribution<float> nd;
  for (int step = 0; step < 4; ++step) {
    const int64_t B = 3 + step % 2 * 40;  // the layout changes with B
    HostTensor x(ElemType::F32, {B, kC});
    for (int64_t i = 0; i < x.numel(); ++i) x.f32()[i] = nd(rng);
    const float lc = cpu.train_step({{"x", x}});
    const float lg = gpu.train_step({{"x", x}});
    EXPECT_EQ(lc, lg) << "step " << step;
    EXPECT_EQ(gpu.param("w").bytes, cpu.param("w").bytes) << "step " << step;
    EXPECT_EQ(gpu.state("m").bytes, cpu.state("m").bytes) << "step " << step;
  }
  EXPECT_EQ(gpu.state("m").f32()[3], 4.0f) << "the in-place update ran once per step";
  // Launches follow the plan's configuration: 3 kernels a step.
  auto launches = fake_launches();
  ASSERT_EQ(launches.size(), 12u);
  EXPECT_EQ(launches[0].name, "k0_scale");
  EXPECT_EQ(launches[0].block, 64u);
  EXPECT_EQ(launches[0].grid, 1u);          // ceil(21 / 256)
  EXPECT_EQ(launches[3].grid, 2u);          // B = 43: ceil(301 / 256)
  EXPECT_EQ(launches[1].block, 256u);
  EXPECT_EQ(launches[1].grid, 1u);          // Block mapping, one work item
  // set_param goes up to the device and back.
  HostTensor w(ElemType::F32, {kC});
  for (int64_t i = 0; i < kC; ++i) w.f32()[i] = static_cast<float>(i);
  gpu.set_param("w", w);
  cpu.set_param("w", w);
  EXPECT_EQ(gpu.param("w").bytes, w.bytes);
  HostTensor x(ElemType::F32, {5, kC});
  for (int64_t i = 0; i < x.numel(); ++i) x.f32()[i] = nd(rng);
  EXPECT_EQ(cpu.train_step({{"x", x}}), gpu.train_step({{"x", x}}));
  // Memory: the device allocator holds the arena and tables; the parameters are not counted twice.
  rt::MemoryUsage u = gpu.memory_usage();
  EXPECT_EQ(u.persistent, 2 * kC * 4);
  EXPECT_EQ(u.inputs, 0);
  EXPECT_GT(u.allocator.all.allocated_bytes.peak, 0);
  EXPECT_NE(gpu.memory_summary().find("cuda:0"), std::string::npos);
}

TEST_F(CudaSession, BadFeedsAreTheSameErrorsAsOnTheCpu) {
  auto program = toy_program(true);
  rt::Session gpu(program, {.threads = 1, .device = "cuda:0"});
  rt::Session cpu(program, {.threads = 1, .device = "cpu"});
  HostTensor bad(ElemType::F32, {2, kC + 1});
  const std::string want = "function 'train_step': input 'x' has shape [2,8], expected [B,7] (B = 2)";
  EXPECT_EQ(message_of([&] { cpu.train_step({{"x", bad}}); }), want);
  EXPECT_EQ(message_of([&] { gpu.train_step({{"x", bad}}); }), want);
}

TEST_F(CudaSession, AutoFallsBackToTheCpuWithTheReason) {
  auto no_ptx = toy_program(false);
  rt::Session s(no_ptx, {.threads = 1});
  EXPECT_FALSE(s.on_cuda());
  EXPECT_EQ(s.device_note(), "the program has no GPU code (compile it with a GPU target, e.g. modelc --target sm_80)");
  EXPECT_EQ(message_of([&] { rt::Session e(no_ptx, {.threads = 1, .device = "cuda"}); }),
            "model 'toy' cannot run on cuda:0: the program has no GPU code (compile it with a GPU target, e.g. modelc "
            "--target sm_80)");
  auto odd = toy_program(true);
  odd->functions[0].instrs.push_back(ProgramBuilder::library("frobnicate", {}, {}));
  rt::Session s2(odd, {.threads = 1});
  EXPECT_FALSE(s2.on_cuda());
  EXPECT_EQ(s2.device_note(), "library op 'frobnicate' at t.model:7:9 has no CUDA implementation");
  EXPECT_EQ(rt::cuda::cuda_unsupported(*toy_program(true)), "");
  EXPECT_EQ(message_of([&] { rt::Session e(odd, {.threads = 1, .device = "gpu"}); }),
            "bad device 'gpu': expected auto, cpu, cuda or cuda:N (N a device number from 0)");
}

TEST_F(CudaSession, AKernelMissingFromThePtxIsAnErrorAtTheFirstRun) {
  auto program = toy_program(true);
  program->ptx.erase(program->ptx.find(".visible .entry k1_loss"), std::string::npos);
  rt::Session gpu(program, {.threads = 1, .device = "cuda"});
  HostTensor x(ElemType::F32, {2, kC});
  EXPECT_EQ(message_of([&] { gpu.train_step({{"x", x}}); }),
            "function 'train_step': the plan's PTX has no kernel 'k1_loss'");
}

}  // namespace
}  // namespace modelc::test
