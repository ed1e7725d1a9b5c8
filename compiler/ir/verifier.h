// The IR verifier: checks a graph's invariants and reports every problem it finds.
//
// It checks that inputs refer to earlier nodes and existing outputs, that every required
// input is present, that each op's shape rule, run again, gives the stored output types,
// that the graph's input / param / state / output lists are well formed and uniquely named
// (a train step's inputs share a name across micro-batches), that every update targets a
// param or state once with a value of its type, and that every symbol in a shape is a
// dimension of the model. Passes run it after they
// rewrite a graph; one message per problem, each naming the node ("%7 (add): ...").
#pragma once

#include <string>
#include <vector>

#include "compiler/ir/graph.h"

namespace modelc {

// Every problem found (dims, then node by node, then the lists); empty when the graph is well formed.
std::vector<std::string> verify_graph(const Graph& g);

}  // namespace modelc
