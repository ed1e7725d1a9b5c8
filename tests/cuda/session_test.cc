// A Session on CUDA, against the fake driver: the program's host kernels stand in for its
// PTX (the fake runs the host function registered under each entry point's name on the
// "device" memory, which is host memory), so everything the CUDA executor does around the
// kernels -- tables of buffer addresses and sizes, arena offsets, fed inputs, in-place and
// copied updates, outputs, parameters up and down -- is checked against the CPU executor
// running the same code: the results must be bit-identical.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "runtime/device/cuda/cuda_device.h"
#include "runtime/execution/cuda/executor.h"
#include "runtime/session/session.h"
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

// v_new[c] = v[c] - 0.1 * sum_r 2 g[r, c] x[r, c] / n   (sizes: C, rows)
void k_step(void* const* b, const int64_t* s, int64_t lo, int64_t hi) {
  const auto* x = static_cast<const float*>(b[0]);
  const auto* g = static_cast<const float*>(b[1]);
  const auto* v = static_cast<const float*>(b[2]);
  auto* v_new = static_cast<float*>(b[3]);
  for (int64_t c = lo; c < hi; ++c) {
    double acc = 0;
    for (int64_t r = 0; r < s[1]; ++r) acc += 2.0 * g[r * s[0] + c] * x[r * s[0] + c];
    v_new[c] = static_cast<float>(v[c] - 0.1 * acc / static_cast<double>(s[0] * s[1]));
  }
}
// out[0] = a[0] + 2 * b[0]; one work item
void k_sum2(void* const* b, const int64_t*, int64_t lo, int64_t hi) {
  for (int64_t i = lo; i < hi; ++i)
    static_cast<float*>(b[2])[0] = static_cast<const float*>(b[0])[0] + 2.0f * static_cast<const float*>(b[1])[0];
}

// PTX with an empty entry per kernel: the fake driver runs each kernel's host twin instead.
void add_empty_entries_ptx(rt::Program& p) {
  p.ptx_target = "sm_80";
  for (const rt::CodeletDesc& k : p.codelets)
    p.ptx += ".visible .entry " + k.name + "(.param .u64 b, .param .u64 s, .param .u64 lo, .param .u64 hi) { ret; }\n";
}

// The toy step on two streams: w's half on stream 0, v's on stream 1, which records event 0
// for stream 0's sum of the two losses. The temporaries share arena bytes across the
// streams (the layout adds waits for that, runtime/execution/streams.h).
std::shared_ptr<rt::Program> two_stream_program() {
  ProgramBuilder pb;
  auto x = pb.buffer("x", BufferRole::Input, {pb.dim("B"), pb.dim(kC)});
  auto w = pb.buffer("w", BufferRole::Param, {pb.dim(kC)}, ElemType::F32, {rt::Init::Kind::Normal, 0.0, 1.0});
  auto v = pb.buffer("v", BufferRole::Param, {pb.dim(kC)}, ElemType::F32, {rt::Init::Kind::Normal, 0.0, 1.0});
  auto m = pb.buffer("m", BufferRole::State, {pb.dim(kC)});
  auto h = pb.buffer("h", BufferRole::Temp, {pb.dim("B"), pb.dim(kC)});
  auto g = pb.buffer("g", BufferRole::Temp, {pb.dim("B"), pb.dim(kC)});
  auto lh = pb.buffer("lh", BufferRole::Temp, {pb.dim(1)});
  auto lg = pb.buffer("lg", BufferRole::Temp, {pb.dim(1)});
  auto loss = pb.buffer("loss", BufferRole::Output, {pb.dim(1)});
  auto w_new = pb.buffer("w_new", BufferRole::Temp, {pb.dim(kC)});
  auto v_new = pb.buffer("v_new", BufferRole::Temp, {pb.dim(kC)});
  auto ks = pb.kernel("k0_scale", k_scale);
  auto kl = pb.kernel("k1_loss", k_loss);
  auto ku = pb.kernel("k2_update", k_update);
  auto kst = pb.kernel("k3_step", k_step);
  auto k2 = pb.kernel("k4_sum2", k_sum2);
  rt::SizeExpr n = pb.scaled(kC, "B");
  rt::Function& f = pb.function("train_step");
  f.feeds.push_back({"x", 0, x});
  auto on = [](rt::Instr i, uint32_t stream) {
    i.stream = stream;
    return i;
  };
  f.instrs.push_back(on(ProgramBuilder::kernel_call(ks, {x, w}, {h}, {pb.dim(kC), pb.dim(3)}, n, 64), 0));
  f.instrs.push_back(on(ProgramBuilder::kernel_call(ks, {x, v}, {g}, {pb.dim(kC), pb.dim(5)}, n, 64), 1));
  f.instrs.push_back(on(ProgramBuilder::kernel_call(kl, {g}, {lg}, {n}, pb.dim(1)), 1));
  f.instrs.push_back(on(ProgramBuilder::kernel_call(kl, {h}, {lh}, {n}, pb.dim(1)), 0));
  f.instrs.push_back(on(ProgramBuilder::kernel_call(k2, {lh, lg}, {loss}, {}, pb.dim(1)), 0));
  f.instrs.push_back(on(ProgramBuilder::kernel_call(ku, {x, h, w, m}, {m, w_new}, {pb.dim(kC), pb.dim("B")}, pb.dim(kC)), 0));
  f.instrs.push_back(on(ProgramBuilder::kernel_call(kst, {x, g, v}, {v_new}, {pb.dim(kC), pb.dim("B")}, pb.dim(kC)), 1));
  f.instrs[2].records = {0};
  f.instrs[4].waits = {0};
  f.streams = 2;
  f.events = 1;
  f.outputs.push_back({"loss", loss});
  f.updates.push_back({w_new, w});
  f.updates.push_back({v_new, v});
  f.updates.push_back({m, m});
  pb.p.model = "toy2";
  add_empty_entries_ptx(pb.p);
  return std::make_shared<rt::Program>(std::move(pb.p));
}

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
  pb.p.codelets[0].gpu_block = 64;
  pb.p.codelets[1].gpu_mapping = rt::GpuMapping::Block;
  if (with_ptx) add_empty_entries_ptx(pb.p);
  return std::make_shared<rt::Program>(std::move(pb.p));
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

