// Mode specialisation: a forward graph in train mode or in eval mode.
//
// A forward graph serves both: the train step's forward pass (train mode) and the eval
// function (eval mode). What differs is written in the graph: `train_or_eval(a, b)` nodes
// (the values of names after an `if training { } else { }`), the ops whose record says what
// they are in eval mode (OpInfo::eval_identity: dropout is its input; OpInfo::eval_attrs:
// fused attention's dropout rate is 0) and the graph's updates (a model's buffers after a train-mode
// forward pass: batch norm's running statistics; eval reads buffers and never writes them).
//
// Reads: a verified forward graph. Guarantees: no train_or_eval node is read by any node,
// output or update of the result; in eval mode no dropout is read either and the result has
// no updates; node ids are unchanged (the replaced nodes are left for simplify's dead-code
// elimination), so the result is verified as the input was.
#pragma once

#include "compiler/ir/graph.h"

namespace modelc {

enum class Mode { Train, Eval };

Graph specialize_mode(const Graph& g, Mode mode);

}  // namespace modelc
