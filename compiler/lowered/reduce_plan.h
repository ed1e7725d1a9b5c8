// How a reduction (sum / mean / max / cross_entropy) runs, from its shapes alone: the
// merged geometry of its input, column tiles, and two phases with their chunks. The memory
// plan reads it for the scratch between the phases (compiler/lowered/lower.cc), the codelet
// emitters (compiler/codegen/codelets_reduce.cc) and the GPU launch shapes (nvptx.cc) for
// everything else.
#pragma once

#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "compiler/ir/graph.h"

namespace modelc {

// sum / mean / max / cross_entropy (the emitters: compiler/codegen/codelets_reduce.cc). How one runs, from its shapes:
//  - tile > 1: a column reduction (it keeps the innermost axis, e.g. a bias gradient): a
//    work item is a tile of up to `tile` consecutive output columns (CodeletBuilder::
//    tile_reduce), so that it reads rows of contiguous columns;
//  - chunks > 1: two phases, for few work items over many elements (a loss, a squared
//    norm, a bias gradient of few tiles): the Partial kernel reduces `chunks` chunks of
//    the reduced elements per work item of the one-phase form into a scratch buffer, and
//    the Finish kernel combines each output's partials and runs the group's epilogue.
struct ReducePlan {
  int64_t tile = 1;
  int64_t chunks = 1;
  DType scratch_type = DType::F32;  // the scratch buffer between the phases (chunks > 1)
  int64_t scratch_elements = 0;
  // The divisor of the group's prologue reads (a broadcast operand's innermost extent, as
  // index_divisor gives it), set by the group's emitter: the loops then run rows of that
  // many elements innermost where the shape allows (CodeletBuilder::known_divmod).
  std::optional<Dim> inner;
};
ReducePlan plan_reduction(const Graph& g, const Node& n);
enum class ReducePhase { Whole, Partial, Finish };
// What a reduction kernel runs over: its work items, its grain, and the block size of its
// block-mapped GPU flavour (0: thread-mapped).
struct ReduceWork {
  Dim extent;
  int64_t grain = 1;
  int64_t gpu_elements = 0;  // elements a block-mapped work item reduces (0: thread-mapped)
};
ReduceWork reduction_work(const Graph& g, const Node& n, const ReducePlan& plan, ReducePhase phase);


// sum / mean / max: the input's dims merged into groups of neighbours of the same kind
// (kept or reduced), dims of extent 1 dropped, with their strides.
struct Geometry {
  struct Group {
    Dim extent;
    bool reduced;
    Dim stride = 1;
  };
  std::vector<Group> groups;
  Dim count = 1;    // reduced elements per output
  Dim outputs = 1;  // output elements
  bool column = false;  // the innermost group is kept (and something is reduced)
  Dim columns = 1;      // column: the innermost group's extent
  size_t chunked = 0;   // the reduced group a two-phase reduction splits (the longest)
};
Geometry geometry(const Graph& g, const Node& n);

// A column reduction's tiles per row of outputs (a constant), or nullopt when the columns
// are symbolic: then every column is a work item, and those at multiples of the tile width
// reduce a tile while the others do nothing.
std::optional<int64_t> tiles_per_row(const Geometry& geo, int64_t tile);

// The work items of the one-phase form (outputs, or tiles) and their elements, estimated.
std::pair<Dim, int64_t> one_phase_items(const Graph& g, const Node& n, const ReducePlan& p);

// A rough per-work-item cost from a shape's constant dims (a symbolic dim counts as 64).
int64_t estimate(const Shape& s);

}  // namespace modelc
