// Reverse-mode automatic differentiation over the graph IR.
//
// Reads: a graph whose `loss` value is a rank-0 float tensor. Appends the backward nodes to
// the same graph (built by each op's registered gradient rule, from other ops) and returns
// d loss / d wrt[i] for each requested value, with the type of wrt[i]. A value the loss does
// not depend on gets a zero tensor. Throws UserError when the loss is not a float scalar,
// and SourceError (at the op's call) when an op on the path has no gradient rule, naming
// the op and why its record gives none (OpInfo::no_grad).
#pragma once

#include <vector>

#include "compiler/ir/graph.h"

namespace modelc {

std::vector<Value> append_gradients(Graph& g, Value loss, const std::vector<Value>& wrt);

}  // namespace modelc
