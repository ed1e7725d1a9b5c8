// The CUDA library table: kernels/library_ops.def's ops with their CUDA implementations.
#include "kernels/cuda/library.h"

#include "kernels/cuda/ops.h"

namespace modelc::rt::cuda {

// The vendor-library ops of the table (cuBLASLt: blaslt.cc, cuDNN: dnn.cc), declared by it.
// Each throws RuntimeError saying why when its library cannot be loaded.
#define MODELC_CUDA_LIBRARY(fn) void fn(const CudaLibCall& c);
#define MODELC_CUDA_HAND(planner)
#define MODELC_LIBRARY_OP(name, cpu, cuda) cuda
#include "kernels/library_ops.def"

namespace {

struct CudaImpl {
  CudaLibraryFn fn;
  bool hand;  // a hand-kernel op: needs the hand kernels' PTX
};

const std::map<std::string, CudaLibraryFn>& table() {
  static const std::map<std::string, CudaLibraryFn> t = [] {
    // Built without nvcc there are no hand kernels to launch: those ops stay unregistered,
    // so that the executor says so before it runs anything.
    const bool have_hand_kernels = *hand_kernels_ptx() != '\0';
    std::map<std::string, CudaLibraryFn> r;
    auto add = [&](const char* op, CudaImpl impl) {
      if (!impl.hand || have_hand_kernels) r.emplace(op, impl.fn);
    };
#define MODELC_CUDA_LIBRARY(fn) CudaImpl{fn, false}
#define MODELC_CUDA_HAND(planner) CudaImpl{kernels::cuda::run_hand_kernel_op, true}
#define MODELC_LIBRARY_OP(name, cpu, cuda) add(#name, cuda);
#include "kernels/library_ops.def"
    return r;
  }();
  return t;
}

}  // namespace

CudaLibraryFn find_cuda_library_op(const std::string& name) {
  auto it = table().find(name);
  return it == table().end() ? nullptr : it->second;
}

std::vector<std::string> cuda_library_op_names() {
  std::vector<std::string> names;
  for (const auto& [name, fn] : table()) names.push_back(name);
  return names;
}

}  // namespace modelc::rt::cuda
