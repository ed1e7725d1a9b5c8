#include "compiler/ir/op_registry.h"

namespace modelc {

void register_shape_ops(OpRegistry& r) { (void)r; }

}  // namespace modelc
