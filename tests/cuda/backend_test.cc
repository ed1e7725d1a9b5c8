// The backends (runtime/execution/backend.h) on their own, without a Session: what make_backend
// chooses, and what each backend does with the caller's persistent store, its runs, its memory
// figures and profiling. The CUDA backend runs against the fake driver (tests/cuda/fake).
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "runtime/device/cpu/thread_pool.h"
#include "runtime/execution/backend.h"
#include "tests/cuda/fake_driver.h"
#include "tests/runtime/program_builder.h"

namespace modelc::test {
namespace {

constexpr int64_t kN = 5;

// out[i] = x[i] + w[i]
void k_add(void* const* b, const int64_t*, int64_t lo, int64_t hi) {
  const auto* x = static_cast<const float*>(b[0]);
  const auto* w = static_cast<const float*>(b[1]);
  auto* out = static_cast<float*>(b[2]);
  for (int64_t i = lo; i < hi; ++i) out[i] = x[i] + w[i];
}

// f(x) = x + w, with a parameter w and a state m that no instruction touches.
rt::Program add_program(bool with_ptx) {
  rt::test::ProgramBuilder pb;
  auto x = pb.buffer("x", rt::BufferRole::Input, {pb.dim(kN)});
  auto w = pb.buffer("w", rt::BufferRole::Param, {pb.dim(kN)});
  pb.buffer("m", rt::BufferRole::State, {pb.dim(kN)});
  auto out = pb.buffer("out", rt::BufferRole::Output, {pb.dim(kN)});
  auto k = pb.kernel("k0_add", k_add);
  rt::Function& f = pb.function("f");
  f.feeds.push_back({"x", 0, x});
  f.instrs.push_back(rt::test::ProgramBuilder::kernel_call(k, {x, w}, {out}, {}, pb.dim(kN)));
  f.outputs.push_back({"out", out});
  pb.p.model = "add";
  if (with_ptx) {
    pb.p.ptx_target = "sm_80";
    pb.p.ptx = ".visible .entry k0_add(.param .u64 b, .param .u64 s, .param .u64 lo, .param .u64 hi) { ret; }\n";
  }
  return std::move(pb.p);
}

rt::HostTensor iota(float from) {
  rt::HostTensor t(rt::ElemType::F32, {kN});
  for (int64_t i = 0; i < kN; ++i) t.f32()[i] = from + static_cast<float>(i);
  return t;
}

// The store a Session keeps: a tensor per buffer id, params and state filled.
std::vector<rt::HostTensor> store_of(const rt::Program& p) {
  std::vector<rt::HostTensor> s(p.buffers.size());
  s[1] = iota(10);
  s[2] = iota(0);
  return s;
}

// Runs f(x) and checks out = x + w for the current w.
void expect_adds(rt::Backend& b, const rt::Program& p, const rt::HostTensor& w) {
  rt::HostTensor x = iota(100);
  const rt::HostTensor* feeds[] = {&x};
  auto outputs = b.start(p.functions[0], feeds, {})->finish();
  ASSERT_EQ(outputs.count("out"), 1u);
  for (int64_t i = 0; i < kN; ++i) EXPECT_EQ(outputs["out"].f32()[i], x.f32()[i] + w.f32()[i]) << i;
}

TEST(CpuBackend, RunsOnTheStoreInPlaceAndCountsTheFedBytes) {
  const rt::Program p = add_program(false);
  std::vector<rt::HostTensor> store = store_of(p);
  rt::ThreadPool pool(1);
  std::string note;
  auto b = rt::make_backend(p, store, pool, {.device = "cpu"}, note);
  EXPECT_FALSE(b->is_cuda());
  EXPECT_EQ(b->description(), "cpu");
  EXPECT_EQ(note, "");
  expect_adds(*b, p, store[1]);
  EXPECT_EQ(b->memory_usage().inputs, kN * 4) << "the input is read in place, counted apart";
  EXPECT_EQ(b->memory_usage().persistent, 0) << "the caller counts its store";
  // The executor holds the store's tensors: assign in place, as Session::set_param does.
  const rt::HostTensor w = iota(-3);
  std::memcpy(store[1].bytes.data(), w.bytes.data(), w.bytes.size());
  b->write_persistent(1);
  EXPECT_EQ(b->read_persistent(1).bytes, w.bytes);
  expect_adds(*b, p, w);
  b->reset_peak_memory();
  EXPECT_EQ(b->memory_usage().inputs, 0);
  // Profiling: nothing before a run; each run adds one timing per instruction; turning it
  // on again starts afresh, and off stops the timing.
  EXPECT_TRUE(b->profile("f").empty());
  b->set_profiling(true);
  for (int r = 0; r < 3; ++r) expect_adds(*b, p, w);
  std::vector<rt::cuda::InstrTime> prof = b->profile("f");
  ASSERT_EQ(prof.size(), p.functions[0].instrs.size());
  for (const rt::cuda::InstrTime& t : prof) {
    EXPECT_EQ(t.runs, 3) << t.name;
    EXPECT_GE(t.ms, 0) << t.name;
    EXPECT_EQ(t.bytes, 3 * kN * 4) << t.name << ": x, w and out";
  }
  EXPECT_EQ(prof[0].name, p.codelets[0].name);
  EXPECT_TRUE(prof[0].codelet);
  b->set_profiling(false);
  expect_adds(*b, p, w);
  EXPECT_EQ(b->profile("f")[0].runs, 3) << "off: not timed";
  b->set_profiling(true);
  EXPECT_EQ(b->profile("f")[0].runs, 0) << "on again: afresh";
}

class CudaBackendTest : public ::testing::Test {
 protected:
  void SetUp() override {
    fake_reset();
    fake_register("k0_add", k_add);
  }
  void TearDown() override { fake_reset(); }
  ScopedEnv lib_{"MODELC_LIBCUDA", fake_libcuda()};
};

TEST_F(CudaBackendTest, KeepsTheDeviceCopiesAndGivesEveryByteBack) {
  const rt::Program p = add_program(true);
  std::vector<rt::HostTensor> store = store_of(p);
  rt::ThreadPool pool(1);
  const size_t before = fake_counts().device_bytes;
  {
    std::string note;
    auto b = rt::make_backend(p, store, pool, {.device = "cuda"}, note);
    ASSERT_TRUE(b->is_cuda());
    EXPECT_EQ(b->description(), "cuda:0 Fake GPU 0 (sm_90, 4 SMs, 1.0 GiB)");
    EXPECT_EQ(b->read_persistent(1).bytes, store[1].bytes) << "uploaded when made";
    EXPECT_EQ(b->read_persistent(2).bytes, store[2].bytes);
    EXPECT_EQ(b->memory_usage().allocator.all.allocated_bytes.peak, 0) << "the device copies are not counted twice";
    expect_adds(*b, p, store[1]);
    rt::HostTensor w = iota(7);
    std::memcpy(store[1].bytes.data(), w.bytes.data(), w.bytes.size());
    b->write_persistent(1);
    std::memset(store[1].bytes.data(), 0, store[1].bytes.size());  // the store is only staging now
    EXPECT_EQ(b->read_persistent(1).bytes, w.bytes);
    expect_adds(*b, p, w);
    EXPECT_TRUE(b->profile("f").empty()) << "not profiled";
    b->set_profiling(true);
    expect_adds(*b, p, w);
    ASSERT_EQ(b->profile("f").size(), 1u);
    EXPECT_EQ(b->profile("f")[0].name, "k0_add");
    EXPECT_EQ(b->profile("f")[0].runs, 1);
    EXPECT_TRUE(b->profile("g").empty()) << "no such function ran";
    // A run dropped unfinished waits for the device; the backend then frees everything.
    rt::HostTensor x = iota(0);
    const rt::HostTensor* feeds[] = {&x};
    auto dropped = b->start(p.functions[0], feeds, {});
    dropped.reset();
  }
  EXPECT_EQ(fake_counts().device_bytes, before);
}

TEST_F(CudaBackendTest, AutoFallsBackToTheCpuWithTheReason) {
  const rt::Program p = add_program(false);  // kernels without PTX
  std::vector<rt::HostTensor> store = store_of(p);
  rt::ThreadPool pool(1);
  std::string note;
  auto b = rt::make_backend(p, store, pool, {.device = "auto"}, note);
  EXPECT_FALSE(b->is_cuda());
  EXPECT_NE(note, "");
  EXPECT_EQ(message_of([&] { rt::make_backend(p, store, pool, {.device = "cuda"}, note); }),
            "model 'add' cannot run on cuda:0: " + note);
}

}  // namespace
}  // namespace modelc::test
