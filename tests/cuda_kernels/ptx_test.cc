// The tables of kernels/library_ops.def and kernels/cuda/hand_kernels.def against what the
// runtime registers and what the embedded PTX holds: every library op has a CUDA
// implementation when the runtime was built with nvcc (without it, every op but the hand-
// kernel ones), the hand-kernel ops are those the .def says and they plan with their own
// checks, every hand kernel has its PTX entry point, and the PTX assembles with ptxas for
// sm_80 and sm_90. The PTX tests skip, saying why, when the runtime was built without nvcc
// or ptxas is missing.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>

#include "kernels/cuda/launches.h"
#include "kernels/cuda/library.h"
#include "tests/cuda_kernels/harness.h"

namespace modelc::kernels::cuda::test {

namespace {

bool have_ptx() { return *rt::cuda::hand_kernels_ptx() != '\0'; }

// kernels/library_ops.def's ops whose CUDA implementation is a hand-kernel planner.
std::vector<std::string> def_hand_ops() {
  std::vector<std::string> r;
#define MODELC_CUDA_HAND(planner) true
#define MODELC_CUDA_LIBRARY(fn) false
#define MODELC_LIBRARY_OP(name, cpu, cuda) \
  if (cuda) r.push_back(#name);
#include "kernels/library_ops.def"
  std::sort(r.begin(), r.end());
  return r;
}

bool is_hand_op(const std::string& op) {
  const std::vector<std::string> hand = def_hand_ops();
  return std::binary_search(hand.begin(), hand.end(), op);
}

}  // namespace

TEST(HandKernels, OpsAreTheDefFilesHandOps) {
  const std::vector<std::string> hand = hand_kernel_ops(), all = library_op_names();
  EXPECT_EQ(hand, def_hand_ops());
  EXPECT_FALSE(hand.empty());
  for (const std::string& op : hand) EXPECT_TRUE(std::binary_search(all.begin(), all.end(), op)) << op;
}

// With nvcc every library op has a CUDA implementation; without it, all but the hand-kernel
// ops (which then have nothing to launch).
TEST(HandKernels, EveryLibraryOpHasACudaImplementation) {
  std::vector<std::string> want;
  for (const std::string& op : library_op_names())
    if (have_ptx() || !is_hand_op(op)) want.push_back(op);
  EXPECT_EQ(rt::cuda::cuda_library_op_names(), want);
  for (const std::string& op : library_op_names())
    EXPECT_EQ(rt::cuda::find_cuda_library_op(op) != nullptr, have_ptx() || !is_hand_op(op)) << op;
  EXPECT_EQ(rt::cuda::find_cuda_library_op("no_such_op"), nullptr);
}

// plan_launches dispatches every hand-kernel op to its own planner, whose checks speak first
// (a call without operands fails naming the op, not "no hand kernel"); the other ops have no
// hand kernel.
TEST(HandKernels, EveryHandOpHasAPlanner) {
  for (const std::string& op : library_op_names()) {
    LibCall c;
    c.op = op;
    c.where = kRunOpWhere;
    const std::string msg = error_of([&] { plan_launches(c, nullptr); });
    const std::string none = op + " at test.model:1:1: has no hand kernel on CUDA";
    EXPECT_EQ(msg.rfind(op + " at test.model:1:1: ", 0), 0u) << op << ": '" << msg << "'";
    if (is_hand_op(op)) {
      EXPECT_NE(msg, none) << op;
    } else {
      EXPECT_EQ(msg, none) << op;
    }
  }
}

// The kernels' entry points: distinct names, each in the PTX, and no other entry there.
TEST(HandKernels, PtxHasEveryEntryPoint) {
  std::set<std::string> names;
  for (int k = 0; k < kHandKernels; ++k) names.insert(hand_kernel_name(static_cast<HandKernel>(k)));
  EXPECT_EQ(names.size(), static_cast<size_t>(kHandKernels));
  EXPECT_EQ(names.count(""), 0u);
  if (!have_ptx()) GTEST_SKIP() << "the runtime was built without nvcc: it has no hand kernels";
  const std::string ptx = rt::cuda::hand_kernels_ptx();
  for (const std::string& name : names) EXPECT_NE(ptx.find(".entry " + name + "("), std::string::npos) << name;
  size_t entries = 0;
  for (size_t at = ptx.find(".entry "); at != std::string::npos; at = ptx.find(".entry ", at + 1)) ++entries;
  EXPECT_EQ(entries, names.size());
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
