// Elementwise kernels against the double reference: every op with a scalar definition on
// random shapes (rank 0-4, broadcasting, odd extents), cast, dropout (bit-exact mask),
// causal_mask, one_hot, and a symbolic batch dim bound at run time.
//
// Tolerances (relative, as expect_near: |got - want| <= tol * (1 + |want|)): 1e-5 for f32
// math (a few f32 ulps through libm and the compound definitions), exact for i32 and bool.
#include <limits>

#include "tests/codegen/jit_harness.h"

namespace modelc::test {
namespace {

constexpr double kF32Tol = 1e-5;

// The value range an op's input needs (log and sqrt want positives, ...).
// The record's test domain of input k.
Domain domain_of(OpKind op, size_t k) {
  const std::vector<Domain>& d = op_info(op).domains;
  return d.empty() ? Domain{} : d[std::min(k, d.size() - 1)];
}

// A shape that broadcasts to `out`: some leading dims dropped, some dims set to 1.
std::vector<int64_t> broadcast_from(const std::vector<int64_t>& out) {
  size_t drop = static_cast<size_t>(rnd(0, static_cast<int64_t>(out.size())));
  std::vector<int64_t> s(out.begin() + static_cast<std::ptrdiff_t>(drop), out.end());
  for (int64_t& d : s)
    if (rnd(0, 2) == 0) d = 1;
  return s;
}

std::vector<OpKind> scalar_ops(size_t arity) {
  std::vector<OpKind> out;
  for (const OpInfo& op : OpRegistry::get().all())
    if (op.scalar && op.pointwise && !op.domains.empty() && op.grad_exprs.size() == arity) out.push_back(op.kind);
  return out;
}

TEST(KernelsElementwise, UnaryOpsOnRandomShapes) {
  std::vector<OpKind> ops = scalar_ops(1);
  ASSERT_GE(ops.size(), 10u);
  for (OpKind k : ops) {
    for (int rep = 0; rep < 3; ++rep) {
      auto shape = random_shape(rnd(0, 4), 1, 9);
      const Domain d = domain_of(k, 0);
      OneOp o = build_op(k, {type_of(RefTensor(DType::F32, shape))});
      ASSERT_FALSE(o.error) << op_name(k);
      check_op(o, {random_tensor(DType::F32, shape, d.lo, d.hi)}, kF32Tol);
    }
  }
}

TEST(KernelsElementwise, GeluBothForms) {
  for (const char* approx : {"none", "tanh"}) {
    auto shape = random_shape(rnd(1, 3), 1, 33);
    OneOp o = build_op(OpKind::Gelu, {type_of(RefTensor(DType::F32, shape))}, attrs({{"approximate", std::string(approx)}}));
    check_op(o, {random_tensor(DType::F32, shape, -6, 6)}, kF32Tol, {}, approx);
  }
}

TEST(KernelsElementwise, BinaryOpsWithBroadcasting) {
  for (OpKind k : scalar_ops(2)) {
    for (int rep = 0; rep < 4; ++rep) {
      auto out = random_shape(rnd(0, 4), 1, 7);
      auto sa = broadcast_from(out), sb = rep == 0 ? out : broadcast_from(out);
      if (rnd(0, 1)) std::swap(sa, sb);
      const Domain da = domain_of(k, 0), db = domain_of(k, 1);
      RefTensor a = random_tensor(DType::F32, sa, da.lo, da.hi), b = random_tensor(DType::F32, sb, db.lo, db.hi);
      if (db.either_sign)
        for (double& v : b.data) v = rnd(0, 1) ? v : -v;
      OneOp o = build_op(k, {type_of(a), type_of(b)});
      ASSERT_FALSE(o.error) << op_name(k) << ": " << o.error->message;
      check_op(o, {a, b}, o.outputs()[0].dtype == DType::Bool ? 0 : kF32Tol);
    }
  }
}

TEST(KernelsElementwise, NaNPropagatesThroughMaximumAndRelu) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  RefTensor a(DType::F32, {5}), b(DType::F32, {5});
  a.data = {nan, 1, -2, nan, 0};
  b.data = {1, nan, -3, nan, -0.0};
  for (OpKind k : {OpKind::Maximum, OpKind::Minimum}) check_op(build_op(k, {type_of(a), type_of(b)}), {a, b}, 0);
  check_op(build_op(OpKind::Relu, {type_of(a)}), {a}, 0);
}

TEST(KernelsElementwise, WhereBroadcastsAllThree) {
  for (int rep = 0; rep < 6; ++rep) {
    auto out = random_shape(rnd(0, 4), 1, 6);
    RefTensor c = random_tensor(DType::Bool, broadcast_from(out));
    RefTensor a = random_tensor(DType::F32, broadcast_from(out)), b = random_tensor(DType::F32, out);
    check_op(build_op(OpKind::Where, {type_of(c), type_of(a), type_of(b)}), {c, a, b}, 0);
  }
}

TEST(KernelsElementwise, CastBetweenAllTypes) {
  const DType types[] = {DType::F32, DType::I32, DType::Bool};
  const double nan = std::numeric_limits<double>::quiet_NaN();
  for (DType from : types)
    for (DType to : types) {
      auto shape = random_shape(rnd(1, 2), 1, 13);
      RefTensor x = random_tensor(from, shape, -50, 50);
      if (from == DType::F32) {  // the edges: NaN, saturation, truncation toward zero
        x.data[0] = nan;
        if (x.numel() > 1) x.data[1] = 3e9;
        if (x.numel() > 2) x.data[2] = -2.75;
        if (x.numel() > 3) x.data[3] = -3e9;
      }
      OneOp o = build_op(OpKind::Cast, {type_of(x)}, attrs({{"dtype", to}}));
      check_op(o, {x}, 0, {}, std::string(dtype_name(from)) + "->" + std::string(dtype_name(to)));
    }
}

TEST(KernelsElementwise, DropoutMaskIsBitExact) {
  for (int rep = 0; rep < 3; ++rep) {
    auto shape = random_shape(rnd(1, 3), 1, 40);
    RefTensor x = random_tensor(DType::F32, shape, 0.5, 1.5);  // never 0: a 0 output means dropped
    double p = rep == 0 ? 0.0 : static_cast<double>(rnd(1, 9)) / 10;
    OneOp o = build_op(OpKind::Dropout, {type_of(x)}, attrs({{"p", p}, {"key", int64_t(rnd(0, 1 << 30)) * 977}}));
    InterpOptions opts;
    opts.seed = static_cast<uint64_t>(rnd(0, INT64_MAX / 2)) * 3;
    opts.step = static_cast<uint64_t>(rnd(0, 1000));
    RefTensor got = check_op(o, {x}, kF32Tol, opts);
    RefTensor want = run_op(o, {x}, opts)[0];
    for (int64_t i = 0; i < got.numel(); ++i) ASSERT_EQ(got[i] == 0, want[i] == 0) << "element " << i;
  }
}

TEST(KernelsElementwise, CausalMask) {
  for (int rep = 0; rep < 4; ++rep) {
    int64_t tk = rnd(1, 9), tq = rnd(1, tk);
    auto shape = random_shape(rnd(0, 2), 1, 3);
    shape.push_back(tq);
    shape.push_back(tk);
    RefTensor x = random_tensor(DType::F32, shape);
    check_op(build_op(OpKind::CausalMask, {type_of(x)}), {x}, 0);
  }
}

TEST(KernelsElementwise, OneHotWithIdsOutOfRange) {
  for (int rep = 0; rep < 3; ++rep) {
    int64_t classes = rnd(1, 11);
    RefTensor ids = random_tensor(DType::I32, random_shape(rnd(0, 3), 1, 5), -2, static_cast<double>(classes + 2));
    check_op(build_op(OpKind::OneHot, {type_of(ids)}, attrs({{"classes", classes}})), {ids}, 0);
  }
}

TEST(KernelsElementwise, SymbolicBatchThroughOneKernel) {
  // [B, 7] + [7] and an elementwise op on [B, C]: one compile, several B at run time.
  OneOp o = build_op(OpKind::Add, {f32({B, 7}), f32({7})});
  ASSERT_FALSE(o.error);
  auto c = compile_node(o.g, o.node);
  EXPECT_FALSE(c->codelet.extent.is_constant());
  for (int64_t bv : {int64_t(1), int64_t(3), rnd(4, 300)}) {
    RefTensor a = random_tensor(DType::F32, {bv, 7}), bias = random_tensor(DType::F32, {7});
    RefTensor want = run_op(o, {a, bias})[0];
    const Node& n = o.g.node(o.node);
    RefTensor got = run_kernel(*c, n, {&a, &bias}, {{"B", bv}}).at(0);
    expect_near(got, want, kF32Tol, "B=" + std::to_string(bv));
  }
  OneOp s = build_op(OpKind::Sigmoid, {f32({B, C})});
  auto cs = compile_node(s.g, s.node);
  for (int rep = 0; rep < 3; ++rep) {
    int64_t bv = rnd(1, 50), cv = rnd(1, 70);
    RefTensor x = random_tensor(DType::F32, {bv, cv}, -10, 10);
    RefTensor want = run_op(s, {x})[0];
    RefTensor got = run_kernel(*cs, s.g.node(s.node), {&x}, {{"B", bv}, {"C", cv}}).at(0);
    expect_near(got, want, kF32Tol);
  }
}

// True when the kernel's host loop runs rows and columns (CodeletBuilder::split_index).
bool split_loop(const Compiled& c) { return c.descs.at(c.codelet.codelet).source.find("cols:") != std::string::npos; }

TEST(KernelsElementwise, BroadcastReadsSplitTheHostLoopIntoRowsAndColumns) {
  // A broadcast operand read at i % n makes the host loop two-level (rows of n, columns
  // inside); random chunks [begin, end) start and end mid-row.
  for (int rep = 0; rep < 6; ++rep) {
    const int64_t a = rnd(2, 4), r = rnd(2, 5), n = rnd(16, 70);  // every case broadcasts
    struct Case {
      std::vector<int64_t> x, y;
    };
    const Case cases[] = {{{r, n}, {n}},           // the bias of a linear layer
                          {{a, r, n}, {r, n}},     // rows merged: i % (r * n)
                          {{r, n}, {r, 1}},        // a per-row scale: i / n
                          {{a, r, n}, {a, 1, n}}}; // broadcast in the middle
    for (const Case& cs : cases) {
      for (OpKind k : {OpKind::Add, OpKind::Mul, OpKind::Maximum}) {
        RefTensor x = random_tensor(DType::F32, cs.x), y = random_tensor(DType::F32, cs.y);
        const bool swap = rnd(0, 1) == 1;
        OneOp o = swap ? build_op(k, {type_of(y), type_of(x)}) : build_op(k, {type_of(x), type_of(y)});
        ASSERT_FALSE(o.error);
        check_op(o, swap ? std::vector<RefTensor>{y, x} : std::vector<RefTensor>{x, y}, kF32Tol, {}, "split");
        EXPECT_TRUE(split_loop(*compile_node(o.g, o.node))) << x.shape_str() << " with " << y.shape_str();
      }
    }
  }
  // A symbolic inner dim splits too; a small constant one (a few classes) does not.
  OneOp o = build_op(OpKind::Add, {f32({B, C}), f32({C})});
  auto c = compile_node(o.g, o.node);
  EXPECT_TRUE(split_loop(*c));
  for (int rep = 0; rep < 4; ++rep) {
    int64_t bv = rnd(1, 9), cv = rep == 0 ? 1 : rnd(1, 90);
    RefTensor x = random_tensor(DType::F32, {bv, cv}), bias = random_tensor(DType::F32, {cv});
    RefTensor want = run_op(o, {x, bias})[0];
    expect_near(run_kernel(*c, o.g.node(o.node), {&x, &bias}, {{"B", bv}, {"C", cv}}).at(0), want, kF32Tol);
  }
  // One chunk [begin, end) writes exactly its work items (the rows loop starts mid-row
  // and stops mid-row).
  for (int rep = 0; rep < 20; ++rep) {
    int64_t bv = rnd(1, 6), cv = rnd(16, 40);
    RefTensor x = random_tensor(DType::F32, {bv, cv}), bias = random_tensor(DType::F32, {cv});
    RefTensor want = run_op(o, {x, bias})[0];
    std::vector<int64_t> symvals = symbol_values(c->symbols, {{"B", bv}, {"C", cv}});
    std::vector<int64_t> sizes;
    for (const rt::SizeExpr& e : c->codelet.sizes) sizes.push_back(e.eval(symvals));
    RawBuffers io({&x, &bias}, o.g.node(o.node).outputs, {{"B", bv}, {"C", cv}});
    const int64_t begin = rnd(0, bv * cv - 1), end = rnd(begin + 1, bv * cv);
    c->descs.at(c->codelet.codelet).host(io.ptrs.data(), sizes.data(), begin, end);
    RefTensor got = io.read_outputs().at(0);
    for (int64_t i = 0; i < bv * cv; ++i) {
      if (i >= begin && i < end) EXPECT_EQ(got[i], static_cast<float>(want[i])) << i << " in [" << begin << ", " << end << ")";
      else EXPECT_TRUE(std::isnan(got[i])) << i << " outside [" << begin << ", " << end << ") was written";
    }
  }
  OneOp small = build_op(OpKind::Add, {f32({B, 10}), f32({10})});
  EXPECT_FALSE(split_loop(*compile_node(small.g, small.node)));
  OneOp plain = build_op(OpKind::Add, {f32({B, 40}), f32({B, 40})});
  EXPECT_FALSE(split_loop(*compile_node(plain.g, plain.node)));
}

TEST(KernelsElementwise, BroadcastToReadsItsInputUnderNumpyBroadcasting) {
  for (int rep = 0; rep < 12; ++rep) {
    auto out = random_shape(rnd(0, 4), 1, rep < 6 ? 7 : 40);
    RefTensor x = random_tensor(DType::F32, broadcast_from(out));
    Shape target;
    for (int64_t d : out) target.push_back(Dim(d));
    check_op(build_op(OpKind::BroadcastTo, {type_of(x)}, attrs({{"shape", target}})), {x}, 0);
  }
  RefTensor ids = random_tensor(DType::I32, {3, 1}, -5, 5);
  check_op(build_op(OpKind::BroadcastTo, {type_of(ids)}, attrs({{"shape", Shape{2, 3, 20}}})), {ids}, 0);
}

TEST(KernelsElementwise, CausalMaskSplitsByTheKeyAxis) {
  for (int rep = 0; rep < 4; ++rep) {
    RefTensor x = random_tensor(DType::F32, {rnd(1, 3), rnd(1, 20), rnd(16, 40)});
    OneOp o = build_op(OpKind::CausalMask, {type_of(x)});
    ASSERT_FALSE(o.error);
    check_op(o, {x}, 0);
    EXPECT_TRUE(split_loop(*compile_node(o.g, o.node)));
  }
}

}  // namespace
}  // namespace modelc::test
