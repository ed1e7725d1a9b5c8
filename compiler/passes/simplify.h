// Simplification of a graph: constant folding, common-subexpression elimination and
// dead-code elimination, in that order, in one sweep.
//
// Reads: a verified graph (forward or train step). Guarantees: the result computes the same
// outputs and updates, bit for bit except where a fold's single rounding of the exact value
// differs from the codelet's f32 arithmetic, with
//  - folded: a node whose every input is a constant and whose op is pointwise (the record's
//    `pointwise`, evaluated in double and rounded to the output dtype, as the Constant op's
//    reference rounds) or broadcasts its one input (broadcast_to) becomes a constant;
//  - merged: two reductions, row ops or library ops of the same op, inputs,
//    attributes and output types become one (the first), since every op is a function of
//    those alone; elementwise and movement duplicates are left to fusion, which computes
//    them inside each consumer for free (merged, they would be written out and read back),
//    and constants, which codelets inline, keep their own source lines;
//  - removed: every node no output or update reads, except inputs, params and states (the
//    function's feeds and persistent buffers keep existing); inputs too without
//    `keep_inputs` (the predict function feeds only what it reads, passes/predict.h).
// Node order stays topological; source locations and scopes are those of the kept nodes.
#pragma once

#include <cstddef>

#include "compiler/ir/graph.h"

namespace modelc {

struct SimplifyStats {
  size_t folded = 0, merged = 0, removed = 0;
};

Graph simplify(const Graph& g, SimplifyStats* stats = nullptr, bool keep_inputs = true);

}  // namespace modelc
