// Which model inputs hold indices, and up to what: the limits the runtime checks data
// against when it is loaded and fed (rt::BufferDesc::index_limit).
//
// Reads the op records only: an op's index operands (OpInfo::index_operands: embedding's
// ids, cross_entropy's targets) and the ops that only move values (OpInfo::moves_values:
// reshape, slice, concat, ...). An input reaches an index operand when a chain of such
// movers connects them; then each of its values must lie in [0, limit). An index that
// passes through arithmetic (ids + 1) is not traced: its limit is not the input's, and
// the kernels still refuse (embedding) or poison (cross_entropy: NaN) a bad one.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>

#include "compiler/ir/graph.h"

namespace modelc {

struct IndexBound {
  int64_t limit = 0;  // every value in [0, limit)
  // What the limit counts and where it is declared: "the classes (the last dim of the
  // logits) of cross_entropy at m.model:14:10; 10 is a dim of parameter 'linear.1.b' f32[10]
  // declared at m.model:5:3".
  std::string note;
  // A value outside the range that is accepted as "no index" (cross_entropy's ignore_index),
  // when every use of the input accepts that one value.
  std::optional<int64_t> ignore;
};

// Per input node, the tightest limit of the index operands it reaches (inputs that reach
// none are absent; limits that are not constant are skipped), and the ignored value when
// all of them ignore the same one. `describe` renders a source
// location ("" when the graph has none).
std::map<NodeId, IndexBound> input_index_bounds(const Graph& g, const std::function<std::string(SourceLoc)>& describe);

}  // namespace modelc
