// The NVPTX path: the same target-neutral bodies compile to PTX through LLVM's NVPTX
// backend (one elementwise kernel with broadcasting, one reduction with a symbolic dim),
// and the PTX assembles with ptxas for sm_80 and sm_90 when the CUDA toolkit is installed.
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "tests/codegen/jit_harness.h"

namespace modelc::test {
namespace {

TEST(KernelsNvptx, ElementwiseAndReductionGivePtx) {
  SymbolTable syms;
  KernelCompiler kc(syms);
  OneOp add = build_op(OpKind::Add, {f32({B, 5}), f32({5})});
  OneOp sum = build_op(OpKind::Sum, {f32({B, 7})}, attrs({{"axes", Ints{1}}}));
  kc.emit(add.g, add.node);
  kc.emit(sum.g, sum.node);
  for (const char* sm : {"sm_80", "sm_90"}) {
    std::string ptx = kc.ptx(sm);
    EXPECT_NE(ptx.find(std::string(".target ") + sm), std::string::npos) << ptx;
    EXPECT_NE(ptx.find(".entry k0_add"), std::string::npos) << ptx;
    EXPECT_NE(ptx.find(".entry k1_sum"), std::string::npos) << ptx;
    EXPECT_NE(ptx.find("%tid.x"), std::string::npos);
    EXPECT_NE(ptx.find("%ctaid.x"), std::string::npos);
    const char* ptxas = "/usr/local/cuda/bin/ptxas";
    if (!std::filesystem::exists(ptxas)) {
      std::cerr << "no ptxas at " << ptxas << ": PTX not assembled\n";
      continue;
    }
    std::string dir = testing::TempDir();
    std::string file = dir + "/modelc_kernels_" + sm + ".ptx";
    std::ofstream(file) << ptx;
    std::string cmd = std::string(ptxas) + " -arch=" + sm + " " + file + " -o " + file + ".cubin";
    EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
  }
  // The host path still works after ptx().
  std::shared_ptr<void> code;
  auto descs = kc.finish(code);
  ASSERT_EQ(descs.size(), 2u);
  EXPECT_THROW(kc.ptx(), InternalError);
}

}  // namespace
}  // namespace modelc::test
