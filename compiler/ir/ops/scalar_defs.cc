// The scalar definitions of the elementwise ops, in code generation's primitive language
// (compiler/codegen/scalar.h).
#include "compiler/ir/op_registry.h"

namespace modelc {

void register_scalar_defs(OpRegistry&) {}

}  // namespace modelc
