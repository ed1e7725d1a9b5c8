// The op registry: one record per op with everything the compiler knows about it.
//
//   signature  how the language calls it: "x: tensor, axis: int = -1"; tensor parameters
//              become node inputs (in order), the rest become attributes by name
//   fusion     its fusion kind; passes read only this
//   infer      its shape and dtype rule (may canonicalise attributes, e.g. axis -1 -> 2)
//   math       how it is computed: a scalar expression (`scalar`, compiler/ir/scalar_expr.h)
//              for elementwise ops, which code generation compiles; Template for the ops
//              code generation has an emitter of its own for (reductions, row ops, cast,
//              dropout, ...); Library for the ops the runtime runs under the op's name
//              (matmul, convolutions, data movement: kernels/library_ops.def)
//   reference  its semantics in double precision, for the reference interpreter: the oracle
//              every backend is compared with (for elementwise ops `pointwise`, written
//              independently of `scalar`, so a kernel is checked against something it was
//              not generated from)
//   grad       its gradient, built from other ops: a C++ rule (compiler/ir/grad.h) or, for
//              elementwise ops, one scalar expression per input (`grad_exprs`); checked
//              against central differences of the reference (tests/conformance); an op
//              without one says why (`no_grad`)
//   autocast   its mixed-precision policy (compiler/passes/autocast.h): run in the low
//              type (matmul, conv), in f32 (reductions, softmax, norms, losses), or in
//              whatever its inputs are (the default)
//   flops      its FLOPs per evaluation (op_flops; by fusion kind unless the record says)
//   examples   its test domain: calls on fresh random inputs where it is defined and
//              smooth (`domains` for elementwise ops; a generator otherwise), which the
//              conformance test runs through every check (tests/conformance), and how NaN
//              and infinities must propagate (`nonfinite`)
//   summary    one line for `modelc --list-ops` and docs/ops.md
//   expand     a composite op (MathKind::Composite: the losses, var, squeeze, ...) is built
//              from other ops where it is called (add_op runs `expand`; one result, or
//              several: ExpandCtx::more), so it never
//              appears in a graph and its gradient is its parts'; its record keeps the
//              signature, the shape rule (which checks the call and words the errors), a
//              reference written apart (the oracle the expansion is checked against),
//              examples and summary
//
// Records are written in compiler/ir/ops/*.cc, one file per op family; the elementwise ops
// that are data alone, in compiler/ir/ops/elementwise.def.
#pragma once

#include <functional>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "compiler/ir/graph.h"
#include "compiler/ir/ref_tensor.h"

namespace modelc {

// Row: a reduction along one axis whose output has its input's shape (softmax, layer_norm):
// code generation computes it a lane at a time, so consumers shaped like it fuse after it.
enum class FusionKind { Source, Elementwise, Broadcast, Injective, Reduction, Row, Opaque };

// How an op is computed (see the top of this file).
enum class MathKind { Template, Scalar, Library, Composite };

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
// An elementwise op's value at one point, in double: its inputs in order, the node's
// attributes. The reference maps it over the broadcast inputs.
using PointwiseFn = double (*)(const double* inputs, const Attrs& attrs);
// FLOPs of one evaluation of the node, as a polynomial in the model's dims.
using FlopsFn = std::function<Dim(const Graph&, const Node&)>;

// What a composite op's expansion sees: the call's inputs (an absent optional one is
// invalid), its attributes as the shape rule canonicalised them, and the rule's result
// type, which the expansion's value must have.
struct ExpandCtx {
  Graph& g;
  const std::vector<Value>& in;
  const Attrs& attrs;
  const TensorType& out;  // the first result's type
  SourceLoc loc;
  // An op with several results (topk's values and indices): the expansion returns the
  // first and leaves the others here, in order.
  std::vector<Value> more = {};

