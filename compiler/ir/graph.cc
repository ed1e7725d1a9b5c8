#include "compiler/ir/graph.h"

namespace modelc {

std::optional<NodeId> Graph::find_param(const std::string& n) const {
  for (NodeId id : params)
    if (nodes[id].name == n) return id;
  return std::nullopt;
}

}  // namespace modelc
