// The op registry: one entry per op with everything the compiler knows about it.
//
//   signature  how the language calls it: "x: tensor, axis: int = -1"; tensor parameters
//              become node inputs (in order), the rest become attributes by name
//   fusion     its fusion kind; passes read only this
//   infer      its shape and dtype rule (may canonicalise attributes, e.g. axis -1 -> 2)
//   reference  its semantics in double precision, for the reference interpreter
//   unary/binary  the scalar function of an elementwise op (the reference maps it)
//   grad       its gradient, built from other ops (compiler/ir/grad.h; registered in
//              compiler/ir/grads/*.cc)
//   scalar     an elementwise op's scalar definition in code generation's primitive
//              language (compiler/codegen/scalar.h), per attributes
//   autocast   its mixed-precision policy (compiler/passes/autocast.h): run in the low
//              type (matmul, conv), in f32 (reductions, softmax, norms, losses), or in
//              whatever its inputs are (the default)
//
// Entries are written in compiler/ir/ops/*.cc, one file per op family.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "compiler/ir/graph.h"
#include "compiler/ir/ref_tensor.h"

namespace modelc {

// Row: a reduction along one axis whose output has its input's shape (softmax, layer_norm):
// code generation computes it a lane at a time, so consumers shaped like it fuse after it.
enum class FusionKind { Source, Elementwise, Broadcast, Injective, Reduction, Row, Opaque };
std::string_view fusion_kind_name(FusionKind k);

// How autocast (compiler/passes/autocast.h) treats an op under bf16 / fp16 precision:
//   Lower   its float inputs are cast to the low type, it runs there (the library widens
//           and accumulates in f32) and its result is cast back to f32;
//   F32     its low-precision float inputs are cast up to f32, and its result back to the
//           type it had;
//   Follow  left alone: it runs in the types its inputs have.
enum class AutocastPolicy { Follow, Lower, F32 };

// The kinds of values a parameter of a built-in accepts.
enum class ParamKind {
  Tensor,         // a tensor (a number converts to a rank-0 constant)
  OptTensor,      // a tensor or absent (default `none`)
  TensorList,     // [t1, t2, ...]: node inputs, one each
  Int, Float, Bool, Ints, Shape, Str, DType
};

struct ParamSpec {
  std::string name;
  ParamKind kind{};
  std::optional<AttrValue> default_value;  // absent: required (OptTensor: absent means none)
  bool has_default = false;
};

// Parses "x: tensor, axis: int = -1, eps: float = 1e-5, w: tensor? = none".
// Throws InternalError on a malformed spec (specs are ours, not the user's).
std::vector<ParamSpec> parse_signature(std::string_view spec);
std::string signature_str(const std::vector<ParamSpec>& params);  // for messages and docs

struct InferCtx {
  std::vector<const TensorType*> in;  // one per tensor input; nullptr for an absent one
  Attrs& attrs;
  std::vector<TensorType> out;
  // The first failure; `input` names the tensor input to blame (-1: the whole call),
  // `attr` the attribute to blame ("" for none).
  std::optional<std::string> error;
  int error_input = -1;
  std::string error_attr;

