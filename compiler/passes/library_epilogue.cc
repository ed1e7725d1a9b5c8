#include "compiler/passes/library_epilogue.h"

namespace modelc {

namespace {

using rt::EpilogueActivation;

bool is_f32(const TensorType& t) { return t.dtype == DType::F32; }

}  // namespace

std::optional<EpilogueAnchor> epilogue_anchor(const Graph& g, NodeId id) {
  const Node& n = g.node(id);
  if (n.outputs.size() != 1 || !is_f32(n.outputs[0])) return std::nullopt;
  const size_t rank = n.outputs[0].shape.size();
  switch (n.op) {
    case OpKind::Matmul:  // [..., M, N] + bias[N]
      if (rank == 0) return std::nullopt;
      return EpilogueAnchor{rank - 1, true};
    case OpKind::Conv2d:  // [N, C, H, W] + bias[C, 1, 1]; conv2d(x, w, b) has one already
      if (rank != 4) return std::nullopt;
      return EpilogueAnchor{1, !(n.inputs.size() > 2 && n.inputs[2].valid())};
    default: return std::nullopt;
  }
}

EpilogueActivation epilogue_activation(const Graph& g, NodeId id) {
  const Node& n = g.node(id);
  if (n.outputs.size() != 1 || !is_f32(n.outputs[0]) || n.inputs.size() != 1 || !n.inputs[0].valid() ||
      !is_f32(g.type(n.inputs[0])))
    return EpilogueActivation::None;
  switch (n.op) {
    case OpKind::Relu: return EpilogueActivation::Relu;
    case OpKind::Tanh: return EpilogueActivation::Tanh;
    case OpKind::Sigmoid: return EpilogueActivation::Sigmoid;
    case OpKind::Gelu:
      return n.attrs.has("approximate") && n.attrs.s("approximate") == "tanh" ? EpilogueActivation::GeluTanh
                                                                              : EpilogueActivation::GeluErf;
    default: return EpilogueActivation::None;
  }
}

Value epilogue_bias(const Graph& g, NodeId add, NodeId result, size_t axis) {
  const Node& n = g.node(add);
  const Node& r = g.node(result);
  if (n.op != OpKind::Add || n.inputs.size() != 2 || n.outputs.size() != 1 || r.outputs.size() != 1 ||
      !is_f32(n.outputs[0]) || n.outputs[0].shape != r.outputs[0].shape)
    return {};
  const Value mine{result, 0};
  const Value other = n.inputs[0] == mine ? n.inputs[1] : n.inputs[0];
  if (!(n.inputs[0] == mine || n.inputs[1] == mine) || !other.valid() || other == mine || !is_f32(g.type(other)) ||
      !is_epilogue_bias(g.type(other).shape, r.outputs[0].shape, axis))
    return {};
  return other;
}

bool is_epilogue_bias(const Shape& bias, const Shape& out, size_t axis) {
  if (axis >= out.size() || bias.size() > out.size() || bias.size() < out.size() - axis) return false;
  const size_t lead = out.size() - bias.size();  // bias dim k lines up with out dim lead + k
  for (size_t k = 0; k < bias.size(); ++k) {
    const Dim& want = lead + k == axis ? out[axis] : Dim(1);
    if (bias[k] != want) return false;
  }
  return true;
}

}  // namespace modelc