// The fake's queued mode (FAKE_CUDA_ASYNC) interleaves streams at random: without a wait, a
// copy on one stream sometimes runs before the write it needs on another; with the wait,
// never. This is what makes the multi-stream tests below able to fail.
TEST_F(CudaSession, TheFakeInterleavesStreamsAndHonoursWaits) {
  rt::cuda::Driver driver(fake_libcuda());
  rt::cuda::CudaDevice dev(driver, 0);
  const auto& api = driver.api();
  auto* buf = static_cast<uint8_t*>(dev.allocator().allocate(64, rt::cuda::stream_id(dev.stream())));
  auto* out = static_cast<uint8_t*>(dev.allocator().allocate(64, rt::cuda::stream_id(dev.stream())));
  rt::cuda::CUevent e = nullptr;
  ASSERT_EQ(api.cuEventCreate(&e, 0), 0);
  int stale[2] = {0, 0};
  for (int wait = 0; wait < 2; ++wait)
    for (int seed = 0; seed < 32; ++seed) {
      ScopedEnv async("FAKE_CUDA_ASYNC", std::to_string(seed));
      std::memset(buf, 0, 64);
      std::memset(out, 0, 64);
      ASSERT_EQ(api.cuMemsetD8Async(reinterpret_cast<rt::cuda::CUdeviceptr>(buf), 1, 64, dev.compute_stream(1)), 0);
      ASSERT_EQ(api.cuEventRecord(e, dev.compute_stream(1)), 0);
      if (wait) {
        ASSERT_EQ(api.cuStreamWaitEvent(dev.stream(), e, 0), 0);
      }
      ASSERT_EQ(api.cuMemcpyDtoDAsync_v2(reinterpret_cast<rt::cuda::CUdeviceptr>(out), reinterpret_cast<rt::cuda::CUdeviceptr>(buf),
                                         64, dev.stream()), 0);
      ASSERT_EQ(api.cuCtxSynchronize(), 0);
      stale[wait] += out[63] == 0;
    }
  EXPECT_GT(stale[0], 0) << "no interleaving ran the copy first";
  EXPECT_EQ(stale[1], 0) << "a wait was not honoured";
  api.cuEventDestroy_v2(e);
  dev.allocator().free(buf);
  dev.allocator().free(out);
}