  const Value& input(int i) const { return in.at(static_cast<size_t>(i)); }
  bool has_input(int i) const { return i < static_cast<int>(in.size()) && in[static_cast<size_t>(i)].valid(); }
  const TensorType& type(Value v) const { return g.type(v); }
  // A node of another op at the call's location; its shape rule must accept the call (the
  // composite's own rule vouched for the inputs): an InternalError otherwise.
  Value op(OpKind k, std::vector<Value> inputs, Attrs attrs = {});
  Value op(OpKind k, std::vector<Value> inputs, std::initializer_list<std::pair<const char*, AttrValue>> attrs);
  // A rank-0 constant of dtype t.
  Value number(double v, DType t);
};
using ExpandFn = std::function<Value(ExpandCtx&)>;

// Where an elementwise op's inputs are drawn for the conformance checks: uniform in
// [lo, hi] (where the op is defined and smooth), or with step > 0 on the grid lo,
// lo + step, ... (so that comparisons meet ties); with either_sign, the magnitudes are
// drawn so and the sign at random (a divisor away from 0).
struct Domain {
  double lo = -3, hi = 3, step = 0;
  bool either_sign = false;
};

// One call of an op on concrete inputs, for the conformance test (tests/conformance).
struct OpExample {
  std::string label;                             // what varies: "axes [0, 2], keepdims"
  std::vector<std::optional<RefTensor>> inputs;  // nullopt: an absent optional input
  Attrs attrs;                                   // as a call gives them (add_op fills defaults)
  bool grad = true;                              // the gradient check applies at these inputs
  // The central difference's step and tolerance (0: the test's defaults, 1e-6 and 1e-6
  // relative): an op whose reference rounds (cast) needs a step well above the rounding.
  double grad_step = 0, grad_tol = 0;
};
using ExampleRng = std::mt19937;
using ExampleFn = std::function<std::vector<OpExample>(ExampleRng&)>;

// How the kernels must agree with the reference where inputs hold NaN or infinities.
//   Exact     NaN where the reference is NaN, the same infinity where it is infinite.
//   Superset  every value the reference makes non-finite is non-finite, and the kernels may
//             make more so: a convolution's zero padding meets an infinite weight (0 * inf),
//             which one backend multiplies and another skips (the reference skips it).
enum class NonFinite : uint8_t { Exact, Superset };

// An integer operand whose values index something: each must lie in [0, limit), the limit
// being dim `dim` (negative: from the end) of tensor operand `of`, or the int attribute
// `attr` when `of` is -1. The reference refuses a value outside (a UserError), and the
// compiler records the limit on every model input whose values reach the operand
// unchanged (through ops that only move values, OpInfo::moves_values), so the runtime
// checks data against it when it is loaded (compiler/lowered/index_bounds.h).
// With `ignore_attr`, the value of that int attribute is accepted too, and means "no
// index here" (cross_entropy's ignore_index: a padded position); with `op_attr`, the str
// attribute names the op in messages (an internal check speaking for the loss it serves).
struct IndexOperand {
  int operand = 0;
  int of = -1;
  int dim = 0;
  std::string attr;
  std::string what;  // what the limit counts: "rows of the table", "classes"
  std::string ignore_attr = {};
  std::string op_attr = {};
};

struct OpInfo {
  OpKind kind{};
  std::string name;
  std::string signature_text;
  std::vector<ParamSpec> params;
  FusionKind fusion = FusionKind::Opaque;
  MathKind math = MathKind::Template;
  InferFn infer;
  RefFn reference;
  PointwiseFn pointwise = nullptr;  // elementwise ops
  GradFn grad;                      // empty: not differentiable, and then `no_grad` says why
  std::string no_grad;              // why the op has no gradient ("its result is bool"); a composite
                                    // (whose parts differentiate) may say so too (argmax)
  // Elementwise ops: per input the expression of its gradient over the inputs, y and g
  // ("" for none); the rule `grad` is built from them.
  std::vector<std::string> grad_exprs;
  ScalarFn scalar;                  // MathKind::Scalar: the definition code generation compiles
  std::string summary;              // one line for --list-ops and docs
  AutocastPolicy autocast = AutocastPolicy::Follow;
  FlopsFn flops;                    // empty: by fusion kind (op_flops)
  std::vector<Domain> domains;      // elementwise ops: per input (one: every input)
  ExampleFn examples;               // the calls the conformance test makes
  NonFinite nonfinite = NonFinite::Exact;
  bool callable = true;             // false for input/param/constant (not callable by name)
  std::vector<IndexOperand> index_operands;  // operands holding indices (embedding's ids)
  // Every output element is a copy of an input element (reshape, transpose, slice, concat):
  // an index passed through such an op is still an index.
  bool moves_values = false;
  // It draws random numbers (dropout, rand_like): sema gives each call an int attribute
  // `key` from its place in the model, the Philox stream it draws from.
  bool keyed = false;
  // In eval mode (passes/mode.cc) the op is its first input (dropout), and these attributes
  // take these values (fused attention's dropout rate: 0).
  bool eval_identity = false;
  Attrs eval_attrs;
  ExpandFn expand;                  // MathKind::Composite: how the call is built from other ops
};

class OpRegistry {
 public:
  static const OpRegistry& get();
  const OpInfo& info(OpKind k) const { return ops_[static_cast<size_t>(k)]; }
  const OpInfo* find(std::string_view name) const;  // by name, callable ops only
  const std::vector<OpInfo>& all() const { return ops_; }

