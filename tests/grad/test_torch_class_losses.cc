// cross_entropy, nll_loss and cosine_embedding_loss against PyTorch's own numbers
// (tests/ir/torch_class_losses.txt, written by tools/torch_class_losses.py in
// torch.float64): values and the gradient of the sum of the result, on ignored targets,
// batches with every target ignored, ignore_index inside the classes, extreme and -inf
// logits, probability targets, label smoothing and class weights. The graphs are the ones a
// call builds (the one kernel or the composite), run by the reference interpreter in double;
// the compiled kernels against the references are tests/conformance. Also which form a call
// takes, the refusal of a bad target, and every shape rule's refusal, word for word.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <set>
#include <sstream>

#include "tests/grad/grad_check.h"

namespace modelc::test {
namespace {

// One line of torch_class_losses.txt (the format is the script's docstring).
struct TorchCase {
  std::string line, op;
  std::map<std::string, std::string> scalars;
  std::map<std::string, std::vector<double>> lists;
  int64_t i(const std::string& k) const { return std::stoll(scalars.at(k)); }
  double f(const std::string& k) const { return std::stod(scalars.at(k)); }
};

std::vector<TorchCase> torch_cases() {
  std::ifstream file(MODELC_SOURCE_DIR "/tests/ir/torch_class_losses.txt");
  EXPECT_TRUE(file) << "tests/ir/torch_class_losses.txt is missing";
  std::vector<TorchCase> r;
  std::string line;
  while (std::getline(file, line)) {
    if (line.empty() || line[0] == '#') continue;
    TorchCase c;
    c.line = line.substr(0, 140);
    std::istringstream in(line);
    std::vector<double>* cur = nullptr;
    std::string tok;
    while (in >> tok) {
      if (const size_t eq = tok.find('='); eq != std::string::npos) c.scalars[tok.substr(0, eq)] = tok.substr(eq + 1);
      else if (std::isalpha(static_cast<unsigned char>(tok[0])) && tok != "nan" && tok != "inf") cur = &c.lists[tok];
      else cur->push_back(std::stod(tok));
    }
    c.op = c.scalars.at("op");
    r.push_back(std::move(c));
  }
  return r;
}

RefTensor tensor(DType t, std::vector<int64_t> shape, const std::vector<double>& v) {
  RefTensor r(t, std::move(shape));
  EXPECT_EQ(static_cast<size_t>(r.numel()), v.size());
  r.data = v;
  return r;
}

// The call's inputs and attributes: scores [P, C], targets [P] (i32) or [P, C]
// (probabilities), an optional weight [C]; cosine_embedding_loss: [P, D] twice and [P].
struct Call {
  OpKind op{};
  std::vector<RefTensor> in;
  std::vector<std::optional<TensorType>> types;
  Attrs attrs;
};

Call call_of(const TorchCase& c) {
  Call k;
  const int64_t P = c.i("P"), C = c.i("C");
  k.op = OpRegistry::get().find(c.op)->kind;
  k.attrs.set("reduction", c.scalars.at("red"));
  auto add = [&](RefTensor t) {
    k.types.push_back(type_of(t));
    k.in.push_back(std::move(t));
  };
  add(tensor(DType::F32, {P, C}, c.lists.at("x")));
  if (k.op == OpKind::CosineEmbeddingLoss) {
    add(tensor(DType::F32, {P, C}, c.lists.at("x2")));
    add(tensor(DType::F32, {P}, c.lists.at("t")));
    k.attrs.set("margin", c.f("margin"));
    return k;
  }
  const bool soft = c.i("soft") != 0;
  add(soft ? tensor(DType::F32, {P, C}, c.lists.at("t")) : tensor(DType::I32, {P}, c.lists.at("t")));
  if (c.lists.count("w")) add(tensor(DType::F32, {C}, c.lists.at("w")));
  else k.types.push_back(std::nullopt);
  k.attrs.set("ignore_index", c.i("ignore"));
  if (k.op == OpKind::CrossEntropyLoss) k.attrs.set("label_smoothing", c.f("eps"));
  return k;
}

// Equal to 1e-7 relative (the expansions' constants, 1 - eps, eps / C and the margin, are
// f32); NaN where PyTorch has NaN, the same infinity where it has one.
void expect_matches(const RefTensor& got, const std::vector<double>& want, const std::string& what) {
  ASSERT_EQ(static_cast<size_t>(got.numel()), want.size()) << what;
  for (size_t i = 0; i < want.size(); ++i) {
    const double w = want[i], g = got[static_cast<int64_t>(i)];
    if (std::isnan(w)) EXPECT_TRUE(std::isnan(g)) << what << " element " << i << ": got " << g;
    else if (std::isinf(w)) EXPECT_EQ(g, w) << what << " element " << i;
    else EXPECT_NEAR(g, w, 1e-7 * (1 + std::fabs(w))) << what << " element " << i;
  }
}

// The graph's inputs (the present ones, in order) fed from `in`.
std::map<std::string, RefTensor> feeds_of(const OneOp& o, const std::vector<RefTensor>& in) {
  std::map<std::string, RefTensor> feeds;
  for (size_t k = 0; k < o.g.inputs.size(); ++k) feeds[o.g.node(o.g.inputs[k]).name] = in.at(k);
  return feeds;
}

// The gradient of sum(result) with respect to the scores, through the call's graph.
RefTensor grad_of_sum(const OneOp& o, const std::vector<RefTensor>& in) {
  Graph g = o.g;
  const std::optional<NodeId> loss = add_op(g, OpKind::Sum, {g.outputs.at(0).value}, {});
  EXPECT_TRUE(loss.has_value());
  const std::vector<Value> grads = append_gradients(g, Value{*loss, 0}, {Value{g.inputs.at(0), 0}});
  g.outputs = {{"grad", grads.at(0), {}}};
  return interpret(g, feeds_of(o, in), {}).outputs.at("grad");
}

TEST(TorchClassLosses, AreWhatPyTorchComputes) {
  const std::vector<TorchCase> cases = torch_cases();
  ASSERT_GT(cases.size(), 50u);
  std::set<std::string> ops;
  for (const TorchCase& c : cases) {
    SCOPED_TRACE(c.line);
    const Call k = call_of(c);
    const OneOp o = build_op(k.op, k.types, k.attrs);
    ASSERT_FALSE(o.error) << o.error->message;
    expect_matches(interpret(o.g, feeds_of(o, k.in), {}).outputs.at("out0"), c.lists.at("want"), c.op);
    expect_matches(grad_of_sum(o, k.in), c.lists.at("grad"), c.op + " gradient");
    ops.insert(c.op);
  }
  for (const char* op : {"cross_entropy", "nll_loss", "cosine_embedding_loss"})
    EXPECT_TRUE(ops.count(op)) << op << " has no PyTorch case";
}

// The plain call (labels, no weight, no smoothing, the mean) is the one kernel; any other
// is the composite, its targets behind index_check.
TEST(TorchClassLosses, ThePlainCallIsOneKernel) {
  auto kinds = [](Attrs a, bool weight, bool soft = false) {
    const Dim V(7);
    const OneOp o = build_op(OpKind::CrossEntropyLoss,
                             {f32({B, V}), soft ? f32({B, V}) : tt(DType::I32, {B}),
                              weight ? std::optional(f32({V})) : std::nullopt}, a);
    EXPECT_FALSE(o.error) << o.error->message;
    std::multiset<OpKind> k;
    for (const Node& n : o.g.nodes) k.insert(n.op);
    return k;
  };
  auto plain = kinds({}, false);
  EXPECT_EQ(plain.count(OpKind::CrossEntropy), 1u);
  EXPECT_EQ(plain.count(OpKind::LogSoftmax), 0u);
  EXPECT_EQ(plain.size(), 3u) << "two inputs and the kernel";
  EXPECT_EQ(kinds(attrs({{"ignore_index", int64_t{0}}}), false).count(OpKind::CrossEntropy), 1u);
  for (const auto& other : {kinds({}, true), kinds(attrs({{"label_smoothing", 0.1}}), false),
                            kinds(attrs({{"reduction", std::string("sum")}}), false)}) {
    EXPECT_EQ(other.count(OpKind::CrossEntropy), 0u);
    EXPECT_EQ(other.count(OpKind::LogSoftmax), 1u);
    EXPECT_EQ(other.count(OpKind::IndexCheck), 1u);
  }
  EXPECT_EQ(kinds({}, false, true).count(OpKind::IndexCheck), 0u) << "probabilities are not indices";
}

// A target outside [0, C) that is not ignored: the reference refuses it in every form.
TEST(TorchClassLosses, ABadTargetIsRefused) {
  const int64_t C = 4;
  for (OpKind op : {OpKind::CrossEntropyLoss, OpKind::NllLoss}) {
    for (const char* red : {"mean", "sum", "none"}) {
      const OneOp o = build_op(op, {f32({Dim(3), Dim(C)}), tt(DType::I32, {Dim(3)}), std::nullopt},
                               attrs({{"reduction", std::string(red)}}));
      ASSERT_FALSE(o.error) << o.error->message;
      RefTensor x = rand_f({3, C}, -2, 0), t = rand_ids({3}, C);
      t.data[1] = -100;
      EXPECT_NO_THROW(interpret(o.g, feeds_of(o, {x, t}), {}));
      for (double bad : {-1.0, 4.0, 99.0}) {
        t.data[2] = bad;
        try {
          interpret(o.g, feeds_of(o, {x, t}), {});
          ADD_FAILURE() << op_name(op) << " " << red << ": no error for target " << bad;
        } catch (const UserError& e) {
          EXPECT_EQ(std::string(e.what()), fmt::format("{}: target {} is out of range for 4 classes (and is not the "
                                                       "ignored index -100)", op_name(op), bad));
        }
      }
    }
  }
}

TEST(TorchClassLosses, ShapeRulesRefuseBadCalls) {
  const Dim V(5);
  auto ce = [&](std::vector<std::optional<TensorType>> in, Attrs a = {}) {
    return build_op(OpKind::CrossEntropyLoss, std::move(in), std::move(a));
  };
  const TensorType labels = tt(DType::I32, {B});
  expect_error(ce({tt(DType::I32, {B, V}), labels}), "cross_entropy expects floating-point scores, got i32[B,5]", 0);
  expect_error(ce({f32({}), tt(DType::I32, {})}), "cross_entropy needs scores with a class axis (the last), got f32[]", 0);
  expect_error(ce({f32({B, V}), f32({B})}), "cross_entropy: the targets must be i32 class indices i32[B] or class "
               "probabilities f32[B,5] for scores f32[B,5], got f32[B]", 1);
  expect_error(build_op(OpKind::NllLoss, {f32({B, T, V}), tt(DType::I32, {T, B})}),
               "nll_loss: the targets must be i32 class indices i32[B,T] for scores f32[B,T,5], got i32[T,B]", 1);
  expect_error(build_op(OpKind::NllLoss, {f32({B, V}), f32({B, V})}),
               "nll_loss: the targets must be i32 class indices i32[B] for scores f32[B,5], got f32[B,5]", 1);
  expect_error(ce({f32({B, V}), labels, f32({Dim(4)})}), "cross_entropy: the class weight must be f32[5] (one per "
               "class), got f32[4]", 2);
  expect_error(ce({f32({B, V}), labels}, attrs({{"reduction", std::string("batchmean")}})),
               "cross_entropy: reduction \"batchmean\" is not one of \"mean\", \"sum\", \"none\"", -1, "reduction");
  expect_error(ce({f32({B, V}), labels}, attrs({{"label_smoothing", 1.5}})),
               "cross_entropy: label_smoothing must be in [0, 1], got 1.5", -1, "label_smoothing");
  expect_error(ce({f32({B, V}), f32({B, V})}, attrs({{"ignore_index", int64_t{0}}})),
               "cross_entropy: ignore_index 0 applies to class-index targets only, not to probabilities f32[B,5]", -1,
               "ignore_index");
  expect_error(ce({f32({B, C}), labels}, attrs({{"reduction", std::string("sum")}})),
               "cross_entropy: the class count C of f32[B,C] must be a constant for a weight, label smoothing, "
               "probability targets or reduction \"sum\"", 0);
  EXPECT_FALSE(ce({f32({B, C}), labels}).error) << "the one kernel takes a symbolic class count";
  auto cos = [&](std::vector<std::optional<TensorType>> in) {
    return build_op(OpKind::CosineEmbeddingLoss, std::move(in));
  };
  expect_error(cos({f32({}), f32({}), f32({})}),
               "cosine_embedding_loss expects float vectors [..., D] (the last axis is the vector), got f32[]", 0);
  expect_error(cos({f32({B, V}), f32({B, Dim(4)}), f32({B})}),
               "cosine_embedding_loss: input2 f32[B,4] must have input1's type f32[B,5]", 1);
  expect_error(cos({f32({B, V}), f32({B, V}), f32({B, V})}),
               "cosine_embedding_loss: the target must be f32[B] (1 or -1 per pair; or i32), got f32[B,5]", 2);
}

}  // namespace
}  // namespace modelc::test
