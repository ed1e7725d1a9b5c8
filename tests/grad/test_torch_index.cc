// The index ops and reductions (argmax, argmin, prod, gather, scatter_add, topk, arange) and
// conv1d, conv_transpose2d and bilinear upsampling against PyTorch's own
// numbers (tests/ir/torch_index.txt, written by tools/torch_index.py in torch.float64):
// values and, for the differentiable ones, the gradient of the sum of the result. The
// graphs are the ones a call builds (a composite's expansion), run by the reference
// interpreter in double; the compiled kernels against the references are tests/conformance.
// Also every shape rule's refusal, word for word.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <set>
#include <sstream>

#include "tests/grad/grad_check.h"

namespace modelc::test {
namespace {

struct Named {
  std::string name;
  RefTensor t;
};

// One line of torch_index.txt (the format is tools/torch_index.py's docstring).
struct TorchCase {
  std::string line, op;
  Attrs attrs;
  std::vector<Named> inputs;
  std::optional<RefTensor> want, want2, w;
  std::map<size_t, RefTensor> grads;  // by input: `grad` is input 0's, `gradK` input K's
};

Ints ints_of(const std::string& text) {
  Ints v;
  std::istringstream in(text);
  std::string part;
  while (std::getline(in, part, ','))
    if (!part.empty()) v.push_back(std::stoll(part));
  return v;
}

// "@axes=0,2" as the op's parameter kind says.
void parse_attr(const OpInfo& op, const std::string& tok, Attrs& a) {
  const size_t eq = tok.find('=');
  const std::string name = tok.substr(1, eq - 1), value = tok.substr(eq + 1);
  for (const ParamSpec& p : op.params) {
    if (p.name != name) continue;
    if (p.kind == ParamKind::Ints) a.set(name, ints_of(value));
    else if (p.kind == ParamKind::Bool) a.set(name, value != "0");
    else if (p.kind == ParamKind::Float) a.set(name, std::stod(value));
    else if (p.kind == ParamKind::DType) a.set(name, *parse_dtype(value));
    else if (p.kind == ParamKind::Str) a.set(name, value);
    else a.set(name, static_cast<int64_t>(std::stoll(value)));
    return;
  }
  ADD_FAILURE() << op.name << " has no parameter " << name;
}

std::vector<TorchCase> torch_cases() {
  std::ifstream f(MODELC_SOURCE_DIR "/tests/ir/torch_index.txt");
  EXPECT_TRUE(f) << "tests/ir/torch_index.txt is missing";
  std::vector<TorchCase> r;
  std::string line;
  while (std::getline(f, line)) {
    if (line.empty() || line[0] == '#') continue;
    TorchCase c;
    c.line = line.substr(0, 120);
    std::istringstream in(line);
    in >> c.op;
    const OpInfo* op = OpRegistry::get().find(c.op);
    if (!op) {
      ADD_FAILURE() << "no op " << c.op;
      continue;
    }
    RefTensor* cur = nullptr;
    std::string tok;
    while (in >> tok) {
      if (tok[0] == '@') {
        parse_attr(*op, tok, c.attrs);
      } else if (const size_t colon = tok.find(':'); colon != std::string::npos) {
        const std::string name = tok.substr(0, colon);
        std::vector<int64_t> shape;
        for (int64_t d : ints_of(tok.substr(colon + 1))) shape.push_back(d);
        RefTensor t(name.rfind("index", 0) == 0 ? DType::I32 : DType::F32, shape);
        t.data.clear();
        if (name == "want") cur = &c.want.emplace(std::move(t));
        else if (name == "want2") cur = &c.want2.emplace(std::move(t));
        else if (name == "w") cur = &c.w.emplace(std::move(t));
        else if (name.rfind("grad", 0) == 0) cur = &(c.grads[name == "grad" ? 0 : std::stoul(name.substr(4))] = std::move(t));
        else cur = &c.inputs.emplace_back(Named{name, std::move(t)}).t;
      } else {
        cur->data.push_back(std::stod(tok));
      }
    }
    r.push_back(std::move(c));
  }
  return r;
}

// Equal to 1e-9 relative (integer results exactly); NaN where PyTorch has NaN, the same
// infinity where it has one.
void expect_matches(const RefTensor& got, const RefTensor& want, const std::string& what) {
  ASSERT_EQ(got.shape, want.shape) << what;
  for (int64_t i = 0; i < want.numel(); ++i) {
    const double w = want[i], g = got[i];
    if (std::isnan(w)) EXPECT_TRUE(std::isnan(g)) << what << " element " << i << ": got " << g;
    else if (std::isinf(w) || got.dtype == DType::I32) EXPECT_EQ(g, w) << what << " element " << i;
    else EXPECT_NEAR(g, w, 1e-9 * (1 + std::fabs(w))) << what << " element " << i;
  }
}

// The gradient of sum(result * w) (sum(result) without weights; a NaN result counts 0, as
// the generator's where) with respect to input `at`, through the call's graph.
RefTensor grad_of_sum(const OneOp& o, const std::vector<RefTensor>& in, const std::optional<RefTensor>& w, size_t at) {
  Graph g = o.g;
  Value y = g.outputs.at(0).value;
  std::map<std::string, RefTensor> feeds;
  for (size_t k = 0; k < in.size(); ++k) feeds["in" + std::to_string(k)] = in[k];
  auto op = [&](OpKind k, std::vector<Value> ins) {
    const std::optional<NodeId> id = add_op(g, k, std::move(ins), {});
    EXPECT_TRUE(id.has_value());
    return Value{*id, 0};
  };
  if (w) {
    Node n;
    n.op = OpKind::Input;
    n.name = "w";
    n.outputs = {type_of(*w)};
    const Value wv{g.add(std::move(n)), 0};
    g.inputs.push_back(wv.node);
    feeds["w"] = *w;
    Node zero;
    zero.op = OpKind::Constant;
    zero.attrs.set("value", 0.0);
    zero.outputs = {TensorType{DType::F32, {}}};
    const Value z{g.add(std::move(zero)), 0};
    y = op(OpKind::Mul, {op(OpKind::Where, {op(OpKind::Ne, {y, y}), z, y}), wv});
  }
  const Value loss = op(OpKind::Sum, {y});
  const std::vector<Value> grads = append_gradients(g, loss, {Value{g.inputs.at(at), 0}});
  g.outputs = {{"grad", grads.at(0), {}}};
  return interpret(g, feeds, {}).outputs.at("grad");
}

TEST(TorchIndex, OpsAreWhatPyTorchComputes) {
  const std::vector<TorchCase> cases = torch_cases();
  ASSERT_GT(cases.size(), 100u);
  std::set<std::string> ops;
  for (const TorchCase& c : cases) {
    SCOPED_TRACE(c.line);
    std::vector<std::optional<TensorType>> types;
    std::vector<RefTensor> in;
    for (const Named& n : c.inputs) {
      types.push_back(type_of(n.t));
      in.push_back(n.t);
    }
    const OneOp o = build_op(OpRegistry::get().find(c.op)->kind, types, c.attrs);
    ASSERT_FALSE(o.error) << o.error->message;
    ASSERT_TRUE(c.want.has_value());
    const std::vector<RefTensor> got = run_op(o, in);
    expect_matches(got[0], *c.want, c.op);
    if (c.want2) {
      ASSERT_GT(got.size(), 1u);
      expect_matches(got[1], *c.want2, c.op + " result 2");
    }
    for (const auto& [at, want] : c.grads)
      expect_matches(grad_of_sum(o, in, c.w, at), want, fmt::format("{} gradient of input {}", c.op, at));
    ops.insert(c.op);
  }
  for (const char* op : {"argmax", "argmin", "prod", "gather", "scatter_add", "topk", "arange", "conv1d",
                         "conv_transpose2d", "upsample"})
    EXPECT_TRUE(ops.count(op)) << op << " has no PyTorch case";
}

TEST(TorchIndex, ShapeRulesRefuseBadCalls) {
  auto a = [](int64_t axis) { return attrs({{"axis", axis}}); };
  expect_error(build_op(OpKind::Argmax, {f32({B, C})}, a(2)), "argmax: axis 2 is out of range for f32[B,C] (rank 2)",
               -1, "axis");
  expect_error(build_op(OpKind::Argmin, {f32({})}, a(0)), "argmin: axis 0 is out of range for f32[] (rank 0)", -1,
               "axis");
  expect_error(build_op(OpKind::Argmax, {tt(DType::I32, {B})}, a(0)),
               "argmax expects a floating-point tensor, got i32[B]", 0);
  expect_error(build_op(OpKind::Argmax, {f32({B, Dim(0)})}, a(-1)), "argmax: axis 1 of f32[B,0] is empty (no element "
               "to pick)", -1, "axis");
  expect_error(build_op(OpKind::Prod, {tt(DType::I32, {B})}), "prod expects a floating-point tensor, got i32[B]", 0);
  expect_error(build_op(OpKind::Prod, {f32({B})}, attrs({{"axes", Ints{1}}})),
               "axis 1 is out of range for f32[B] (rank 1)", -1, "axes");
}

}  // namespace
}  // namespace modelc::test
