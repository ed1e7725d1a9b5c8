// Registers every op's gradient rule (the rules themselves live beside this file, one file
// per op family). Ops left without a rule are not differentiable: sources, comparisons,
// one_hot and the *_grad ops (tests/grad checks that list).
#include "compiler/ir/grads/grad_util.h"
#include "compiler/ir/op_registry.h"

namespace modelc {

void register_gradients(OpRegistry& r) {
  grads::register_elementwise_grads(r);
  grads::register_reduce_grads(r);
  grads::register_shape_grads(r);
  grads::register_nn_grads(r);
  grads::register_conv_grads(r);
}

}  // namespace modelc
