// Source ops: input, param, constant and state. They have no tensor inputs; their type is
// set when they are created (input and param from their declarations, constant from use,
// state from the param it belongs to).
#include "compiler/ir/op_registry.h"

namespace modelc {

void register_source_ops(OpRegistry& r) {
  auto keep = [](InferCtx&) {};  // the creator sets the output type
  auto fed = [](RefCtx&) {};     // the interpreter feeds these itself
  r.def(OpKind::Input).internal().fusion(FusionKind::Source).infer(keep).reference(fed).no_grad("a source of the graph")
      .summary("a model input, fed each step");
  r.def(OpKind::Param).internal().fusion(FusionKind::Source).infer(keep).reference(fed).no_grad("a source of the graph")
      .summary("a trainable parameter with its initializer");
  r.def(OpKind::State).internal().fusion(FusionKind::Source).infer(keep).reference(fed).no_grad("a source of the graph")
      .summary("persistent optimizer state of a train step, zero-initialised");
  r.def(OpKind::Constant).internal().fusion(FusionKind::Source).infer(keep).no_grad("a source of the graph")
      .reference([](RefCtx& c) {
        double v = c.attrs().f("value");
        for (double& x : c.out[0].data) x = round_to_dtype(v, c.out[0].dtype);
      })
      .summary("a scalar constant broadcast to its shape");
}

}  // namespace modelc
