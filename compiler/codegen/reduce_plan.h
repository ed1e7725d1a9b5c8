// Internal to the kernel compiler: how a reduction (sum / mean / max / cross_entropy) runs,
// from its shapes alone (compiler/codegen/codelet_emit.h: ReducePlan, reduction_work): the
// merged geometry of its input, column tiles, and two phases with their chunks. The
// emitters (kernels_reduce.cc) and the GPU launch shapes (nvptx.cc) read it.
#pragma once

#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "compiler/codegen/codelet_emit.h"

namespace modelc {

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

}  // namespace modelc
