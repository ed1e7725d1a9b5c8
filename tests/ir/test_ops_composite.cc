// Composite ops (OpInfo::expand): their shape rules' errors, the symbolic-divisor path of
// var and std (which the conformance test, on concrete shapes, does not reach), and the
// losses against PyTorch's own numbers (tests/ir/torch_losses.txt, written by
// tools/torch_losses.py). The expansions against the references are tests/conformance (g).
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <sstream>

#include "tests/ir/op_harness.h"

namespace modelc::test {
namespace {

TEST(Composite, ShapeRulesRefuseBadCalls) {
  expect_error(build_op(OpKind::MseLoss, {f32({B, Dim(1)}), f32({B})}),
               "mse_loss: the target f32[B] does not have the input's shape f32[B,1] (PyTorch would broadcast them, "
               "with a warning, into a loss over every pair; reshape one to the other)", 1);
  expect_error(build_op(OpKind::L1Loss, {f32({B}), tt(DType::BF16, {B})}),
               "l1_loss: the target is bf16[B], the input f32[B]: they must have one dtype", 1);
  expect_error(build_op(OpKind::HuberLoss, {f32({B}), f32({B})}, attrs({{"reduction", std::string("avg")}})),
               "huber_loss: reduction \"avg\" is not one of \"mean\", \"sum\", \"none\"", -1, "reduction");
  expect_error(build_op(OpKind::KlDiv, {f32({}), f32({})}, attrs({{"reduction", std::string("batchmean")}})),
               "kl_div: reduction \"batchmean\" needs an input with a batch dim, got f32[]", -1, "reduction");
  expect_error(build_op(OpKind::BceLoss, {f32({B, C}), f32({B, C}), f32({B})}),
               "bce_loss: the weight f32[B] must have the input's dtype and broadcast to its shape f32[B,C]", 2);
  expect_error(build_op(OpKind::MseLoss, {tt(DType::I32, {B}), tt(DType::I32, {B})}),
               "mse_loss expects a floating-point input, got i32[B]", 0);
  expect_error(build_op(OpKind::Squeeze, {f32({B, Dim(1)})}, attrs({{"axes", Ints{0}}})),
               "squeeze: axis 0 of f32[B,1] has extent B, not 1", -1, "axes");
  expect_error(build_op(OpKind::Unsqueeze, {f32({B})}, attrs({{"axis", int64_t{3}}})),
               "unsqueeze: axis 3 is out of range for f32[B] (rank 1)", -1, "axis");
  expect_error(build_op(OpKind::Flatten, {f32({B, C, T})}, attrs({{"start", int64_t{2}}, {"end", int64_t{1}}})),
               "flatten: end 1 comes before start 2 in f32[B,C,T]", -1, "end");
  expect_error(build_op(OpKind::Stack, {f32({B}), f32({C})}), "stack needs tensors of one type: f32[B] and f32[C]", 1);
  expect_error(build_op(OpKind::Clamp, {f32({B}), std::nullopt, std::nullopt}), "clamp needs min, max or both");
  expect_error(build_op(OpKind::Clamp, {f32({B}), f32({C}), std::nullopt}),
               "clamp: the min bound f32[C] must have the dtype of f32[B] and broadcast to its shape", 1);
  expect_error(build_op(OpKind::MaskedFill, {f32({B}), f32({B})}, attrs({{"value", 0.0}})),
               "masked_fill: the mask must be bool, got f32[B]", 1);
  expect_error(build_op(OpKind::Var, {f32({B})}, attrs({{"correction", int64_t{-1}}})),
               "var: correction must be >= 0, got -1", -1, "correction");
}

TEST(Composite, ResultTypes) {
  expect_type(build_op(OpKind::MseLoss, {f32({B, C}), f32({B, C})}), f32({}));
  expect_type(build_op(OpKind::MseLoss, {f32({B, C}), f32({B, C})}, attrs({{"reduction", std::string("none")}})),
              f32({B, C}));
  expect_type(build_op(OpKind::Squeeze, {f32({Dim(1), B, Dim(1)})}), f32({B}));
  expect_type(build_op(OpKind::Unsqueeze, {f32({B, C})}, attrs({{"axis", int64_t{-1}}})), f32({B, C, Dim(1)}));
  expect_type(build_op(OpKind::Flatten, {f32({B, C, T})}, attrs({{"start", int64_t{1}}})), f32({B, C * T}));
  expect_type(build_op(OpKind::Stack, {f32({B}), f32({B}), f32({B})}, attrs({{"axis", int64_t{-1}}})), f32({B, Dim(3)}));
  expect_type(build_op(OpKind::Logsumexp, {f32({B, C})}, attrs({{"axes", Ints{1}}, {"keepdims", true}})),
              f32({B, Dim(1)}));
}

// var and std over a symbolic axis (the batch): the divisor N - correction is known only
// when the program runs, from the mean of ones.
TEST(Composite, VarianceOverASymbolicAxis) {
  for (int64_t correction : {0, 1, 2}) {
    for (bool root : {false, true}) {
      const OneOp o = build_op(root ? OpKind::Std : OpKind::Var, {f32({B, Dim(3)})},
                               attrs({{"axes", Ints{0}}, {"correction", correction}}));
      ASSERT_FALSE(o.error) << o.error->message;
      for (int64_t n : {1, 2, 7}) {
        const RefTensor x = random_tensor(DType::F32, {n, 3}, -2, 2);
        const RefTensor got = run_op(o, {x})[0];
        for (int64_t j = 0; j < 3; ++j) {
          double mean = 0, sq = 0;
          for (int64_t i = 0; i < n; ++i) mean += x[i * 3 + j] / static_cast<double>(n);
          for (int64_t i = 0; i < n; ++i) sq += (x[i * 3 + j] - mean) * (x[i * 3 + j] - mean);
          const double var = sq / static_cast<double>(n - correction);
          const double want = root ? std::sqrt(var) : var;
          const std::string what = fmt::format("{} n {} correction {} column {}", root ? "std" : "var", n, correction, j);
          if (n <= correction) {
            EXPECT_FALSE(std::isfinite(got[j]) && got[j] >= 0) << what << ": got " << got[j];
          } else {
            EXPECT_NEAR(got[j], want, 1e-12 * (1 + want)) << what;
          }
        }
      }
    }
  }
}

// One line of torch_losses.txt: op, reduction, a float attribute (or "-"), then the input
// and target values after "x" and "t", the weight after "w" and the pos_weight after "p" (or
// none), and PyTorch's result
// after "=" (one value, or one per element for reduction "none").
struct TorchCase {
  std::string op, reduction, attr;
  double attr_value = 0;
  std::vector<double> x, t, w, p, want;
};

std::vector<double> numbers(std::istringstream& in, std::string& next) {
  std::vector<double> v;
  while (in >> next) {
    if (next == "x" || next == "t" || next == "w" || next == "p" || next == "=") return v;
    v.push_back(std::stod(next));
  }
  next.clear();
  return v;
}

std::vector<TorchCase> torch_cases() {
  std::ifstream f(MODELC_SOURCE_DIR "/tests/ir/torch_losses.txt");
  EXPECT_TRUE(f) << "tests/ir/torch_losses.txt is missing";
  std::vector<TorchCase> r;
  std::string line;
  while (std::getline(f, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream in(line);
    TorchCase c;
    std::string next;
    in >> c.op >> c.reduction >> c.attr;
    if (c.attr != "-") in >> c.attr_value;
    in >> next;
    while (!next.empty()) {
      const std::string key = next;
      std::vector<double> v = numbers(in, next);
      (key == "x" ? c.x : key == "t" ? c.t : key == "w" ? c.w : key == "p" ? c.p : c.want) = std::move(v);
    }
    r.push_back(std::move(c));
  }
  return r;
}

// Each loss on PyTorch's edge cases (extreme logits, probabilities 0 and 1, targets 0) and
// random values, in double against torch.float64: equal to 1e-7 relative (the expansions'
// constants are f32).
TEST(Composite, LossesAreWhatPyTorchComputes) {
  const std::vector<TorchCase> cases = torch_cases();
  ASSERT_GT(cases.size(), 20u);
  for (const TorchCase& c : cases) {
    const OpInfo* op = OpRegistry::get().find(c.op);
    ASSERT_NE(op, nullptr) << c.op;
    const auto n = static_cast<int64_t>(c.x.size());
    std::vector<std::optional<TensorType>> types = {f32({Dim(n)}), f32({Dim(n)})};
    if (!c.w.empty() || !c.p.empty()) types.push_back(c.w.empty() ? std::nullopt : std::optional(f32({Dim(n)})));
    if (!c.p.empty()) types.push_back(f32({Dim(n)}));
    Attrs a = attrs({{"reduction", c.reduction}});
    if (c.attr == "log_target") a.set(c.attr, c.attr_value != 0);
    else if (c.attr != "-") a.set(c.attr, c.attr_value);
    const OneOp o = build_op(op->kind, types, a);
    ASSERT_FALSE(o.error) << o.error->message;
    std::vector<RefTensor> in;
    for (const std::vector<double>* v : {&c.x, &c.t, &c.w, &c.p}) {
      if (v->empty()) continue;  // build_op's graph has no input for an absent one
      RefTensor r(DType::F32, {n});
      r.data = *v;
      in.push_back(std::move(r));
    }
    const RefTensor got = run_op(o, in)[0];
    ASSERT_EQ(got.numel(), static_cast<int64_t>(c.want.size())) << c.op;
    for (size_t i = 0; i < c.want.size(); ++i) {
      const double want = c.want[i], g = got[static_cast<int64_t>(i)];
      const std::string what = fmt::format("{} {} element {}", c.op, c.reduction, i);
      if (std::isnan(want)) {
        EXPECT_TRUE(std::isnan(g)) << what << ": got " << g;
      } else if (std::isinf(want)) {
        EXPECT_EQ(g, want) << what;
      } else {
        EXPECT_NEAR(g, want, 1e-7 * (1 + std::fabs(want))) << what;
      }
    }
  }
}

}  // namespace
}  // namespace modelc::test
