// The predict function: the model's forward pass in eval mode, from the inputs a user has
// when predicting to the values they want (modelrun predict and generate, `modelc
// --inference` plans, Session::predict).
//
// Reads: a forward graph in eval mode (passes/mode.h) whose outputs are either the model's
// declared ones or the tensors asked for by name (ElaborateOptions::outputs, `requested`).
// `targets`: the inputs prediction is not given (the train data's labels or target tokens).
// Requested outputs that read a target are an error; of the declared outputs, those that
// read one (the loss) are dropped, and none left is an error that says how to name one.
// Guarantees: every output reads no target, and every input is read (the graph is
// simplified, unread inputs removed: passes/simplify.h), so the function's feeds are exactly
// what its outputs need.
// Throws SourceError at the output (the first dropped one when none is left).
#pragma once

#include <set>
#include <string>

#include "compiler/ir/graph.h"

namespace modelc {

Graph predict_graph(const Graph& g, const std::set<std::string>& targets, bool requested);

}  // namespace modelc