// A schedule on two streams runs on two CUDA streams with its events, plus the waits the
// arena's reuse needs: bit-identical to the CPU (which runs the streams on threads) under
// random interleavings of the fake's queued streams.
TEST_F(CudaSession, TwoStreamsWithEventsAreBitIdenticalToTheCpuUnderRandomInterleavings) {
  fake_register("k3_step", k_step);
  fake_register("k4_sum2", k_sum2);
  auto program = two_stream_program();
  std::mt19937 rng(std::random_device{}());
  std::normal_distribution<float> nd;
  for (int seed = 1; seed <= 12; ++seed) {
    ScopedEnv async("FAKE_CUDA_ASYNC", std::to_string(rng() % 100000));
    rt::Session cpu(program, {.threads = 2, .seed = 5, .device = "cpu"});
    rt::Session gpu(program, {.threads = 2, .seed = 5, .device = "cuda"});
    for (int step = 0; step < 3; ++step) {
      const int64_t B = 2 + (seed + step) % 3 * 17;
      HostTensor x(ElemType::F32, {B, kC});
      for (int64_t i = 0; i < x.numel(); ++i) x.f32()[i] = nd(rng);
      ASSERT_EQ(cpu.train_step({{"x", x}}), gpu.train_step({{"x", x}})) << "seed " << seed << " step " << step;
    }
    for (const char* p : {"w", "v"}) EXPECT_EQ(gpu.param(p).bytes, cpu.param(p).bytes) << p << ", seed " << seed;
    EXPECT_EQ(gpu.state("m").bytes, cpu.state("m").bytes) << "seed " << seed;
  }
}

// Pipelined steps: two in flight, inputs through pinned memory on the copy stream while the
// step before computes; the caller overwrites its batch as soon as submit_step returns. The
// losses and parameters are the CPU's, bit for bit, under random interleavings.
TEST_F(CudaSession, PipelinedStepsMatchTheCpuAndMayReuseTheBatch) {
  fake_register("k3_step", k_step);
  fake_register("k4_sum2", k_sum2);
  std::mt19937 rng(std::random_device{}());
  std::normal_distribution<float> nd;
  for (bool two : {false, true}) {
    auto program = two ? two_stream_program() : toy_program(true);
    for (int seed = 1; seed <= 6; ++seed) {
      ScopedEnv async("FAKE_CUDA_ASYNC", std::to_string(rng() % 100000));
      rt::Session cpu(program, {.threads = 2, .seed = 3, .device = "cpu"});
      rt::Session gpu(program, {.threads = 2, .seed = 3, .device = "cuda"});
      const int steps = 6;
      std::vector<float> want, got;
      HostTensor batch(ElemType::F32, {9, kC});
      for (int step = 0; step < steps; ++step) {
        for (int64_t i = 0; i < batch.numel(); ++i) batch.f32()[i] = nd(rng);
        want.push_back(cpu.train_step({{"x", batch}}));
        gpu.submit_step({{"x", batch}});
        for (int64_t i = 0; i < batch.numel(); ++i) batch.f32()[i] = 1e6f;  // taken already
        if (gpu.steps_in_flight() == 2) got.push_back(gpu.finish_step().loss);
      }
      EXPECT_EQ(gpu.step(), steps);
      while (gpu.steps_in_flight() > 0) got.push_back(gpu.finish_step().loss);
      EXPECT_EQ(got, want) << (two ? "two streams" : "one stream") << ", seed " << seed;
      EXPECT_EQ(gpu.param("w").bytes, cpu.param("w").bytes);
      EXPECT_EQ(gpu.state("m").bytes, cpu.state("m").bytes);
    }
  }
}

TEST_F(CudaSession, StepsInFlightAreFinishedInOrderAndTrainStepWaitsForNone) {
  auto program = toy_program(true);
  HostTensor x(ElemType::F32, {2, kC});
  for (const char* device : {"cpu", "cuda"}) {
    rt::Session s(program, {.threads = 1, .device = device});
    EXPECT_EQ(message_of([&] { s.finish_step(); }), "Session::finish_step: no step was submitted") << device;
    s.submit_step({{"x", x}});
    s.submit_step({{"x", x}});
    EXPECT_EQ(message_of([&] { s.train_step({{"x", x}}); }),
              "Session::train_step: 2 submitted steps are not finished; call finish_step() first")
        << device;
    const rt::StepResult r = s.finish_step();
    EXPECT_EQ(r.outputs.size(), 1u);
    EXPECT_EQ(r.outputs.at("loss").f32()[0], r.loss);
    EXPECT_TRUE(std::isnan(r.grad_norm));
    EXPECT_EQ(s.steps_in_flight(), 1u);
    // A bad batch is refused at submission and leaves the step in flight alone.
    HostTensor bad(ElemType::F32, {2, kC + 1});
    EXPECT_NE(message_of([&] { s.submit_step({{"x", bad}}); }).find("input 'x' has shape [2,8]"), std::string::npos);
    EXPECT_EQ(s.steps_in_flight(), 1u);
    EXPECT_EQ(s.step(), 2);
  }
  // A session dropped with a step in flight waits for it and frees everything.
  {
    ScopedEnv async("FAKE_CUDA_ASYNC", "3");
    rt::Session s(program, {.threads = 1, .device = "cuda"});
    s.submit_step({{"x", x}});
  }
  EXPECT_EQ(fake_counts().device_bytes, 0u);
  EXPECT_EQ(fake_counts().pinned, 0u);
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
