// What an evaluation of a node costs: its FLOPs (the record's rule, else by fusion kind)
// and the bytes it reads and writes (compiler/ir/op_registry.h).
#include "compiler/ir/op_registry.h"

namespace modelc {
namespace {

Dim numel(const TensorType& t) {
  Dim n(1);
  for (const Dim& d : t.shape) n = n * d;
  return n;
}

}  // namespace

Dim op_flops(const Graph& g, NodeId id) {
  const Node& node = g.node(id);
  const OpInfo& info = op_info(node.op);
  if (info.flops) return info.flops(g, node);
  Dim out(0);
  for (const TensorType& t : node.outputs) out = out + numel(t);
  switch (info.fusion) {
    case FusionKind::Source:
      return Dim(0);
    case FusionKind::Reduction:
    case FusionKind::Row: {
      Dim in(0);
      for (const Value& v : node.inputs)
        if (v.valid()) in = in + numel(g.type(v));
      return in;
    }
    case FusionKind::Elementwise:
    case FusionKind::Broadcast:
    case FusionKind::Injective:
    case FusionKind::Opaque:
      break;
  }
  return out;
}

Dim op_bytes(const Graph& g, NodeId id) {
  const Node& node = g.node(id);
  Dim bytes(0);
  for (const Value& v : node.inputs)
    if (v.valid()) bytes = bytes + numel(g.type(v)) * Dim(dtype_bytes(g.type(v).dtype));
  for (const TensorType& t : node.outputs) bytes = bytes + numel(t) * Dim(dtype_bytes(t.dtype));
  return bytes;
}

}  // namespace modelc
