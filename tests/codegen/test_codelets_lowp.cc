// f16 and bf16 buffers in generated kernels (compiler/codegen/low_float.cc): loads widen to
// f32 exactly, math runs in f32, stores round to nearest even.
//  - casts f32 -> f16/bf16 bit-exact against round_to_dtype on special values (NaN, +-inf,
//    overflow to inf, the largest finite values, ties, f16 subnormals and underflow to 0)
//    and on random values over the whole exponent range; every one of the 65536 bit
//    patterns of each type widened back to f32 exactly;
//  - elementwise ops, reductions and row ops with low-precision inputs and outputs against
//    the double reference (which does not round intermediate results): relative tolerance
//    of one ulp of the output type (2^-8 bf16, 2^-11 f16) plus the f32 tolerance;
//  - a fused Program (casts both ways inside elementwise chains, a reduction's prologue)
//    against the reference, fused and unfused;
//  - the GPU flavour of every such kernel assembles with ptxas for sm_80 and sm_90.
#include <fmt/format.h>

#include <bit>
#include <limits>

#include "tests/codegen/lowp_harness.h"
#include "tests/codegen/ptxas.h"

namespace modelc::test {
namespace {

// Runs a compiled node like run_kernel, with f16/bf16 inputs and outputs as their bits.
std::vector<RefTensor> run_lowp(const Compiled& c, const Node& n, const std::vector<const RefTensor*>& ins,
                                const std::map<std::string, int64_t>& dims) {
  RawBuffers io(ins, n.outputs, dims);
  for (size_t k = 0; k < ins.size(); ++k)
    if (ins[k] && low(ins[k]->dtype))
      for (int64_t i = 0; i < ins[k]->numel(); ++i) static_cast<uint16_t*>(io.ptrs[k])[i] = to_bits((*ins[k])[i], ins[k]->dtype);
  run_emitted(c.descs, c.codelet, symbol_values(c.symbols, dims), io);
  std::vector<RefTensor> outs = io.read_outputs();
  for (size_t k = 0; k < outs.size(); ++k)
    if (low(outs[k].dtype))
      for (int64_t i = 0; i < outs[k].numel(); ++i)
        outs[k][i] = from_bits(static_cast<const uint16_t*>(io.ptrs[ins.size() + k])[i], outs[k].dtype);
  return outs;
}

// The node's kernel output against the reference (tolerance: expect_near's, relative).
RefTensor check_lowp(const OneOp& o, const std::vector<RefTensor>& inputs, double tol, const std::string& what) {
  OpReference r = op_reference(o, inputs, {});
  auto c = compile_node(o.g, o.node);
  RefTensor got = run_lowp(*c, o.g.node(o.node), r.inputs, r.result.dims).at(0);
  expect_near(got, r.result.outputs.at("out0"), tol, what);
  return got;
}

// Values that exercise rounding of t: specials, the edges of the range, ties and the
// subnormals, then random values whose exponents span the type's range and beyond.
std::vector<double> interesting(DType t) {
  const double inf = std::numeric_limits<double>::infinity(), nan = std::numeric_limits<double>::quiet_NaN();
  std::vector<double> v = {0.0, -0.0, 1.0, -1.0, inf, -inf, nan, 3.0e38f, -3.4e38f, 1e-45, -1e-45};
  if (t == DType::F16) {
    v.insert(v.end(), {65504.0, 65519.0, 65520.0, -65520.0, 70000.0, 1e6,  // max, just below/at the inf threshold
                       1.0 + std::ldexp(1, -11), 1.0 + 3 * std::ldexp(1, -11),  // ties to even: down, up
                       std::ldexp(1, -14), std::ldexp(1, -24), std::ldexp(1, -25), std::ldexp(3, -26),  // min normal, min subnormal, tie to 0, above
                       std::ldexp(1, -26), std::ldexp(1023, -24), std::ldexp(2047, -25), -std::ldexp(5, -25)});
  } else {
    v.insert(v.end(), {3.3895313892515355e38, 3.39e38, 1.0 + std::ldexp(1, -8), 1.0 + 3 * std::ldexp(1, -8),
                       std::ldexp(1.0, -126), std::ldexp(1.0, -133), std::ldexp(3.0, -140)});
  }
  const int emin = t == DType::F16 ? -28 : -140, emax = t == DType::F16 ? 17 : 127;
  for (int i = 0; i < 300; ++i) {
    double m = std::uniform_real_distribution<double>(1.0, 2.0)(rng());
    // Through f32: the kernels' input is an f32.
    v.push_back(static_cast<float>((rnd(0, 1) ? -1 : 1) * std::ldexp(m, static_cast<int>(rnd(emin, emax)))));
  }
  return v;
}

TEST(KernelsLowPrecision, CastFromF32RoundsToNearestEvenLikeTheReference) {
  for (DType t : {DType::F16, DType::BF16}) {
    std::vector<double> vals = interesting(t);
    RefTensor x(DType::F32, {static_cast<int64_t>(vals.size())});
    x.data = vals;
    OneOp o = build_op(OpKind::Cast, {type_of(x)}, attrs({{"dtype", t}}));
    auto c = compile_node(o.g, o.node);
    RefTensor got = run_lowp(*c, o.g.node(o.node), {&x}, {}).at(0);
    for (size_t i = 0; i < vals.size(); ++i) {
      const double want = round_to_dtype(vals[i], t);
      if (std::isnan(want)) {
        EXPECT_TRUE(std::isnan(got[static_cast<int64_t>(i)])) << dtype_name(t) << " of nan";
      } else {
        EXPECT_EQ(got[static_cast<int64_t>(i)], want) << dtype_name(t) << " of " << fmt::format("{:a}", vals[i]);
      }
      if (want == 0) {
        EXPECT_EQ(std::signbit(got[static_cast<int64_t>(i)]), std::signbit(vals[i])) << "sign of zero";
      }
    }
  }
}

TEST(KernelsLowPrecision, EveryBitPatternWidensExactly) {
  for (DType t : {DType::F16, DType::BF16}) {
    RefTensor x(t, {65536});
    for (int64_t i = 0; i < 65536; ++i) x[i] = from_bits(static_cast<uint16_t>(i), t);
    OneOp o = build_op(OpKind::Cast, {type_of(x)}, attrs({{"dtype", DType::F32}}));
    auto c = compile_node(o.g, o.node);
    RefTensor got = run_lowp(*c, o.g.node(o.node), {&x}, {}).at(0);
    int64_t bad = 0;
    for (int64_t i = 0; i < 65536; ++i) {
      const bool ok = std::isnan(x[i]) ? std::isnan(got[i]) : got[i] == x[i] && std::signbit(got[i]) == std::signbit(x[i]);
      if (!ok && bad++ < 5) ADD_FAILURE() << dtype_name(t) << " bits " << fmt::format("{:#06x}", i) << ": got " << got[i] << ", want " << x[i];
    }
    EXPECT_EQ(bad, 0) << dtype_name(t);
  }
}

TEST(KernelsLowPrecision, CastsBetweenLowTypesAndIntegers) {
  for (DType from : {DType::F16, DType::BF16})
    for (DType to : {DType::F16, DType::BF16, DType::I32, DType::Bool}) {
      if (from == to) continue;
      RefTensor x = random_tensor(from, {rnd(1, 70)}, -300, 300);
      x[0] = 0;
      // Exact: one rounding of a value that is exact in f32 (f16 -> bf16 and bf16 -> f16
      // round once; to i32 truncates; to bool compares).
      check_lowp(build_op(OpKind::Cast, {type_of(x)}, attrs({{"dtype", to}})), {x}, 0,
                 fmt::format("cast {} -> {}", dtype_name(from), dtype_name(to)));
    }
  RefTensor i = random_tensor(DType::I32, {33}, -2000, 2000);
  for (DType to : {DType::F16, DType::BF16})
    check_lowp(build_op(OpKind::Cast, {type_of(i)}, attrs({{"dtype", to}})), {i}, 0, fmt::format("cast i32 -> {}", dtype_name(to)));
}

TEST(KernelsLowPrecision, ElementwiseOpsComputeInF32AndRoundOnStore) {
  for (DType t : {DType::F16, DType::BF16}) {
    for (const OpInfo& info : OpRegistry::get().all()) {
      const size_t arity = info.grad_exprs.size();
      if (!info.scalar || !info.pointwise || info.domains.empty() || arity < 1 || arity > 2) continue;
      auto shape = random_shape(rnd(1, 3), 1, 9);
      const Domain da = info.domains[0], db = info.domains.back();
      RefTensor a = random_tensor(t, shape, da.lo, da.hi);
      OneOp o = arity == 1 ? build_op(info.kind, {type_of(a)}) : OneOp{};
      std::vector<RefTensor> in = {a};
      if (arity == 2) {
        RefTensor b = random_tensor(t, {shape.back()}, db.lo, db.hi);
        if (db.either_sign) for (double& v : b.data) v = rnd(0, 1) ? v : -v;
        o = build_op(info.kind, {type_of(a), type_of(b)});
        in.push_back(b);
      }
      ASSERT_FALSE(o.error) << info.name;
      const bool exact = o.outputs()[0].dtype == DType::Bool;
      check_lowp(o, in, exact ? 0 : ulp_tol(t) + 1e-5, fmt::format("{} {}", dtype_name(t), info.name));
    }
  }
}

TEST(KernelsLowPrecision, OverflowToInfinityAndNaNPropagate) {
  // The reference does not round a node's result to its dtype: the kernel's store must
  // give round_to_dtype of it (here exact products: one rounding either way).
  const double inf = std::numeric_limits<double>::infinity(), nan = std::numeric_limits<double>::quiet_NaN();
  RefTensor a(DType::F16, {7}), b(DType::F16, {7});
  a.data = {60000, -60000, 300, nan, inf, std::ldexp(1, -20), 256};
  b.data = {2, 2, 300, 1, -inf, std::ldexp(1, -10), 255.75};
  OneOp o = build_op(OpKind::Mul, {type_of(a), type_of(b)});
  OpReference r = op_reference(o, {a, b}, {});
  auto c = compile_node(o.g, o.node);
  RefTensor got = run_lowp(*c, o.g.node(o.node), r.inputs, r.result.dims).at(0);
  const RefTensor& want = r.result.outputs.at("out0");
  for (int64_t i = 0; i < 7; ++i) {
    const double w = round_to_dtype(want[i], DType::F16);
    if (std::isnan(w)) {
      EXPECT_TRUE(std::isnan(got[i])) << i;
    } else {
      EXPECT_EQ(got[i], w) << i;
    }
  }
  EXPECT_EQ(got[0], inf);                     // 120000: past the f16 range
  EXPECT_EQ(got[1], -inf);
  EXPECT_EQ(got[2], inf);                     // 90000
  EXPECT_TRUE(std::isnan(got[3]));
  EXPECT_EQ(got[4], -inf);
  EXPECT_EQ(got[5], 0.0);                     // 2^-30: below half the smallest subnormal
  EXPECT_EQ(got[6], 65472.0);                 // 65472 exactly (the largest finite is 65504)
}

TEST(KernelsLowPrecision, ReductionsAndRowOpsAccumulateInF32) {
  for (DType t : {DType::F16, DType::BF16}) {
    for (OpKind k : {OpKind::Sum, OpKind::Mean, OpKind::Max}) {
      for (Ints axes : {Ints{0}, Ints{1}, Ints{0, 1}}) {
        RefTensor x = random_tensor(t, {rnd(1, 300), rnd(1, 40)}, -2, 2);
        check_lowp(build_op(k, {type_of(x)}, attrs({{"axes", axes}})), {x}, 2 * ulp_tol(t),
                   fmt::format("{} {} axes {}", dtype_name(t), op_name(k), axes.size()));
      }
    }
    RefTensor x = random_tensor(t, {rnd(1, 6), rnd(2, 70)}, -4, 4);
    for (OpKind k : {OpKind::Softmax, OpKind::LogSoftmax})
      check_lowp(build_op(k, {type_of(x)}, attrs({{"axis", int64_t(-1)}})), {x}, 2 * ulp_tol(t), fmt::format("{} {}", dtype_name(t), op_name(k)));
    RefTensor w = random_tensor(t, {x.shape[1]}), bias = random_tensor(t, {x.shape[1]});
    check_lowp(build_op(OpKind::LayerNorm, {type_of(x), type_of(w), type_of(bias)}, attrs({{"eps", 1e-5}})), {x, w, bias},
               4 * ulp_tol(t), fmt::format("{} layer_norm", dtype_name(t)));
  }
}

// ---------------------------------------------------------------- fused Programs

TEST(KernelsLowPrecision, FusedGroupsWithCastsAgreeWithTheReference) {
  for (DType t : {DType::F16, DType::BF16}) {
    const int64_t R = rnd(1, 300), Cn = rnd(1, 40);
    Graph g;
    g.name = "lowp";
    Value x = add_input(g, "x", TensorType{t, {Dim(R), Dim(Cn)}});
    Value w = add_input(g, "w", TensorType{DType::F32, {Dim(Cn)}});
    Value lw = add_input(g, "lw", TensorType{t, {Dim(Cn)}});
    // Low in, f32 math, low out: cast up, scale by an f32 weight, tanh, cast down.
    Value up = emit_op(g, OpKind::Cast, {x}, attrs({{"dtype", DType::F32}}));
    Value h = emit_op(g, OpKind::Tanh, {emit_op(g, OpKind::Mul, {up, w})});
    Value down = emit_op(g, OpKind::Cast, {h}, attrs({{"dtype", t}}));
    // Math in the low type itself (each op rounds), then a reduction over a cast prologue.
    Value lowmath = emit_op(g, OpKind::Add, {emit_op(g, OpKind::Mul, {down, lw}), x});
    Value red = emit_op(g, OpKind::Sum, {emit_op(g, OpKind::Cast, {lowmath}, attrs({{"dtype", DType::F32}}))}, attrs({{"axes", Ints{0}}}));
    Value sm = emit_op(g, OpKind::Softmax, {emit_op(g, OpKind::Cast, {lowmath}, attrs({{"dtype", DType::F32}}))}, attrs({{"axis", int64_t(1)}}));
    g.outputs = {{"down", down, {}}, {"lowmath", lowmath, {}}, {"red", red, {}},
                 {"sm", emit_op(g, OpKind::Cast, {sm}, attrs({{"dtype", t}})), {}}};
    std::map<std::string, RefTensor> feeds = {{"x", random_tensor(t, {R, Cn}, -3, 3)},
                                              {"w", random_tensor(DType::F32, {Cn})},
                                              {"lw", random_tensor(t, {Cn})}};
    InterpOptions io;
    io.training = false;
    InterpResult ref = interpret(g, feeds, io);
    for (bool fusion : {true, false}) {
      std::map<std::string, RefTensor> out = run_program(g, feeds, fusion);
      // down: one rounding of an f32 result; lowmath: two low-precision ops, each rounded
      // by the kernel (the reference rounds neither); sm: softmax of those, rounded.
      const double tol = ulp_tol(t);
      for (const char* name : {"down", "lowmath", "sm"})
        expect_near(out.at(name), ref.outputs.at(name), std::string(name) == "down" ? tol : 3 * tol,
                    fmt::format("{} fusion {} output {}", dtype_name(t), fusion, name));
      // red: a column sum of R values that each carry up to 1.5 ulps of rounding, so its
      // error is bounded by the sum of their magnitudes (not by the result, which cancels).
      const RefTensor& lm = ref.outputs.at("lowmath");
      for (int64_t c = 0; c < Cn; ++c) {
        double mag = 0;
        for (int64_t r = 0; r < R; ++r) mag += std::fabs(lm[r * Cn + c]);
        EXPECT_NEAR(out.at("red")[c], ref.outputs.at("red")[c], 1.5 * tol * mag + 1e-5)
            << dtype_name(t) << " fusion " << fusion << " red column " << c;
      }
      if (fusion) {
        LowerOptions lo;
        lo.dry_run = true;
        size_t kernels = 0;
        // Keep the program alive: the range below points into it.
        const std::shared_ptr<rt::Program> prog = lower_program(g, nullptr, nullptr, lo);
        for (const rt::Instr& i : prog->function("eval")->instrs)
          kernels += i.kind == rt::Instr::Kind::Codelet;
        EXPECT_LE(kernels, 4u) << "the casts did not fuse";
      }
    }
  }
}

TEST(KernelsLowPrecision, GpuKernelsAssembleForSm80AndSm90) {
  MODELC_REQUIRE_PTXAS();
  // One module of all the kernels per type (ptxas's log names the failing kernel): ptxas
  // runs four times, not once per kernel.
  for (DType t : {DType::F16, DType::BF16}) {
    std::vector<std::pair<std::string, OneOp>> cases;
    for (DType to : {DType::F32, DType::F16, DType::BF16, DType::I32})
      if (to != t) {
        cases.emplace_back(fmt::format("cast to {}", dtype_name(to)), build_op(OpKind::Cast, {tt(t, {B, 33})}, attrs({{"dtype", to}})));
        cases.emplace_back(fmt::format("cast from {}", dtype_name(to)), build_op(OpKind::Cast, {tt(to, {B, 33})}, attrs({{"dtype", t}})));
      }
    cases.emplace_back("add", build_op(OpKind::Add, {tt(t, {B, 37}), tt(t, {37})}));
    cases.emplace_back("gelu", build_op(OpKind::Gelu, {tt(t, {B, 1024})}));
    cases.emplace_back("sum rows", build_op(OpKind::Sum, {tt(t, {B, 3000})}, attrs({{"axes", Ints{1}}})));
    cases.emplace_back("sum tiles", build_op(OpKind::Sum, {tt(t, {300, 40})}, attrs({{"axes", Ints{0}}})));
    cases.emplace_back("max all", build_op(OpKind::Max, {tt(t, {B, T, 96})}));
    cases.emplace_back("softmax", build_op(OpKind::Softmax, {tt(t, {B, 4096})}, attrs({{"axis", int64_t(-1)}})));
    SymbolTable syms;
    CodeletCompiler kc(syms, /*gpu=*/true);
    for (const auto& [label, o] : cases) {
      ASSERT_FALSE(o.error) << label;
      kc.emit(o.g, o.node, {});
    }
    for (const char* sm : {"sm_80", "sm_90"})
      EXPECT_EQ(assemble_ptx(kc.ptx(sm), sm, fmt::format("lowp_{}", dtype_name(t))), "") << dtype_name(t);
  }
}

}  // namespace
}  // namespace modelc::test
