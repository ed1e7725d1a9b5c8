// Tests of the neural-network ops (compiler/ir/ops/nn.cc) and of the Philox generator
// that dropout draws from (runtime/base/philox.h).
//
// Shape rules are checked on symbolic shapes with every error message verbatim; the
// references on fresh random shapes and values against naive computations written here,
// deliberately in a different way from the op (direct exponentials, multi-index loops).
#include <cmath>
#include <limits>
#include <set>

#include "runtime/base/philox.h"
#include "tests/ir/op_harness.h"

namespace modelc::test {

namespace {

const Dim V = Dim::symbol("V");  // B, T, C, H from op_harness.h

// i32 ids uniform in [0, n).
RefTensor random_ids(std::vector<int64_t> shape, int64_t n) {
  return random_tensor(DType::I32, std::move(shape), 0, static_cast<double>(n));
}

}  // namespace

TEST(NnRegistry, SignaturesAndFusionKinds) {
  struct Want { OpKind op; const char* sig; FusionKind fusion; };
  const Want wants[] = {
      {OpKind::Softmax, "x: tensor, axis: int = -1", FusionKind::Row},
      {OpKind::LogSoftmax, "x: tensor, axis: int = -1", FusionKind::Row},
      {OpKind::LayerNorm, "x: tensor, weight: tensor? = none, bias: tensor? = none, eps: float = 1e-05",
       FusionKind::Row},
      {OpKind::Embedding, "ids: tensor, table: tensor", FusionKind::Opaque},
      {OpKind::CrossEntropy, "logits: tensor, targets: tensor, ignore_index: int = -100", FusionKind::Reduction},
      {OpKind::Dropout, "x: tensor, p: float = 0.1", FusionKind::Elementwise},
      {OpKind::CausalMask, "x: tensor", FusionKind::Elementwise},
  };
  for (const Want& w : wants) {
    const OpInfo& info = op_info(w.op);
    EXPECT_EQ(signature_str(info.params), w.sig) << info.name;
    EXPECT_EQ(info.fusion, w.fusion) << info.name;
    EXPECT_FALSE(info.summary.empty()) << info.name;
    // The kernel of cross_entropy is internal: the call is the composite of
    // compiler/ir/ops/losses_class.cc, which lowers to it (tests/ir/test_ops_class_loss.cc).
    EXPECT_EQ(info.callable, w.op != OpKind::CrossEntropy) << info.name;
  }
  EXPECT_EQ(OpRegistry::get().find("cross_entropy")->kind, OpKind::CrossEntropyLoss);
}

// --- softmax and log_softmax ------------------------------------------------------------

TEST(NnSoftmax, ShapeRule) {
  for (OpKind op : {OpKind::Softmax, OpKind::LogSoftmax}) {
    std::string name(op_name(op));
    auto o = build_op(op, {f32({B, T, C})});
    expect_type(o, f32({B, T, C}));
    EXPECT_EQ(o.attrs().i("axis"), 2);  // -1 canonicalised
    o = build_op(op, {tt(DType::BF16, {B, T})}, attrs({{"axis", int64_t{-2}}}));
    expect_type(o, tt(DType::BF16, {B, T}));
    EXPECT_EQ(o.attrs().i("axis"), 0);
    expect_error(build_op(op, {tt(DType::I32, {B, 4})}), name + " needs a float tensor, got i32[B,4]", 0);
    expect_error(build_op(op, {f32({B, T, C})}, attrs({{"axis", int64_t{3}}})),
                 name + " axis 3 is out of range for f32[B,T,C]", -1, "axis");
    expect_error(build_op(op, {f32({B, T})}, attrs({{"axis", int64_t{-3}}})),
                 name + " axis -3 is out of range for f32[B,T]", -1, "axis");
    expect_error(build_op(op, {f32({})}), name + " axis -1 is out of range for f32[]", -1, "axis");
  }
}

TEST(NnSoftmax, ReferenceMatchesNaive) {
  for (int trial = 0; trial < 20; ++trial) {
    int rank = static_cast<int>(rnd(1, 4));
    auto shape = random_shape(rank, 1, 5);
    int64_t axis = rnd(0, rank - 1);
    RefTensor x = random_tensor(DType::F32, shape, -5, 5);
    Shape sym = to_dims(shape);
    for (bool log : {false, true}) {
      auto o = build_op(log ? OpKind::LogSoftmax : OpKind::Softmax, {f32(sym)},
                        attrs({{"axis", axis - (trial % 2 ? rank : 0)}}));  // negative axes too
      ASSERT_FALSE(o.error) << o.error->message;
      RefTensor want(DType::F32, shape);
      for (int64_t i = 0; i < x.numel(); ++i) {
        auto idx = unflatten(i, shape);
        double sum = 0;
        for (idx[static_cast<size_t>(axis)] = 0; idx[static_cast<size_t>(axis)] < shape[static_cast<size_t>(axis)];
             ++idx[static_cast<size_t>(axis)])
          sum += std::exp(x[offset(shape, idx)]);
        want[i] = log ? std::log(std::exp(x[i]) / sum) : std::exp(x[i]) / sum;
      }
      expect_near(run_op(o, {x})[0], want, 1e-12, log ? "log_softmax" : "softmax");
    }
  }
}

TEST(NnSoftmax, LargeLogitsDoNotOverflow) {
  RefTensor x(DType::F32, {3});
  x.data = {1000, 1000, -1e30};
  auto s = run_op(build_op(OpKind::Softmax, {f32({3})}), {x})[0];
  EXPECT_DOUBLE_EQ(s[0], 0.5);
  EXPECT_DOUBLE_EQ(s[1], 0.5);
  EXPECT_EQ(s[2], 0.0);
  auto l = run_op(build_op(OpKind::LogSoftmax, {f32({3})}), {x})[0];
  EXPECT_NEAR(l[0], -std::log(2.0), 1e-12);
}

// --- layer_norm ---------------------------------------------------------------------------

TEST(NnLayerNorm, ShapeRule) {
  auto o = build_op(OpKind::LayerNorm, {f32({B, T, C}), f32({C}), f32({C})});
  expect_type(o, f32({B, T, C}));
  EXPECT_EQ(o.attrs().f("eps"), 1e-5);
  expect_type(build_op(OpKind::LayerNorm, {f32({B, T, C}), std::nullopt, std::nullopt}), f32({B, T, C}));
  expect_type(build_op(OpKind::LayerNorm, {tt(DType::F16, {B, C}), std::nullopt, tt(DType::F16, {C})}),
              tt(DType::F16, {B, C}));
  // An integer eps is stored as a float.
  o = build_op(OpKind::LayerNorm, {f32({C}), std::nullopt, std::nullopt}, attrs({{"eps", int64_t{1}}}));
  ASSERT_FALSE(o.error);
  EXPECT_TRUE(std::holds_alternative<double>(*o.attrs().find("eps")));

  expect_error(build_op(OpKind::LayerNorm, {tt(DType::I32, {B, C}), std::nullopt, std::nullopt}),
               "layer_norm needs a float tensor, got i32[B,C]", 0);
  expect_error(build_op(OpKind::LayerNorm, {f32({}), std::nullopt, std::nullopt}),
               "layer_norm needs a tensor of rank >= 1, got f32[]", 0);
  expect_error(build_op(OpKind::LayerNorm, {f32({B, T, C}), f32({T}), std::nullopt}),
               "layer_norm weight must be f32[C] for f32[B,T,C], got f32[T]", 1);
  expect_error(build_op(OpKind::LayerNorm, {f32({B, C}), tt(DType::BF16, {C}), std::nullopt}),
               "layer_norm weight must be f32[C] for f32[B,C], got bf16[C]", 1);
  expect_error(build_op(OpKind::LayerNorm, {f32({B, C}), f32({C}), f32({1, C})}),
               "layer_norm bias must be f32[C] for f32[B,C], got f32[1,C]", 2);
  expect_error(build_op(OpKind::LayerNorm, {f32({B, C}), std::nullopt, std::nullopt}, attrs({{"eps", 0.0}})),
               "layer_norm eps must be > 0, got 0.0", -1, "eps");
  expect_error(build_op(OpKind::LayerNorm, {f32({B, C}), std::nullopt, std::nullopt}, attrs({{"eps", -1e-5}})),
               "layer_norm eps must be > 0, got -1e-05", -1, "eps");
}

TEST(NnLayerNorm, ReferenceMatchesTwoPassNaive) {
  for (int trial = 0; trial < 16; ++trial) {
    auto shape = random_shape(rnd(1, 3), 1, 6);
    shape.back() = rnd(1, 64);
    int64_t c = shape.back();
    bool has_w = trial & 1, has_b = trial & 2;
    double eps = trial & 4 ? 1e-5 : 0.5;
    Shape sym = to_dims(shape);
    std::vector<std::optional<TensorType>> types = {f32(sym), std::nullopt, std::nullopt};
    RefTensor x = random_tensor(DType::F32, shape, -3, 3);
    RefTensor w = random_tensor(DType::F32, {c}), b = random_tensor(DType::F32, {c});
    std::vector<RefTensor> feeds = {x};
    if (has_w) types[1] = f32({c}), feeds.push_back(w);
    if (has_b) types[2] = f32({c}), feeds.push_back(b);
    auto o = build_op(OpKind::LayerNorm, types, attrs({{"eps", eps}}));
    ASSERT_FALSE(o.error) << o.error->message;
    RefTensor want(DType::F32, shape);
    for (int64_t row = 0; row < x.numel() / c; ++row) {
      double mean = 0, var = 0;
      for (int64_t k = 0; k < c; ++k) mean += x[row * c + k] / static_cast<double>(c);
      for (int64_t k = 0; k < c; ++k) var += std::pow(x[row * c + k] - mean, 2) / static_cast<double>(c);
      for (int64_t k = 0; k < c; ++k)
        want[row * c + k] =
            (x[row * c + k] - mean) / std::sqrt(var + eps) * (has_w ? w[k] : 1.0) + (has_b ? b[k] : 0.0);
    }
    expect_near(run_op(o, feeds)[0], want, 1e-12, "layer_norm");
  }
}

// --- embedding ----------------------------------------------------------------------------

TEST(NnEmbedding, ShapeRule) {
  expect_type(build_op(OpKind::Embedding, {tt(DType::I32, {B, T}), f32({V, C})}), f32({B, T, C}));
  expect_type(build_op(OpKind::Embedding, {tt(DType::I32, {}), tt(DType::BF16, {V, C})}), tt(DType::BF16, {C}));
  expect_error(build_op(OpKind::Embedding, {f32({B, T}), f32({V, C})}), "embedding ids must be i32, got f32[B,T]", 0);
  expect_error(build_op(OpKind::Embedding, {tt(DType::I32, {B}), tt(DType::I32, {V, C})}),
               "embedding table must be a float matrix [V,C], got i32[V,C]", 1);
  expect_error(build_op(OpKind::Embedding, {tt(DType::I32, {B}), f32({V, C, 2})}),
               "embedding table must be a float matrix [V,C], got f32[V,C,2]", 1);
}

TEST(NnEmbedding, ReferenceGathersRows) {
  for (int trial = 0; trial < 10; ++trial) {
    auto ids_shape = random_shape(rnd(0, 3), 1, 5);
    int64_t v = rnd(1, 20), c = rnd(1, 8);
    Shape sym = to_dims(ids_shape);
    auto o = build_op(OpKind::Embedding, {tt(DType::I32, sym), f32({v, c})});
    RefTensor ids = random_ids(ids_shape, v), table = random_tensor(DType::F32, {v, c});
    auto out_shape = ids_shape;
    out_shape.push_back(c);
    RefTensor want(DType::F32, out_shape);
    for (int64_t i = 0; i < ids.numel(); ++i)
      for (int64_t k = 0; k < c; ++k) want[i * c + k] = table[static_cast<int64_t>(ids[i]) * c + k];
    expect_near(run_op(o, {ids, table})[0], want, 0, "embedding");
  }
}

TEST(NnEmbedding, OutOfRangeIdIsAUserError) {
  auto o = build_op(OpKind::Embedding, {tt(DType::I32, {3}), f32({96, 4})});
  RefTensor table = random_tensor(DType::F32, {96, 4});
  for (double bad : {97.0, 96.0, -1.0}) {
    RefTensor ids(DType::I32, {3});
    ids.data = {0, bad, 5};
    try {
      run_op(o, {ids, table});
      ADD_FAILURE() << "no error for id " << bad;
    } catch (const UserError& e) {
      EXPECT_EQ(std::string(e.what()), "embedding: index " + std::to_string(static_cast<int64_t>(bad)) +
                                           " is out of range for a table of 96 rows");
    }
  }
}

// --- cross_entropy --------------------------------------------------------------------------

TEST(NnCrossEntropy, ShapeRule) {
  expect_type(build_op(OpKind::CrossEntropy, {f32({B, T, V}), tt(DType::I32, {B, T})}), f32({}));
  expect_type(build_op(OpKind::CrossEntropy, {tt(DType::BF16, {V}), tt(DType::I32, {})}), f32({}));
  expect_error(build_op(OpKind::CrossEntropy, {tt(DType::I32, {B, V}), tt(DType::I32, {B})}),
               "cross_entropy needs a float tensor, got i32[B,V]", 0);
  expect_error(build_op(OpKind::CrossEntropy, {f32({}), tt(DType::I32, {})}),
               "cross_entropy needs logits of rank >= 1, got f32[]", 0);
  expect_error(build_op(OpKind::CrossEntropy, {f32({B, V}), f32({B})}),
               "cross_entropy targets must be i32[B] for logits f32[B,V], got f32[B]", 1);
  expect_error(build_op(OpKind::CrossEntropy, {f32({B, T, V}), tt(DType::I32, {T, B})}),
               "cross_entropy targets must be i32[B,T] for logits f32[B,T,V], got i32[T,B]", 1);
}

TEST(NnCrossEntropy, ReferenceIsMeanNegativeLogLikelihood) {
  for (int trial = 0; trial < 10; ++trial) {
    auto pos_shape = random_shape(rnd(0, 2), 1, 5);
    int64_t v = rnd(1, 300);
    auto logit_shape = pos_shape;
    logit_shape.push_back(v);
    auto o = build_op(OpKind::CrossEntropy, {f32(to_dims(logit_shape)), tt(DType::I32, to_dims(pos_shape))});
    RefTensor logits = random_tensor(DType::F32, logit_shape, -4, 4), targets = random_ids(pos_shape, v);
    double loss = 0;
    for (int64_t p = 0; p < targets.numel(); ++p) {
      double z = 0;
      for (int64_t k = 0; k < v; ++k) z += std::exp(logits[p * v + k]);
      loss -= std::log(std::exp(logits[p * v + static_cast<int64_t>(targets[p])]) / z);
    }
    RefTensor want(DType::F32, {}, loss / static_cast<double>(targets.numel()));
    expect_near(run_op(o, {logits, targets})[0], want, 1e-10, "cross_entropy");
  }
}

TEST(NnCrossEntropy, OutOfRangeTargetIsAUserError) {
  auto o = build_op(OpKind::CrossEntropy, {f32({2, 5}), tt(DType::I32, {2})});
  RefTensor targets(DType::I32, {2});
  targets.data = {1, 7};
  try {
    run_op(o, {random_tensor(DType::F32, {2, 5}), targets});
    ADD_FAILURE() << "no error";
  } catch (const UserError& e) {
    EXPECT_EQ(std::string(e.what()), "cross_entropy: target 7 is out of range for 5 classes (and is not the ignored "
                                     "index -100)");
  }
}

// --- dropout --------------------------------------------------------------------------------

TEST(NnDropout, ShapeRule) {
  auto o = build_op(OpKind::Dropout, {f32({B, T})});
  expect_type(o, f32({B, T}));
  EXPECT_EQ(o.attrs().f("p"), 0.1);
  o = build_op(OpKind::Dropout, {tt(DType::BF16, {B})}, attrs({{"p", int64_t{0}}}));
  expect_type(o, tt(DType::BF16, {B}));
  EXPECT_TRUE(std::holds_alternative<double>(*o.attrs().find("p")));
  expect_error(build_op(OpKind::Dropout, {tt(DType::I32, {B})}), "dropout needs a float tensor, got i32[B]", 0);
  expect_error(build_op(OpKind::Dropout, {f32({B})}, attrs({{"p", 1.0}})), "dropout p must be in [0, 1), got 1.0",
               -1, "p");
  expect_error(build_op(OpKind::Dropout, {f32({B})}, attrs({{"p", -0.1}})), "dropout p must be in [0, 1), got -0.1",
               -1, "p");
}

namespace {

// Runs dropout with the given site key (nullopt: no key attribute) on x.
RefTensor run_dropout(const RefTensor& x, double p, std::optional<int64_t> key, InterpOptions opts) {
  Attrs a = attrs({{"p", p}});
  if (key) a.set("key", *key);
  return run_op(build_op(OpKind::Dropout, {f32({x.numel()})}, std::move(a)), {x}, opts)[0];
}

}  // namespace

TEST(NnDropout, TrainingMaskFollowsPhilox) {
  const int64_t n = 10000;
  // Values away from 0, so that a dropped element is told apart from a kept one.
  RefTensor x = random_tensor(DType::F32, {n}, 1, 2);
  double p = std::uniform_real_distribution<double>(0.05, 0.6)(rng());
  InterpOptions opts{true, rng()(), static_cast<uint64_t>(rnd(0, 1000))};
  int64_t key = rnd(0, 1 << 30);
  RefTensor y = run_dropout(x, p, key, opts);
  int64_t kept = 0;
  for (int64_t i = 0; i < n; ++i) {
    bool keep = dropout_uniform(opts.seed, static_cast<uint64_t>(key), opts.step, static_cast<uint64_t>(i)) >= p;
    ASSERT_NEAR(y[i], keep ? x[i] / (1 - p) : 0.0, 1e-12) << "at " << i;
    kept += keep;
  }
  double sigma = std::sqrt(p * (1 - p) / n);
  EXPECT_NEAR(static_cast<double>(kept) / n, 1 - p, 4 * sigma) << "p = " << p;

  // The same (seed, key, step) gives the same mask: a recomputation reproduces it.
  expect_near(run_dropout(x, p, key, opts), y, 0, "recomputed");
  // Any of them changed gives another mask.
  auto differs = [&](const RefTensor& z) {
    for (int64_t i = 0; i < n; ++i)
      if ((z[i] == 0) != (y[i] == 0)) return true;
    return false;
  };
  InterpOptions o2 = opts;
  o2.seed += 1;
  EXPECT_TRUE(differs(run_dropout(x, p, key, o2))) << "seed";
  o2 = opts;
  o2.step += 1;
  EXPECT_TRUE(differs(run_dropout(x, p, key, o2))) << "step";
  EXPECT_TRUE(differs(run_dropout(x, p, key + 1, opts))) << "key";
  // No key attribute means site 0.
  expect_near(run_dropout(x, p, std::nullopt, opts), run_dropout(x, p, 0, opts), 0, "absent key");
}

TEST(NnDropout, IdentityWhenNotTrainingOrPZero) {
  RefTensor x = random_tensor(DType::F32, {257}, -1, 1);
  expect_near(run_dropout(x, 0.5, 7, InterpOptions{false, 1, 2}), x, 0, "eval");
  expect_near(run_dropout(x, 0.0, 7, InterpOptions{true, 1, 2}), x, 0, "p = 0");
}

// --- causal_mask ------------------------------------------------------------------------------

TEST(NnCausalMask, ShapeRule) {
  expect_type(build_op(OpKind::CausalMask, {f32({B, H, T, T})}), f32({B, H, T, T}));
  expect_type(build_op(OpKind::CausalMask, {tt(DType::F16, {T, T + 4})}), tt(DType::F16, {T, T + 4}));
  expect_error(build_op(OpKind::CausalMask, {tt(DType::I32, {T, T})}),
               "causal_mask needs a float tensor, got i32[T,T]", 0);
  expect_error(build_op(OpKind::CausalMask, {f32({T})}),
               "causal_mask needs a tensor [...,Tq,Tk] of rank >= 2, got f32[T]", 0);
}

TEST(NnCausalMask, ReferenceMasksFutureKeys) {
  for (int trial = 0; trial < 10; ++trial) {
    auto shape = random_shape(rnd(2, 4), 1, 6);
    int64_t tq = shape[shape.size() - 2], tk = shape.back();
    Shape sym = to_dims(shape);
    RefTensor x = random_tensor(DType::F32, shape);
    RefTensor want = x;
    for (int64_t i = 0; i < x.numel(); ++i) {
      auto idx = unflatten(i, shape);
      int64_t row = idx[idx.size() - 2], col = idx.back();
      // Query row sits at absolute position row + tk - tq and sees keys up to it.
      if (col - (tk - tq) > row) want[i] = -std::numeric_limits<double>::infinity();
    }
    expect_near(run_op(build_op(OpKind::CausalMask, {f32(sym)}), {x})[0], want, 0, "causal_mask");
  }
}

// --- Philox -------------------------------------------------------------------------------------

TEST(NnPhilox, KnownAnswers) {
  // The published known-answer vectors of Random123 (kat_vectors, philox4x32 10 rounds).
  EXPECT_EQ(philox4x32_10({0, 0, 0, 0}, {0, 0}), (PhiloxCounter{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}));
  EXPECT_EQ(philox4x32_10({~0u, ~0u, ~0u, ~0u}, {~0u, ~0u}),
            (PhiloxCounter{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}));
  EXPECT_EQ(philox4x32_10({0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}, {0xa4093822, 0x299f31d0}),
            (PhiloxCounter{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}));
  // constexpr, so that tables of draws can be computed at compile time.
  static_assert(philox4x32_10({0, 0, 0, 0}, {0, 0})[0] == 0x6627e8d5u);
}

TEST(NnPhilox, DropoutUniformIsAPureFunctionInUnitInterval) {
  uint64_t seed = rng()(), key = rng()(), step = rng()();
  double sum = 0;
  std::set<float> distinct;
  const int n = 20000;
  for (int i = 0; i < n; ++i) {
    float u = dropout_uniform(seed, key, step, static_cast<uint64_t>(i));
    ASSERT_GE(u, 0.0f);
    ASSERT_LT(u, 1.0f);
    ASSERT_EQ(u, dropout_uniform(seed, key, step, static_cast<uint64_t>(i)));
    sum += u;
    distinct.insert(u);
  }
  EXPECT_NEAR(sum / n, 0.5, 4 * std::sqrt(1.0 / 12 / n));
  EXPECT_GT(distinct.size(), static_cast<size_t>(n * 0.98));
  EXPECT_EQ(uniform_from_bits(0xffffffffu), 1.0f - 1.0f / 16777216.0f);
  EXPECT_EQ(uniform_from_bits(0), 0.0f);
  // The high words of every argument matter.
  float u = dropout_uniform(1, 2, 3, 4);
  EXPECT_NE(u, dropout_uniform(1 + (1ull << 32), 2, 3, 4));
  EXPECT_NE(u, dropout_uniform(1, 2 + (1ull << 32), 3, 4));
  EXPECT_NE(u, dropout_uniform(1, 2, 3 + (1ull << 32), 4));
  EXPECT_NE(u, dropout_uniform(1, 2, 3, 4 + (1ull << 32)));
}

}  // namespace modelc::test
