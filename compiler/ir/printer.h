// The IR printer: a graph as deterministic text, one node per line.
//
//   model char_gpt(B, T = 128, C = 192)
//     %0 = input "tokens" : i32[B,128]
//     %1 = param "wte" : f32[96,192] {init = "normal", std = 0.02}
//     %2 = embedding(%0, %1) : f32[B,128,192]  @block.0  # models/char_gpt.model:8:7
//     %3:3 = split(%2) {sections = 3, axis = 2} : (f32[B,128,64], f32[B,128,64], f32[B,128,64])
//     %4 = add(%3#0, %3#1) : f32[B,128,64]
//     %5 = layer_norm(%2, _, _) {eps = 1e-05} : f32[B,128,192]
//     output loss = %40
//
// A train step's optimizer state prints like a param (`%50 = state "wte.exp_avg" : ...`) and
// its updates follow the outputs, one per updated param or state: `update wte <- %61`.
// Named nodes (inputs, params, states) print their name instead of an argument list and their
// attributes after the type; `_` is an absent optional input. Tests and --dump-ir compare
// this text, so it depends on nothing but the graph (and the source manager, when given).
#pragma once

#include <string>

#include "compiler/ir/graph.h"

namespace modelc {

// The location comments are printed only when `sm` is given.
std::string print_graph(const Graph& g, const SourceManager* sm = nullptr);

// One value as the printer shows it: "%3" for a single-output node, "%3#1" otherwise,
// "_" for an absent one.
std::string value_str(const Graph& g, Value v);

}  // namespace modelc
