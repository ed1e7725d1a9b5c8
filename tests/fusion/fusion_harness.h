// Shared by the fusion tests: the example models' folder and the fusion plan of a graph as
// lowering makes it (code generation's can-emit predicate).
#pragma once

#include <string>

#include "compiler/codegen/codelets.h"
#include "compiler/passes/fusion.h"

namespace modelc::test {

inline const std::string kModels = std::string(MODELC_SOURCE_DIR) + "/models/";

inline FusionPlan plan(const Graph& g, bool enabled = true) {
  FusionOptions o;
  o.enabled = enabled;
  o.can_emit = [](const Graph& gr, NodeId id) { return CodeletCompiler::handles(gr, id); };
  return plan_fusion(g, o);
}

}  // namespace modelc::test
