// The graph IR: SSA nodes in topological order.
//
// A node holds an op, its inputs (values produced by earlier nodes), attributes, the types
// of its outputs and the source location it came from. Inputs and parameters of the model
// are nodes too (ops `input` and `param`, named). Absent optional inputs are invalid Values.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "compiler/ir/attrs.h"
#include "compiler/ir/types.h"
#include "compiler/support/diagnostics.h"

namespace modelc {

enum class OpKind : uint16_t {
#define OP(E, N) E,
#define UNARY(E, N, ...) E,
#define BINARY(E, N, ...) E,
#include "compiler/ir/ops.def"
#undef OP
#undef UNARY
#undef BINARY
  NumOps
};

using NodeId = uint32_t;
inline constexpr NodeId kNoNode = UINT32_MAX;

struct Value {
  NodeId node = kNoNode;
  uint32_t index = 0;
  bool valid() const { return node != kNoNode; }
  friend bool operator==(const Value&, const Value&) = default;
};

struct Node {
  OpKind op{};
  std::vector<Value> inputs;
  Attrs attrs;
  std::vector<TensorType> outputs;
  SourceLoc loc;
  std::string name;   // input and param nodes: the (hierarchical) name
  std::string scope;  // the def instances this node was inlined from: "block.2/attention.0"
  bool checkpoint = false;  // inside an @checkpoint def or call
};

// A dimension of the model: bound to a value (default or -D) or left symbolic.
struct DimDecl {
  std::string name;
  std::optional<int64_t> value;
  SourceLoc loc;
};

struct Graph {
  std::string name;  // the model's name
  std::vector<DimDecl> dims;
  std::vector<Node> nodes;
  std::vector<NodeId> inputs, params;  // in declaration order
  struct Output {
    std::string name;
    Value value;
    SourceLoc loc;
  };
  std::vector<Output> outputs;
  // Persistent state that is not trained (op `state`): a model's buffers (attribute
  // `buffer`, with an initializer as a param's: batch norm's running statistics) and a
  // train step's optimizer state; and the updates that give params and states their new
  // values once a train step has run. A forward graph's updates are those of its buffers in
  // train mode (the train step applies them; eval reads buffers only, passes/mode.h).
  std::vector<NodeId> states;
  struct Update {
    NodeId target;  // a param or state node
    Value value;    // its value after the step
  };
  std::vector<Update> updates;

  const Node& node(NodeId id) const { return nodes.at(id); }
  const TensorType& type(Value v) const { return nodes.at(v.node).outputs.at(v.index); }
  NodeId add(Node n) {
    nodes.push_back(std::move(n));
    return static_cast<NodeId>(nodes.size() - 1);
  }
  std::optional<NodeId> find_param(const std::string& name) const;
};

// A model's buffer (a state node declared with `buffer`), not optimizer state.
inline bool is_model_buffer(const Node& n) { return n.op == OpKind::State && n.attrs.has("buffer"); }

}  // namespace modelc
