// Rematerialization: the graph transform activation checkpointing is built on, and two
// placement policies (the annotated one and Chen et al.'s sqrt(n) segmentation).
//
// Reads: a train-step graph (compiler/passes/train_step.h), whose node order is its schedule,
// and a set of forward nodes to drop. Guarantees: the result computes the same outputs and
// updates from the same feeds (bit for bit under the reference interpreter), every forward node
// keeps its forward uses, and every read of a dropped node by a non-forward node reads a clone
// of it instead, emitted just before the first non-forward node that needs it. The result is
// verified (compiler/ir/verifier.h). Run it after CSE: a CSE pass would fold clones back.
//
// "Forward" here is the ancestors of the graph's `loss` output (the loss included, its inputs,
// params and constants too); everything else (backward, clipping, optimizer update) is "rest".
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "compiler/ir/graph.h"

namespace modelc {

// A train step split into its forward and the rest.
struct StepParts {
  Value loss;                         // the `loss` output's value
  std::vector<bool> forward;          // by node id: an ancestor of `loss` (or `loss` itself)
  std::vector<NodeId> forward_nodes;  // the forward nodes, in node order
  std::vector<NodeId> rest;           // the other nodes, in node order
  // The candidate activations: forward nodes, not inputs / params / states, some output of
  // which a non-forward node reads (what the backward saves), in node order.
  std::vector<NodeId> saved;
};
// Throws InternalError when the graph has no `loss` output.
StepParts split_step(const Graph& step);

// The transformed graph and how it relates to the original.
struct Recomputed {
  Graph graph;
  std::vector<NodeId> new_id;         // node id in the original -> its id in `graph`
  std::map<NodeId, NodeId> original;  // clone's id in `graph` -> the original node it recomputes
  bool is_clone(NodeId id) const { return original.count(id) > 0; }
};

// Recomputes the nodes of `drop` for the backward. A clone copies its original's op, attrs
// (dropout's `key` with them, so a recomputed dropout draws the same mask), output types, loc,
// scope, name and checkpoint flag; its inputs are the clones of dropped inputs (recursively)
// and the original values of the others. One clone per dropped node, shared by all its
// non-forward readers; clones go in topological (original) order just before the first
// non-forward node that needs them. Outputs and updates keep reading the original values.
// A dropped node no non-forward node needs (directly or through other clones) gets no
// clone. An empty `drop` returns an identical graph. Duplicates in `drop` are ignored.
// Throws InternalError (`drop` comes from the compiler's placement, never from the user:
// a bad one is a compiler bug) for an id out of range, a non-forward node, or an input,
// param or state (sources cannot be recomputed).
Recomputed recompute(const Graph& step, const std::vector<NodeId>& drop);

// The bytes of a tensor type; the policies take one so that symbolic shapes are sized under
// the caller's bindings (B = 64, ...).
using ByteSize = std::function<int64_t(const TensorType&)>;
// Elements times dtype bytes, every symbol evaluated under `dims`; the function throws
// InternalError when a shape has a symbol `dims` does not bind.
ByteSize bytes_under(std::map<std::string, int64_t> dims);

// The `@checkpoint` policy. Sema marks the nodes inside an @checkpoint def or call
// (Node::checkpoint). The marked forward nodes form regions: a node's region is the
// shortest prefix of its scope (a def instance such as "block.2") under which every
// forward node but inputs, params and states is marked; a marked node whose own scope
// holds unmarked nodes (an op called as `@checkpoint f(x)`) is a region by itself. Every
// marked node is dropped except a region's boundary: a node that a forward node outside
// its region (or a graph output or update) reads; a one-node region is always dropped. So,
// as torch.utils.checkpoint does, a region's inside is recomputed from values that are
// kept by construction (the region's inputs, params, the boundaries of earlier regions),
// and a chain of checkpointed blocks never recomputes the whole forward. Inputs, params
// and states are never dropped. In node order.
std::vector<NodeId> annotated_drop(const Graph& step);

// Chen et al. 2016, "Training deep nets with sublinear memory cost": the forward schedule
// (the forward nodes but inputs, params and states, in node order) is cut into
// k = round(sqrt(n)) segments, n the number of candidate activations (StepParts::saved),
// holding equal candidate bytes: activation sizes vary by orders of magnitude (a [B,H,T,T]
// attention score against a [B,T,C] row), so equal node counts would not balance the memory
// a segment holds while it is recomputed (when every candidate has 0 bytes: equal counts).
// Kept: every forward value read across a cut (the segment boundaries: what a later segment
// needs), every value a graph output or update reads, and the last segment (the backward
// starts with it, so recomputing it saves nothing: torch's checkpoint_sequential does the
// same); every other forward node is dropped, so that a segment is recomputed from its
// boundaries alone. Fewer than 3 candidates give one segment and drop nothing. In node order.
std::vector<NodeId> sqrt_n_drop(const Graph& step, const ByteSize& bytes);

// The same segmentation into `segments` parts (sqrt_n_drop: round(sqrt(n))); 1 drops
// nothing but what a single segment holds (nothing: the last segment is kept).
std::vector<NodeId> segment_drop(const Graph& step, const ByteSize& bytes, int64_t segments);

}  // namespace modelc
