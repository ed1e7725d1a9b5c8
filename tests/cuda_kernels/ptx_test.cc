// The embedded PTX of the hand kernels: an entry point for every kernel the ops launch, it
// assembles with ptxas for sm_80 and sm_90, and the CUDA library table holds every CPU
// library op but matmul and the convolutions. Skips, saying why, when the runtime was built
// without nvcc or ptxas is missing.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "kernels/cuda/launches.h"
#include "kernels/cuda/library.h"
#include "tests/cuda_kernels/harness.h"

namespace modelc::kernels::cuda::test {

namespace {

bool have_ptx() { return *rt::cuda::hand_kernels_ptx() != '\0'; }

}  // namespace

// Every CPU library op has a hand kernel but those that cuBLASLt and cuDNN serve.
TEST(HandKernels, CoverEveryCpuOpButMatmulAndConv) {
  std::vector<std::string> want;
  for (const std::string& op : library_op_names())
    if (op != "matmul" && op.rfind("conv2d", 0) != 0) want.push_back(op);
  EXPECT_EQ(hand_kernel_ops(), want);
}

TEST(HandKernels, RegisteredWhenBuiltWithNvcc) {
  const std::vector<std::string> names = rt::cuda::cuda_library_op_names();
  for (const std::string& op : hand_kernel_ops()) {
    const bool registered = std::find(names.begin(), names.end(), op) != names.end();
    EXPECT_EQ(registered, have_ptx()) << op;
  }
}

TEST(HandKernels, PtxHasEveryEntryPoint) {
  if (!have_ptx()) GTEST_SKIP() << "the runtime was built without nvcc: it has no hand kernels";
  const std::string ptx = rt::cuda::hand_kernels_ptx();
  for (int k = 0; k < kHandKernels; ++k) {
    const std::string entry = std::string(".entry ") + hand_kernel_name(static_cast<HandKernel>(k)) + "(";
    EXPECT_NE(ptx.find(entry), std::string::npos) << entry;
  }
  EXPECT_NE(ptx.find(".target sm_80"), std::string::npos);
}

TEST(HandKernels, PtxAssemblesForSm80AndSm90) {
  if (!have_ptx()) GTEST_SKIP() << "the runtime was built without nvcc: it has no hand kernels";
#ifndef MODELC_PTXAS
  GTEST_SKIP() << "no CUDA toolkit at configure time: no ptxas";
#else
  if (!std::filesystem::exists(MODELC_PTXAS)) GTEST_SKIP() << MODELC_PTXAS << " does not exist";
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / ("modelc-hk-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::filesystem::path ptx = dir / "hand_kernels.ptx";
  std::ofstream(ptx) << rt::cuda::hand_kernels_ptx();
  for (const char* arch : {"sm_80", "sm_90"}) {
    const std::string log = (dir / "ptxas.log").string();
    const std::string cmd = std::string(MODELC_PTXAS) + " -arch=" + arch + " " + ptx.string() + " -o " +
                            (dir / (std::string(arch) + ".cubin")).string() + " > " + log + " 2>&1";
    const int rc = std::system(cmd.c_str());
    std::ifstream in(log);
    const std::string out((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    EXPECT_TRUE(WIFEXITED(rc) && WEXITSTATUS(rc) == 0) << "ptxas -arch=" << arch << " failed:\n" << out;
    std::error_code ec;
    EXPECT_GT(std::filesystem::file_size(dir / (std::string(arch) + ".cubin"), ec), 0u) << arch << ": " << ec.message();
  }
  std::filesystem::remove_all(dir);
#endif
}

}  // namespace modelc::kernels::cuda::test
