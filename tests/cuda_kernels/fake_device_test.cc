// The GPU path of the hand-kernel ops on the fake driver (tests/cuda/fake: a libcuda.so.1
// backed by host memory that records launches and runs no PTX): run_cuda_op's copies, the
// registry's op functions, the launch configuration, and the error words of embedding ops
// (reserved, reset before the kernel, read back and reported with the CPU's words, at once
// or deferred). A host function registered under the embedding kernels' names stands in
// for the kernel: the fake hands it the launch's parameters, whose block holds the error word.
#include <cstring>

#include "kernels/cuda/bodies.h"
#include "kernels/cuda/errors.h"
#include "runtime/device/cuda/cuda_device.h"
#include "kernels/cuda/library.h"
#include "tests/cuda/fake_driver.h"
#include "tests/cuda_kernels/harness.h"

namespace modelc::kernels::cuda::test {

namespace {

using modelc::test::fake_launches;
using modelc::test::fake_libcuda;
using modelc::test::fake_register_raw;
using modelc::test::fake_reset;

rt::cuda::Driver& fake() {
  static rt::cuda::Driver d(fake_libcuda());
  return d;
}

// The word each stand-in kernel saw when it ran (kNoError: it was reset first), and what it
// writes into it: position 2, id 77.
unsigned long long g_seen = 0, g_write = kNoError;
void stand_in(void** params) {
  unsigned long long* word = static_cast<const EmbeddingParams*>(params[0])->error;
  g_seen = *word;
  if (g_write != kNoError) *word = g_write;
}

bool have_ptx() { return *rt::cuda::hand_kernels_ptx() != '\0'; }

}  // namespace

TEST(HandKernelsOnFakeDriver, LaunchesWithTheirConfiguration) {
  if (!have_ptx()) GTEST_SKIP() << "the runtime was built without nvcc: it has no hand kernels";
  rt::cuda::CudaDevice device(fake(), 0);
  fake_reset();
  std::vector<HostTensor> out{like(ElemType::F32, {100000})};
  run_cuda_op(device, "fill", {}, out, {}, {{"value", 1.5}});
  HostTensor x = random_tensor(ElemType::BF16, {6, 5});
  std::vector<HostTensor> t{like(ElemType::BF16, {5, 6})};
  run_cuda_op(device, "transpose", {&x}, t);
  const auto launches = fake_launches();
  ASSERT_EQ(launches.size(), 2u);
  EXPECT_EQ(launches[0].name, "modelc_fill_u32");
  EXPECT_EQ(launches[0].block, 256u);
  EXPECT_EQ(launches[0].grid, 128u);  // min(ceil(100000 / 256), 32 blocks x 4 SMs)
  EXPECT_EQ(launches[1].name, "modelc_copy_u16");
  EXPECT_EQ(launches[1].grid, 1u);
  // The shared checks run before anything is launched.
  std::vector<HostTensor> bad{like(ElemType::BF16, {6, 6})};
  EXPECT_EQ(error_of([&] { run_cuda_op(device, "transpose", {&x}, bad); }),
            "transpose at test.model:1:1: output has shape [6,6], expected [5,6]");
  EXPECT_EQ(fake_launches().size(), 2u);
  EXPECT_EQ(error_of([&] { run_cuda_op(device, "no_such_op", {&x}, bad); }), "library op 'no_such_op' has no CUDA implementation");
  fake_reset();
}

// cumsum through the registry: one launch of its kernel, an index per line (2 x 600 lines:
// 5 blocks of 256); its checks before any launch.
TEST(HandKernelsOnFakeDriver, CumsumLaunchesOneIndexPerLine) {
  if (!have_ptx()) GTEST_SKIP() << "the runtime was built without nvcc: it has no hand kernels";
  rt::cuda::CudaDevice device(fake(), 0);
  fake_reset();
  HostTensor x = random_tensor(ElemType::F16, {2, 5, 600});
  std::vector<HostTensor> out{like(ElemType::F16, {2, 5, 600})};
  run_cuda_op(device, "cumsum", {&x}, out, {{"axis", {1}}});
  const auto launches = fake_launches();
  ASSERT_EQ(launches.size(), 1u);
  EXPECT_EQ(launches[0].name, "modelc_cumsum");
  EXPECT_EQ(launches[0].block, 256u);
  EXPECT_EQ(launches[0].grid, 5u);
  EXPECT_EQ(error_of([&] { run_cuda_op(device, "cumsum", {&x}, out, {{"axis", {3}}}); }),
            "cumsum at test.model:1:1: axis 3 is out of range for rank 3");
  EXPECT_EQ(fake_launches().size(), 1u);
  fake_reset();
}

TEST(HandKernelsOnFakeDriver, IdErrorsComeBackWithTheCpuWords) {
  if (!have_ptx()) GTEST_SKIP() << "the runtime was built without nvcc: it has no hand kernels";
  rt::cuda::CudaDevice device(fake(), 0);
  fake_reset();
  fake_register_raw("modelc_embedding", stand_in);
  fake_register_raw("modelc_embedding_grad", stand_in);
  HostTensor ids(ElemType::I32, {2, 3});
  HostTensor table = random_tensor(ElemType::F32, {9, 4});
  std::vector<HostTensor> out{like(ElemType::F32, {2, 3, 4})};
  g_write = kNoError;
  g_seen = 0;
  run_cuda_op(device, "embedding", {&ids, &table}, out);  // the stand-in records nothing: no error
  EXPECT_EQ(g_seen, kNoError);
  g_write = (2ull << 32) | 77u;
  EXPECT_EQ(error_of([&] { run_cuda_op(device, "embedding", {&ids, &table}, out); }),
            "embedding at test.model:1:1: id 77 at position 2 of the ids [2,3] is out of range for a table of 9 rows");
  // The next op finds its word reset.
  g_seen = 0;
  EXPECT_NE(error_of([&] { run_cuda_op(device, "embedding", {&ids, &table}, out); }), "");
  EXPECT_EQ(g_seen, kNoError);

  // Deferred: nothing is thrown until check_kernel_errors, which names the op that failed.
  set_deferred_error_checks(device, true);
  HostTensor g = random_tensor(ElemType::F32, {2, 3, 4});
  std::vector<HostTensor> dt{like(ElemType::F32, {9, 4})};
  g_write = kNoError;
  run_cuda_op(device, "embedding", {&ids, &table}, out);  // run_cuda_op checks after the op
  rt::cuda::CudaLibCall c;
  c.device = &device;
  c.stream = device.stream();
  c.call.op = "embedding_grad";
  c.call.where = "m.model:4:2";
  c.call.inputs = {{nullptr, ElemType::I32, {2, 3}}};
  unsigned long long* w1 = reserve_error_word(c);
  commit_id_check(c, {2, 3}, 9);
  unsigned long long* w2 = reserve_error_word(c);
  EXPECT_EQ(w2, w1 + 1);
  *w2 = (5ull << 32) | static_cast<uint32_t>(-3);  // the second op's kernel found id -3 at 5
  commit_id_check(c, {2, 3}, 9);
  EXPECT_EQ(error_of([&] { check_kernel_errors(device); }),
            "embedding_grad at m.model:4:2: id -3 at position 5 of the ids [2,3] is out of range for a table of 9 rows");
  EXPECT_EQ(error_of([&] { check_kernel_errors(device); }), "");  // cleared
  set_deferred_error_checks(device, false);
  fake_reset();
}

}  // namespace modelc::kernels::cuda::test
