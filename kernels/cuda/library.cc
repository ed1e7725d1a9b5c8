#include "kernels/cuda/library.h"

namespace modelc::rt::cuda {
namespace {

const CudaLibraryTable& table() {
  static const CudaLibraryTable t = [] {
    CudaLibraryTable r;
    register_cuda_matmul_ops(r);
    register_cuda_dnn_ops(r);
    register_cuda_kernel_ops(r);
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
