// Recomputation placement: which activations of the train step to keep for the backward pass
// and which to recompute there, so that the step's predicted peak memory fits a budget.
//
// Reads: a train-step graph (compiler/passes/train_step.h) and a cost oracle that predicts
// the peak of a candidate step (compiler/pipeline.cc runs its own fusion and memory-plan passes on it, without code, and sizes its
// memory plan, runtime/execution/memory_plan.h). Guarantees: the drop set it returns contains the
// `@checkpoint` policy's (annotated_drop) unless told to ignore annotations, and with a budget, the oracle's peak of the
// recomputed step is within the budget when `fits` is set.
//
// Two algorithms:
//  - sqrt_n: Chen et al.'s segmentation (sqrt_n_drop, compiler/passes/recompute.h), the
//    baseline: its placement does not depend on the budget, so it either fits or not.
//  - greedy (the default): candidates (the forward values the backward reads) ranked by
//    bytes freed per recomputed FLOP, so that elementwise and softmax outputs, which cost
//    about one FLOP per element and whose recomputation fuses into the backward kernel that
//    reads them, go before matmul and convolution outputs, which cost 2K FLOPs per
//    element. In that order it recomputes each candidate that does not raise the peak,
//    until the peak fits; then it gives back, most expensive first, every recomputation the
//    budget does not need. (The peak is not monotone in what is recomputed: a value whose
//    inputs are recomputed too is rebuilt from further back, and a whole recomputed chain
//    is live at once in the backward, so each step is checked with the oracle.)
// When nothing fits, the placement says so (fits = false) with the best peak it reached.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "compiler/ir/graph.h"
#include "compiler/passes/recompute.h"

namespace modelc {

enum class RecomputeAlgorithm : uint8_t { Greedy, SqrtN };

struct PlacementOptions {
  std::optional<int64_t> budget;  // bytes; none: only the @checkpoint annotations
  RecomputeAlgorithm algorithm = RecomputeAlgorithm::Greedy;
  bool annotations = true;  // honour @checkpoint (false: only what the budget needs)
  // The predicted peak of a (recomputed) train step, in bytes.
  std::function<int64_t(const Graph&)> peak;
  // Symbol values that size tensors and FLOPs (B = 32, ...).
  std::map<std::string, int64_t> dims;
};

struct RecomputePlacement {
  std::vector<NodeId> drop;   // forward nodes of the step to recompute, in node order
  bool fits = true;           // the peak with `drop` is within the budget (true without one)
  int64_t peak_before = 0;    // with nothing recomputed (0 when not evaluated: no budget)
  int64_t peak_after = 0;     // with `drop` (without a fit: the smallest peak found)
  double recompute_flops = 0; // the FLOPs the clones add to one step
  double step_flops = 0;      // the FLOPs of the step without recomputation
  int evaluations = 0;        // calls of the peak oracle
  std::string algorithm;      // "greedy", "sqrt(n)", "@checkpoint"
};

// What a compilation recomputed, for --emit=memory.
struct RecomputeReport {
  RecomputePlacement placement;
  std::optional<int64_t> budget;
  struct Value {
    std::string what, where;  // op and node ("gelu %41"), source line
    int64_t bytes = 0;
    double flops = 0;
  };
  std::vector<Value> recomputed;  // the clones' originals, largest first
};

// Chooses the drop set. Without a budget: annotated_drop, peaks not evaluated.
RecomputePlacement place_recomputation(const Graph& step, const PlacementOptions& o);

// The FLOPs of evaluating node `id` once, under `dims` (recompute_flops evaluated; 0 when
// it cannot be evaluated).
double node_flops(const Graph& g, NodeId id, const std::map<std::string, int64_t>& dims);

}  // namespace modelc