  // Used by the family files to fill records.
  class Builder {
   public:
    Builder(OpInfo& info) : info_(info) {}
    Builder& signature(std::string_view spec);
    Builder& fusion(FusionKind k) { info_.fusion = k; return *this; }
    Builder& infer(InferFn f) { info_.infer = std::move(f); return *this; }
    Builder& reference(RefFn f) { info_.reference = std::move(f); return *this; }
    Builder& pointwise(PointwiseFn f) { info_.pointwise = f; return *this; }
    Builder& grad(GradFn f) { info_.grad = std::move(f); return *this; }
    Builder& no_grad(std::string why) { info_.no_grad = std::move(why); return *this; }
    // An elementwise op's gradient as expressions (one per input, "" for none).
    Builder& grad_exprs(std::vector<std::string> exprs);
    Builder& scalar(ScalarFn f) { info_.scalar = std::move(f); info_.math = MathKind::Scalar; return *this; }
    Builder& math(std::string expr);  // scalar() with one definition for every attribute
    Builder& library() { info_.math = MathKind::Library; return *this; }
    Builder& summary(std::string s) { info_.summary = std::move(s); return *this; }
    Builder& autocast(AutocastPolicy p) { info_.autocast = p; return *this; }
    Builder& flops(FlopsFn f) { info_.flops = std::move(f); return *this; }
    Builder& domains(std::vector<Domain> d) { info_.domains = std::move(d); return *this; }
    Builder& examples(ExampleFn f) { info_.examples = std::move(f); return *this; }
    Builder& nonfinite(NonFinite n) { info_.nonfinite = n; return *this; }
    Builder& internal() { info_.callable = false; return *this; }
    Builder& index_operand(IndexOperand o) { info_.index_operands.push_back(std::move(o)); return *this; }
    Builder& moves_values() { info_.moves_values = true; return *this; }
    Builder& keyed() { info_.keyed = true; return *this; }
    Builder& eval_identity() { info_.eval_identity = true; return *this; }
    Builder& eval_attr(std::string_view name, AttrValue v) { info_.eval_attrs.set(name, std::move(v)); return *this; }
    Builder& composite(ExpandFn f) { info_.expand = std::move(f); info_.math = MathKind::Composite; return *this; }

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
// runs the shape rule and appends the node (a composite op: the nodes of its expansion,
// the last of which, returned, holds its result). On failure returns nullopt and leaves the
// InferCtx's error in *error (with the blamed input / attribute).
struct InferFailure {
  std::string message;
  int input = -1;
  std::string attr;
};
// `results`, when given, receives every result of the call (a composite's may lie in
// several nodes: topk's), as the node's outputs otherwise.
std::optional<NodeId> add_op(Graph& g, OpKind op, std::vector<Value> inputs, Attrs attrs,
                             SourceLoc loc = {}, InferFailure* error = nullptr, std::vector<Value>* results = nullptr);

// Helpers shared by the op families' shape rules.
// Normalises axis (may be negative) against rank; false if out of range.
bool normalize_axis(int64_t& axis, int rank);
// A reduction's rule: x float (or i32 with int_ok), attribute "axes" canonicalised (sorted,
// non-negative, unique; every axis when none are given), "keepdims" honoured.
void infer_reduction(InferCtx& ctx, std::string_view name, bool int_ok);
// numpy broadcasting of two shapes; nullopt (with a reason) when they do not broadcast.
std::optional<Shape> broadcast_shapes(const Shape& a, const Shape& b, std::string* why = nullptr);

// The FLOPs of one evaluation of node `id` (the record's rule, else by fusion kind:
// elementwise, broadcast and injective ops one per output element, reductions and row ops
// one per input element, sources none, other opaque ops one per output element), and the
// bytes it reads and writes (its inputs and outputs), as polynomials in the model's dims.
Dim op_flops(const Graph& g, NodeId id);
Dim op_bytes(const Graph& g, NodeId id);

// The family registration functions (compiler/ir/ops/*.cc).
void register_source_ops(OpRegistry& r);
void register_elementwise_ops(OpRegistry& r);
void register_reduce_ops(OpRegistry& r);
void register_shape_ops(OpRegistry& r);
void register_nn_ops(OpRegistry& r);
void register_conv_ops(OpRegistry& r);
void register_grad_ops(OpRegistry& r);  // one_hot and the ops gradients are built from
void register_loss_ops(OpRegistry& r);  // composites: mse_loss, bce_with_logits, ...
void register_class_loss_ops(OpRegistry& r);  // composites: cross_entropy, nll_loss; index_check
// The class losses' references refuse a target outside [0, classes) that is not `ignore`
// (a UserError naming `op`); compiler/ir/ops/losses_class.cc.
void check_class_target(std::string_view op, int64_t target, int64_t classes, int64_t ignore);
void register_composite_ops(OpRegistry& r);  // composites: var, logsumexp, squeeze, clamp, ...
void register_random_ops(OpRegistry& r);     // rand_like, randn_like
void register_attention_ops(OpRegistry& r);  // scaled_dot_product_attention, sdpa, sdpa_grad
void register_metric_ops(OpRegistry& r);     // composites: accuracy, top_k_accuracy, mae

}  // namespace modelc
