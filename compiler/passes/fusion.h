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
//    (output smaller than the input: one work item per output element, per tile of output
//    columns when it keeps the innermost axis, and two kernels, partials then their
//    combination, for few outputs over many elements: compiler/codegen/codelets_reduce.cc)
//    or a row op such as softmax / log_softmax / layer_norm (output shaped like its input:
//    one work item per row). Elementwise consumers shaped like its output are its epilogue.
//    A group has at most one anchor, and only its first input takes a prologue (column
//    reductions and reductions to a few values included).
//  - Cheap values are inlined, not materialised: constants, and elementwise nodes with one
//    element (learning-rate terms, Adam's bias corrections). Every group that reads one
//    recomputes it; it gets a group of its own only when a library call or the graph's
//    outputs need it in memory, or when it is read more than once and recomputing it would
//    repeat more than kMaxInlineCone nodes (the clipping factor of a global gradient norm
//    sums one term per parameter: each parameter's update recomputing that sum would make
//    the optimizer's code, and its compile time, grow with the square of the parameters).
//  - A matmul or conv2d stays a library call, but absorbs as its epilogue a following add
//    of a bias (along the output's last dim, or conv2d's channels) and then an activation
//    (relu, gelu, tanh, sigmoid; compiler/passes/library_epilogue.h), each only when
//    nothing else reads the value it consumes: in a train step the backward pass usually
//    reads the pre-activation, so there often only the bias folds in.
// With fusion off every emittable node is a group of its own (and nothing is inlined).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "compiler/ir/graph.h"

namespace modelc {

// The most nodes a read of an inlined value may recompute when the value is read more than
// once (see above).
inline constexpr size_t kMaxInlineCone = 16;

struct FusionGroup {
  enum class Kind { Loop, Reduce, Row, Library };
  Kind kind = Kind::Loop;
  NodeId root = kNoNode;    // the member whose output defines the group's loop (its last)
  NodeId anchor = kNoNode;  // Reduce / Row: the reduction; Library: the library op
  std::vector<NodeId> nodes;     // members in topological order (inlined nodes included)
  std::vector<Value> inputs;     // values read from memory, in first-use order
  std::vector<Value> outputs;    // values written to memory, in node order
  // Per output: the index in `inputs` of the value it overwrites in place, or -1. Set by
  // plan_in_place for an optimizer update (the new value of a parameter or optimizer state
  // is written over the old one, which nothing reads afterwards).
  std::vector<int> overwrites;
  // Library groups with an epilogue (matmul or conv2d, compiler/passes/library_epilogue.h):
  // the members are the op, the bias add and the activation it absorbed (either may be
  // missing), and root is the last of them. epilogue_bias: the add's other operand (the
  // bias, read from memory); epilogue_activation: the activation node (kNoNode: none).
  Value epilogue_bias;
  NodeId epilogue_activation = kNoNode;
};

struct FusionPlan {
  std::vector<FusionGroup> groups;  // topological order
  std::vector<bool> inlined;        // per node: recomputed where it is read
  // Runs of consecutive loop groups (indices into `groups`, at least two each) that code
  // generation emits as one horizontal kernel (plan_horizontal).
  std::vector<std::vector<size_t>> horizontal;
};

struct FusionOptions {
  bool enabled = true;
  bool in_place = true;  // with `enabled`: plan_in_place
  bool horizontal = true;  // with `enabled`: plan_horizontal
  // With `enabled`: a matmul or conv2d absorbs the bias add and activation that follow it
  // when nothing else reads the values in between (library epilogues).
  bool library_epilogues = true;
  // True for the nodes code generation emits as kernels (CodeletCompiler::handles).
  std::function<bool(const Graph&, NodeId)> can_emit;
};

// With fusion and in_place enabled, updates are written in place where safe (plan_in_place).
FusionPlan plan_fusion(const Graph& g, const FusionOptions& options);

// In-place updates (compiler/passes/in_place.cc): a loop group's output that is the new
// value of a graph update (Graph::updates: a parameter or optimizer state) overwrites the
// old value's buffer when
//  - the group reads the old value, and every member that reads it is shaped like it
//    (so each work item reads its own element before it writes it);
//  - every other reader of the old value is in an earlier group, none is inlined, and the
//    old value is not a graph output.
// Then the runtime's copy of the new value into the persistent buffer disappears: for an
// AdamW step that is 3 of the 7 full passes over the parameters' size. Fills every group's
// `overwrites` (-1 where not in place).
void plan_in_place(const Graph& g, FusionPlan& plan);

// Horizontal fusion (compiler/passes/horizontal.cc): the optimizer's update groups, one
// loop group per parameter writing it and its state, which read only values computed
// before them and write only updates that no other group reads, are emitted as one kernel
// when they are consecutive (as the train step builds them: after the whole backward).
// That is PyTorch's multi-tensor apply: one launch for every parameter instead of one each.
void plan_horizontal(const Graph& g, FusionPlan& plan);

// `modelc --emit=fusion`: one paragraph per kernel group with its kind, members, inputs,
// outputs and the source lines its nodes came from (`describe` formats a location).
std::string print_fusion(const Graph& g, const FusionPlan& plan,
                         const std::function<std::string(SourceLoc)>& describe);

}  // namespace modelc
