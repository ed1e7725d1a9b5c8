// The reference interpreter: runs any forward graph in double precision.
//
// It is the oracle that every backend, fused or not, is tested against: simple loops, no
// cleverness. Symbolic dimensions are bound from the shapes of the fed inputs.
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
};

// `feeds` gives a tensor for every input and every param, by name. Throws UserError
// naming the input when one is missing or its dtype or shape does not fit.
InterpResult interpret(const Graph& g, const std::map<std::string, RefTensor>& feeds,
                       const InterpOptions& options = {});

// Concrete shape of a symbolic one under the bindings; throws UserError if a symbol is unbound.
std::vector<int64_t> concrete_shape(const Shape& s, const std::map<std::string, int64_t>& dims);

}  // namespace modelc
