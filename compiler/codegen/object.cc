// The kernel compiler's shared-object path, for .plan files. (Being written.)
#include "compiler/codegen/kernels_impl.h"

namespace modelc {

std::string KernelCompiler::shared_object() const {
  throw InternalError("kernel compiler: shared objects are not implemented yet");
}

}  // namespace modelc
