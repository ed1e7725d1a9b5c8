// The reference interpreter: runs any forward graph in double precision.
//
// It is the oracle that every backend, fused or not, is tested against: simple loops, no
// cleverness. Symbolic dimensions are bound from the shapes of the fed inputs.
//
// It also runs train-step graphs (compiler/passes/train_step.h): optimizer state nodes are
// fed by name like params, an input with the attribute `micro` = k receives part k of its
// feed split along dim 0 into as many equal parts as the graph has micro-batches (as the
// runtime splits a batch), and the graph's updates are evaluated into `updates`.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "compiler/ir/graph.h"
#include "compiler/ir/op_registry.h"
#include "compiler/ir/ref_tensor.h"

namespace modelc {

struct InterpResult {
  std::map<std::string, RefTensor> outputs;  // by output name
  std::vector<std::vector<RefTensor>> values;  // every node's outputs, by node id
  std::map<std::string, int64_t> dims;         // the bindings used
  std::map<std::string, RefTensor> updates;    // train steps: each updated param / state's new value, by name
};

// `feeds` gives a tensor for every input, param and state, by name. Throws UserError
// naming the input when one is missing or its dtype or shape does not fit (or, for a
// micro-batched input, when its dim 0 does not split into the micro-batches).
InterpResult interpret(const Graph& g, const std::map<std::string, RefTensor>& feeds,
                       const InterpOptions& options = {});

// Concrete shape of a symbolic one under the bindings; throws UserError if a symbol is unbound.
std::vector<int64_t> concrete_shape(const Shape& s, const std::map<std::string, int64_t>& dims);

}  // namespace modelc
