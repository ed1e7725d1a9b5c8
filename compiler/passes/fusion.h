// Kernel fusion: groups the nodes of a graph into the kernels code generation emits.
//
// Reads: a verified graph, the op registry's fusion kinds, and a predicate from code
// generation saying which nodes it can emit as kernels (everything else is a library call:
// matmul, conv, data movement). Guarantees: every non-source node is in exactly one group,
// except inlined nodes (below); groups are in topological order; a group's outputs are the
// only values of its members that anything outside it reads.
//
// The rules (XLA's loop and input fusion, TVM's pattern kinds):
//  - Elementwise and broadcast nodes fuse into their consumer's group when every user is
//    in that group and reads them element for element (same shape): chains become one
//    loop, and a chain feeding a reduction becomes its prologue.
//  - A reduction (fusion kind `reduction`) anchors a group: sum / mean / max / cross_entropy
//    (output smaller than the input: one work item per output element) or a row op such as
//    softmax / log_softmax / layer_norm (output shaped like its input: one work item per
//    row). Elementwise consumers shaped like its output are its epilogue. A group has at
//    most one anchor, and only its first input takes a prologue.
//  - Cheap values are inlined, not materialised: constants, and elementwise nodes with one
//    element (learning-rate terms, the clipping factor). Every group that reads one
//    recomputes it; it gets a group of its own only when a library call or the graph's
//    outputs need it in memory.
// With fusion off every emittable node is a group of its own (and nothing is inlined).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "compiler/ir/graph.h"

namespace modelc {

struct FusionGroup {
  enum class Kind { Loop, Reduce, Row, Library };
  Kind kind = Kind::Loop;
  NodeId root = kNoNode;    // the member whose output defines the group's loop (its last)
  NodeId anchor = kNoNode;  // Reduce / Row: the reduction
  std::vector<NodeId> nodes;     // members in topological order (inlined nodes included)
  std::vector<Value> inputs;     // values read from memory, in first-use order
  std::vector<Value> outputs;    // values written to memory, in node order
};

struct FusionPlan {
  std::vector<FusionGroup> groups;  // topological order
  std::vector<bool> inlined;        // per node: recomputed where it is read
};

struct FusionOptions {
  bool enabled = true;
  // True for the nodes code generation emits as kernels (KernelCompiler::handles).
  std::function<bool(const Graph&, NodeId)> can_emit;
};

FusionPlan plan_fusion(const Graph& g, const FusionOptions& options);

// `modelc --emit=fusion`: one paragraph per kernel group with its kind, members, inputs,
// outputs and the source lines its nodes came from (`describe` formats a location).
std::string print_fusion(const Graph& g, const FusionPlan& plan,
                         const std::function<std::string(SourceLoc)>& describe);

}  // namespace modelc
