// Library epilogues: which library calls take a bias and an activation after their result
// (the runtime applies them: runtime/base/program.h, ints["epilogue"]) and which nodes qualify.
// Kernel fusion (compiler/passes/fusion.h) reads these rules to let a matmul or conv2d
// group absorb the bias add and activation that follow it; the lowering turns the absorbed
// activation into its runtime code. One table each, keyed by op kind; a new activation
// the runtime learns is one entry here and one code in runtime/base/program.h.
#pragma once

#include <optional>

#include "compiler/ir/graph.h"
#include "runtime/base/program.h"

namespace modelc {

struct EpilogueAnchor {
  size_t bias_axis = 0;     // the output axis a bias runs along (matmul: the last; conv2d: channels)
  bool takes_bias = true;   // false: the op adds a bias of its own (conv2d's third input)
};

// The epilogue library node `id` can take, or nullopt (other ops, outputs that are not f32
// or have no axis for a bias).
std::optional<EpilogueAnchor> epilogue_anchor(const Graph& g, NodeId id);

// The runtime activation elementwise node `id` is (relu, gelu in both forms, tanh, sigmoid
// on f32), or None.
rt::EpilogueActivation epilogue_activation(const Graph& g, NodeId id);

// When node `add` adds a bias to the result of node `result` (an f32 add shaped like the
// result, either operand order), its bias operand; else an invalid Value. A bias is
// right-aligned with the result and all 1s except over `axis`, where it matches the
// result: [N] or [1, N] for a matmul's [B, N]; [C, 1, 1] or [1, C, 1, 1] for a conv2d.
Value epilogue_bias(const Graph& g, NodeId add, NodeId result, size_t axis);

// The shape rule alone: whether a `bias` shape added to an `out` shape runs along `axis`.
bool is_epilogue_bias(const Shape& bias, const Shape& out, size_t axis);

}  // namespace modelc