  const TensorType& input(int i) const { return *in.at(static_cast<size_t>(i)); }
  bool has_input(int i) const { return i < static_cast<int>(in.size()) && in[static_cast<size_t>(i)]; }
  void fail(std::string msg, int input = -1) {
    if (!error) { error = std::move(msg); error_input = input; }
  }
  void fail_attr(std::string msg, std::string attr) {
    if (!error) { error = std::move(msg); error_attr = std::move(attr); }
  }
  bool failed() const { return error.has_value(); }
};

struct InterpOptions {
  bool training = true;   // dropout active
  uint64_t seed = 0;      // dropout's RNG seed
  uint64_t step = 0;      // and counter
};

struct RefCtx {
  const Node& node;
  std::vector<const RefTensor*> in;  // nullptr for an absent optional input
  std::vector<RefTensor>& out;       // preallocated with the node's concrete output shapes
  const InterpOptions& options;
  const Attrs& attrs() const { return node.attrs; }
  const RefTensor& input(int i) const { return *in.at(static_cast<size_t>(i)); }
};

using InferFn = std::function<void(InferCtx&)>;
using RefFn = std::function<void(RefCtx&)>;
struct GradCtx;  // compiler/ir/grad.h
using GradFn = std::function<void(GradCtx&)>;
// The scalar definition of an elementwise op for code generation, given the node's
// attributes: an expression over the inputs x (unary) or a, b (binary), c, a, b (where).
using ScalarFn = std::function<std::string(const Attrs&)>;
using UnaryFn = double (*)(double);
using BinaryFn = double (*)(double, double);

struct OpInfo {
  OpKind kind{};
  std::string name;
  std::string signature_text;
  std::vector<ParamSpec> params;
  FusionKind fusion = FusionKind::Opaque;
  InferFn infer;
  RefFn reference;
  UnaryFn unary = nullptr;    // elementwise unary ops
  BinaryFn binary = nullptr;  // elementwise binary ops
  GradFn grad;                // empty: not differentiable (comparisons, sources, ...)
  ScalarFn scalar;            // elementwise ops: the definition code generation compiles
  std::string summary;        // one line for --help and docs
  AutocastPolicy autocast = AutocastPolicy::Follow;
  bool callable = true;       // false for input/param/constant (not callable by name)
};

class OpRegistry {
 public:
  static const OpRegistry& get();
  const OpInfo& info(OpKind k) const { return ops_[static_cast<size_t>(k)]; }
  const OpInfo* find(std::string_view name) const;  // by name, callable ops only
  const std::vector<OpInfo>& all() const { return ops_; }

  // Used by the family files to fill entries.
  class Builder {
   public:
    Builder(OpInfo& info) : info_(info) {}
    Builder& signature(std::string_view spec);
    Builder& fusion(FusionKind k) { info_.fusion = k; return *this; }
    Builder& infer(InferFn f) { info_.infer = std::move(f); return *this; }
    Builder& reference(RefFn f) { info_.reference = std::move(f); return *this; }
    Builder& unary(UnaryFn f) { info_.unary = f; return *this; }
    Builder& binary(BinaryFn f) { info_.binary = f; return *this; }
    Builder& grad(GradFn f) { info_.grad = std::move(f); return *this; }
    Builder& scalar(ScalarFn f) { info_.scalar = std::move(f); return *this; }
    Builder& summary(std::string s) { info_.summary = std::move(s); return *this; }
    Builder& autocast(AutocastPolicy p) { info_.autocast = p; return *this; }
    Builder& internal() { info_.callable = false; return *this; }

   private:
    OpInfo& info_;
  };
  Builder def(OpKind k) { return Builder(ops_[static_cast<size_t>(k)]); }

 private:
  OpRegistry();
  std::vector<OpInfo> ops_;
};

inline const OpInfo& op_info(OpKind k) { return OpRegistry::get().info(k); }
inline std::string_view op_name(OpKind k) { return op_info(k).name; }

// Fills the attributes the call left out from the op's signature defaults.
void apply_defaults(const OpInfo& op, Attrs& attrs);

// Creates a node of `op` with the given inputs and attributes in `g`: applies defaults,
// runs the shape rule and appends the node. On failure returns nullopt and leaves the
// InferCtx's error in *error (with the blamed input / attribute).
struct InferFailure {
  std::string message;
  int input = -1;
  std::string attr;
};
std::optional<NodeId> add_op(Graph& g, OpKind op, std::vector<Value> inputs, Attrs attrs,
                             SourceLoc loc = {}, InferFailure* error = nullptr);

// Helpers shared by the op families' shape rules.
// Normalises axis (may be negative) against rank; false if out of range.
bool normalize_axis(int64_t& axis, int rank);
// numpy broadcasting of two shapes; nullopt (with a reason) when they do not broadcast.
std::optional<Shape> broadcast_shapes(const Shape& a, const Shape& b, std::string* why = nullptr);

// The family registration functions (compiler/ir/ops/*.cc).
void register_source_ops(OpRegistry& r);
void register_elementwise_ops(OpRegistry& r);
void register_reduce_ops(OpRegistry& r);
void register_shape_ops(OpRegistry& r);
void register_nn_ops(OpRegistry& r);
void register_conv_ops(OpRegistry& r);
void register_grad_ops(OpRegistry& r);  // one_hot and the ops gradients are built from
// Run after the families: gradients (compiler/ir/grads/*.cc) and the scalar definitions
// code generation compiles (compiler/ir/ops/scalar_defs.cc).
void register_gradients(OpRegistry& r);
void register_scalar_defs(OpRegistry& r);

}  // namespace modelc
