// Tests of the shape and data-movement ops: their shape rules on symbolic shapes (every
// error path with its exact message) and their references on random inputs and shapes,
// against naive computations written here independently of the op implementations.
#include <algorithm>
#include <functional>

#include "tests/ir/op_harness.h"

namespace modelc::test {
namespace {

// The type of output k, failing the test if the shape rule refused.
TensorType type_of(const OneOp& o, size_t k = 0) {
  EXPECT_FALSE(o.error.has_value()) << o.error->message;
  return o.error ? TensorType{} : o.outputs().at(k);
}

// Calls f on every multi-index of `shape`, in row-major order.
void for_each_index(const std::vector<int64_t>& shape, const std::function<void(const std::vector<int64_t>&)>& f) {
  for (int64_t d : shape)
    if (d == 0) return;
  std::vector<int64_t> idx(shape.size(), 0);
  while (true) {
    f(idx);
    size_t k = shape.size();
    while (k > 0 && ++idx[k - 1] == shape[k - 1]) idx[--k] = 0;
    if (k == 0) return;
  }
}

double at(const RefTensor& t, const std::vector<int64_t>& idx) { return t[offset(t.shape, idx)]; }

// --- registry entries -----------------------------------------------------------------

TEST(ShapeOps, RegistryEntries) {
  struct E { OpKind k; const char* sig; FusionKind f; };
  const E entries[] = {
      {OpKind::Matmul, "a: tensor, b: tensor", FusionKind::Opaque},
      {OpKind::Transpose, "x: tensor, dim0: int = -2, dim1: int = -1", FusionKind::Injective},
      {OpKind::Permute, "x: tensor, dims: ints", FusionKind::Injective},
      {OpKind::Reshape, "x: tensor, shape: shape", FusionKind::Injective},
      {OpKind::BroadcastTo, "x: tensor, shape: shape", FusionKind::Broadcast},
      {OpKind::Slice, "x: tensor, axis: int, start: int, end: int", FusionKind::Injective},
      {OpKind::Concat, "xs: tensors, axis: int = 0", FusionKind::Injective},
      {OpKind::Split, "x: tensor, sections: int, axis: int = -1", FusionKind::Injective}};
  for (const E& e : entries) {
    const OpInfo& op = op_info(e.k);
    EXPECT_EQ(op.signature_text, e.sig) << op.name;
    EXPECT_EQ(op.fusion, e.f) << op.name;
    EXPECT_FALSE(op.summary.empty()) << op.name;
    EXPECT_TRUE(op.infer && op.reference) << op.name;
    EXPECT_EQ(OpRegistry::get().find(op.name), &op);
  }
}

// --- matmul ---------------------------------------------------------------------------

TEST(ShapeMatmul, Rule) {
  EXPECT_EQ(type_of(build_op(OpKind::Matmul, {f32({B, 784}), f32({784, 512})})), f32({B, 512}));
  EXPECT_EQ(type_of(build_op(OpKind::Matmul, {f32({B, T, C}), f32({C, C * 4})})), f32({B, T, C * 4}));
  EXPECT_EQ(type_of(build_op(OpKind::Matmul, {f32({B, 1, 3, 4}), f32({5, 4, 6})})), f32({B, 5, 3, 6}));
  EXPECT_EQ(type_of(build_op(OpKind::Matmul, {f32({B, T, C}), f32({B, C, T})})), f32({B, T, T}));
  // 1-D operands: promoted, and the added dim dropped
  EXPECT_EQ(type_of(build_op(OpKind::Matmul, {f32({C}), f32({C, 6})})), f32({6}));
  EXPECT_EQ(type_of(build_op(OpKind::Matmul, {f32({B, 3, C}), f32({C})})), f32({B, 3}));
  EXPECT_EQ(type_of(build_op(OpKind::Matmul, {f32({C}), f32({B, C, 2})})), f32({B, 2}));
  EXPECT_EQ(type_of(build_op(OpKind::Matmul, {f32({C}), f32({C})})), f32({}));
  EXPECT_EQ(type_of(build_op(OpKind::Matmul, {tt(DType::BF16, {2, 3}), tt(DType::BF16, {3, 4})})),
            tt(DType::BF16, {2, 4}));
}

TEST(ShapeMatmul, Errors) {
  expect_error(build_op(OpKind::Matmul, {f32({B, 784}), f32({512, 10})}),
               "matmul shape mismatch: f32[B,784] @ f32[512,10] (inner dimensions 784 and 512 differ)", 1);
  expect_error(build_op(OpKind::Matmul, {f32({C}), f32({T})}), "matmul shape mismatch: f32[C] @ f32[T] (inner dimensions C and T differ)", 1);
  expect_error(build_op(OpKind::Matmul, {f32({2, 3, 4}), f32({5, 4, 6})}),
               "matmul shape mismatch: f32[2,3,4] @ f32[5,4,6]", -1);
  expect_error(build_op(OpKind::Matmul, {f32({B, 3, 4}), f32({T, 4, 6})}),
               "matmul shape mismatch: f32[B,3,4] @ f32[T,4,6]", -1);
  expect_error(build_op(OpKind::Matmul, {f32({3, 4}), tt(DType::F16, {4, 5})}),
               "dtype mismatch in matmul: f32[3,4] and f16[4,5]", -1);
  expect_error(build_op(OpKind::Matmul, {f32({}), f32({3})}), "matmul needs tensors of rank >= 1, got f32[]", 0);
  expect_error(build_op(OpKind::Matmul, {f32({3}), f32({})}), "matmul needs tensors of rank >= 1, got f32[]", 1);
  expect_error(build_op(OpKind::Matmul, {tt(DType::I32, {3, 4}), tt(DType::I32, {4, 5})}),
               "matmul needs float tensors, got i32[3,4]", 0);
}

TEST(ShapeMatmul, Reference) {
  for (int trial = 0; trial < 40; ++trial) {
    int64_t M = rnd(1, 4), K = rnd(1, 5), N = rnd(1, 4);
    // batch dims of either side, with random 1s to broadcast
    std::vector<int64_t> batch = random_shape(rnd(0, 2), 2, 3);
    auto side_batch = [&] {
      size_t keep = static_cast<size_t>(rnd(0, static_cast<int64_t>(batch.size())));
      std::vector<int64_t> b(batch.end() - static_cast<int64_t>(keep), batch.end());
      for (int64_t& d : b)
        if (rnd(0, 2) == 0) d = 1;
      return b;
    };
    std::vector<int64_t> ab = side_batch(), bb = side_batch();
    bool vec_a = rnd(0, 4) == 0, vec_b = rnd(0, 4) == 0;
    std::vector<int64_t> as = ab, bs = bb;
    if (vec_a) as = {K}; else { as.push_back(M); as.push_back(K); }
    if (vec_b) bs = {K}; else { bs.push_back(K); bs.push_back(N); }
    // declare a's leading batch dim symbolic when b has nothing to broadcast it against
    Shape ad = to_dims(as);
    if (!vec_a && ab.size() > (vec_b ? 0 : bb.size())) ad[0] = B;
    OneOp o = build_op(OpKind::Matmul, {f32(ad), f32(to_dims(bs))});
    ASSERT_FALSE(o.error) << o.error->message;
    RefTensor a = random_tensor(DType::F32, as), b = random_tensor(DType::F32, bs);
    RefTensor got = run_op(o, {a, b})[0];

    // naive: every output element of the promoted [batch..., M, N], with each operand's
    // batch index aligned right (size-1 dims repeat)
    std::vector<int64_t> ob;
    size_t nb = std::max(vec_a ? 0 : ab.size(), vec_b ? 0 : bb.size());
    for (size_t i = 0; i < nb; ++i) {
      auto dim_of = [&](const std::vector<int64_t>& s, bool vec) -> int64_t {
        if (vec || i + s.size() < nb) return 1;
        return s[i + s.size() - nb];
      };
      ob.push_back(std::max(dim_of(ab, vec_a), dim_of(bb, vec_b)));
    }
    std::vector<int64_t> full = ob;
    full.push_back(vec_a ? 1 : M);
    full.push_back(vec_b ? 1 : N);
    std::vector<int64_t> want_shape = ob;
    if (!vec_a) want_shape.push_back(M);
    if (!vec_b) want_shape.push_back(N);
    RefTensor want(DType::F32, want_shape);
    int64_t flat = 0;
    for_each_index(full, [&](const std::vector<int64_t>& idx) {
      auto pick = [&](const std::vector<int64_t>& sb) {
        std::vector<int64_t> r;
        for (size_t i = 0; i < sb.size(); ++i) r.push_back(sb[i] == 1 ? 0 : idx[nb - sb.size() + i]);
        return r;
      };
      double acc = 0;
      for (int64_t k = 0; k < K; ++k) {
        std::vector<int64_t> ia = vec_a ? std::vector<int64_t>{k} : pick(ab);
        if (!vec_a) { ia.push_back(idx[nb]); ia.push_back(k); }
        std::vector<int64_t> ib = vec_b ? std::vector<int64_t>{k} : pick(bb);
        if (!vec_b) { ib.push_back(k); ib.push_back(idx[nb + 1]); }
        acc += at(a, ia) * at(b, ib);
      }
      want[flat++] = acc;
    });
    expect_near(got, want, kTol, "matmul trial " + std::to_string(trial));
  }
}

// --- transpose and permute ------------------------------------------------------------

TEST(ShapeTranspose, Rule) {
  OneOp o = build_op(OpKind::Transpose, {f32({B, T, C})});
  EXPECT_EQ(type_of(o), f32({B, C, T}));
  EXPECT_EQ(o.attrs().i("dim0"), 1);
  EXPECT_EQ(o.attrs().i("dim1"), 2);
  OneOp p = build_op(OpKind::Transpose, {f32({B, T, C})}, attrs({{"dim0", int64_t{0}}, {"dim1", int64_t{-1}}}));
  EXPECT_EQ(type_of(p), f32({C, T, B}));
  EXPECT_EQ(p.attrs().i("dim1"), 2);
  EXPECT_EQ(type_of(build_op(OpKind::Transpose, {f32({B, T})}, attrs({{"dim0", int64_t{1}}, {"dim1", int64_t{1}}}))),
            f32({B, T}));
}

TEST(ShapeTranspose, Errors) {
  expect_error(build_op(OpKind::Transpose, {f32({B})}), "transpose dim0 -2 is out of range for f32[B]", -1, "dim0");
  expect_error(build_op(OpKind::Transpose, {f32({B, T})}, attrs({{"dim0", int64_t{0}}, {"dim1", int64_t{2}}})),
               "transpose dim1 2 is out of range for f32[B,T]", -1, "dim1");
}

TEST(ShapeTranspose, Reference) {
  for (int trial = 0; trial < 30; ++trial) {
    int rank = static_cast<int>(rnd(1, 4));
    std::vector<int64_t> s = random_shape(rank);
    int64_t d0 = rnd(-rank, rank - 1), d1 = rnd(-rank, rank - 1);
    OneOp o = build_op(OpKind::Transpose, {f32(to_dims(s))}, attrs({{"dim0", d0}, {"dim1", d1}}));
    ASSERT_FALSE(o.error) << o.error->message;
    RefTensor x = random_tensor(DType::F32, s);
    size_t a = static_cast<size_t>((d0 + rank) % rank), b = static_cast<size_t>((d1 + rank) % rank);
    std::vector<int64_t> ws = s;
    std::swap(ws[a], ws[b]);
    RefTensor want(DType::F32, ws);
    int64_t flat = 0;
    for_each_index(ws, [&](const std::vector<int64_t>& idx) {
      std::vector<int64_t> src = idx;
      std::swap(src[a], src[b]);
      want[flat++] = at(x, src);
    });
    expect_near(run_op(o, {x})[0], want, kTol, "transpose");
  }
}

TEST(ShapePermute, Rule) {
  OneOp o = build_op(OpKind::Permute, {f32({B, T, C})}, attrs({{"dims", Ints{2, 0, -2}}}));
  EXPECT_EQ(type_of(o), f32({C, B, T}));
  EXPECT_EQ(o.attrs().ints("dims"), (Ints{2, 0, 1}));
  EXPECT_EQ(type_of(build_op(OpKind::Permute, {f32({})}, attrs({{"dims", Ints{}}}))), f32({}));
}

TEST(ShapePermute, Errors) {
  expect_error(build_op(OpKind::Permute, {f32({B, T, C})}, attrs({{"dims", Ints{0, 1}}})),
               "permute needs 3 dims for f32[B,T,C], got [0, 1]", -1, "dims");
  expect_error(build_op(OpKind::Permute, {f32({B, T, C})}, attrs({{"dims", Ints{0, 3, 1}}})),
               "permute dim 3 is out of range for f32[B,T,C]", -1, "dims");
  expect_error(build_op(OpKind::Permute, {f32({B, T, C})}, attrs({{"dims", Ints{0, -3, 1}}})),
               "permute dims [0, -3, 1] are not a permutation of the 3 axes of f32[B,T,C]", -1, "dims");
}

TEST(ShapePermute, Reference) {
  for (int trial = 0; trial < 30; ++trial) {
    int rank = static_cast<int>(rnd(0, 4));
    std::vector<int64_t> s = random_shape(rank);
    Ints perm;
    for (int i = 0; i < rank; ++i) perm.push_back(i);
    std::shuffle(perm.begin(), perm.end(), rng());
    Ints given = perm;
    for (int64_t& d : given)
      if (rnd(0, 1)) d -= rank;
    OneOp o = build_op(OpKind::Permute, {f32(to_dims(s))}, attrs({{"dims", given}}));
    ASSERT_FALSE(o.error) << o.error->message;
    RefTensor x = random_tensor(DType::F32, s);
    std::vector<int64_t> ws;
    for (int64_t d : perm) ws.push_back(s[static_cast<size_t>(d)]);
    RefTensor want(DType::F32, ws);
    int64_t flat = 0;
    for_each_index(ws, [&](const std::vector<int64_t>& idx) {
      std::vector<int64_t> src(s.size());
      for (size_t k = 0; k < perm.size(); ++k) src[static_cast<size_t>(perm[k])] = idx[k];
      want[flat++] = at(x, src);
    });
    expect_near(run_op(o, {x})[0], want, kTol, "permute");
  }
}

// --- reshape and broadcast_to ---------------------------------------------------------

TEST(ShapeReshape, Rule) {
  EXPECT_EQ(type_of(build_op(OpKind::Reshape, {f32({B, 784})}, attrs({{"shape", Shape{B, 28, 28}}}))),
            f32({B, 28, 28}));
  OneOp o = build_op(OpKind::Reshape, {f32({B, 28, 28})}, attrs({{"shape", Shape{B, -1}}}));
  EXPECT_EQ(type_of(o), f32({B, 784}));
  EXPECT_EQ(o.attrs().shape("shape"), (Shape{B, 784}));
  EXPECT_EQ(type_of(build_op(OpKind::Reshape, {f32({B, T, C})}, attrs({{"shape", Shape{-1, C}}}))),
            f32({B * T, C}));
  EXPECT_EQ(type_of(build_op(OpKind::Reshape, {f32({B, T})}, attrs({{"shape", Shape{T, -1}}}))), f32({T, B}));
  EXPECT_EQ(type_of(build_op(OpKind::Reshape, {f32({B, 4})}, attrs({{"shape", Shape{-1}}}))), f32({B * 4}));
  EXPECT_EQ(type_of(build_op(OpKind::Reshape, {f32({1})}, attrs({{"shape", Shape{}}}))), f32({}));
  EXPECT_EQ(type_of(build_op(OpKind::Reshape, {f32({B, 6 * C})}, attrs({{"shape", Shape{B, 2, 3 * C}}}))),
            f32({B, 2, 3 * C}));
}

TEST(ShapeReshape, Errors) {
  expect_error(build_op(OpKind::Reshape, {f32({B, 784})}, attrs({{"shape", Shape{B, 28, 27}}})),
               "reshape cannot change the number of elements: f32[B,784] has 784*B, [B,28,27] has 756*B", -1, "shape");
  expect_error(build_op(OpKind::Reshape, {f32({B, 10})}, attrs({{"shape", Shape{-1, -1}}})),
               "reshape target [-1,-1] has more than one -1", -1, "shape");
  expect_error(build_op(OpKind::Reshape, {f32({B, 10})}, attrs({{"shape", Shape{2, -3}}})),
               "reshape target [2,-3] has a negative dimension", -1, "shape");
  expect_error(build_op(OpKind::Reshape, {f32({B, 10})}, attrs({{"shape", Shape{3, -1}}})),
               "reshape cannot infer the -1 in [3,-1]: f32[B,10] has 10*B, not a multiple of 3", -1, "shape");
  expect_error(build_op(OpKind::Reshape, {f32({B, 10})}, attrs({{"shape", Shape{T, -1}}})),
               "reshape cannot infer the -1 in [T,-1]: f32[B,10] has 10*B, not a multiple of T", -1, "shape");
}

TEST(ShapeReshape, Reference) {
  for (int trial = 0; trial < 20; ++trial) {
    std::vector<int64_t> s = random_shape(rnd(1, 4));
    int64_t n = RefTensor::numel_of(s);
    // a random factorisation of n, with one entry possibly left to -1
    std::vector<int64_t> target;
    for (int64_t rest = n; rest > 1;) {
      int64_t f = rnd(2, rest);
      while (f > 1 && rest % f) --f;
      if (f == 1) f = rest;
      target.push_back(f);
      rest /= f;
    }
    if (rnd(0, 1)) target.push_back(1);
    Shape given = to_dims(target);
    if (!target.empty() && rnd(0, 1)) given[static_cast<size_t>(rnd(0, static_cast<int64_t>(target.size()) - 1))] = -1;
    OneOp o = build_op(OpKind::Reshape, {f32(to_dims(s))}, attrs({{"shape", given}}));
    ASSERT_FALSE(o.error) << o.error->message;
    RefTensor x = random_tensor(DType::F32, s);
    RefTensor want(DType::F32, target);
    for (int64_t i = 0; i < n; ++i) want[i] = x[i];  // row-major order is kept
    expect_near(run_op(o, {x})[0], want, kTol, "reshape");
  }
}

TEST(ShapeBroadcastTo, Rule) {
  EXPECT_EQ(type_of(build_op(OpKind::BroadcastTo, {f32({3, 1})}, attrs({{"shape", Shape{B, 3, 4}}}))),
            f32({B, 3, 4}));
  EXPECT_EQ(type_of(build_op(OpKind::BroadcastTo, {f32({})}, attrs({{"shape", Shape{2, 3}}}))), f32({2, 3}));
  EXPECT_EQ(type_of(build_op(OpKind::BroadcastTo, {f32({B, T})}, attrs({{"shape", Shape{B, T}}}))), f32({B, T}));
}

TEST(ShapeBroadcastTo, Errors) {
  expect_error(build_op(OpKind::BroadcastTo, {f32({3, 4})}, attrs({{"shape", Shape{5, 4}}})),
               "broadcast_to cannot broadcast f32[3,4] to [5,4] (dimension 2 from the end: 3 vs 5)", -1, "shape");
  expect_error(build_op(OpKind::BroadcastTo, {f32({3, 4})}, attrs({{"shape", Shape{4}}})),
               "broadcast_to cannot broadcast f32[3,4] to [4]", -1, "shape");
  expect_error(build_op(OpKind::BroadcastTo, {f32({B, 4})}, attrs({{"shape", Shape{1, 4}}})),
               "broadcast_to cannot broadcast f32[B,4] to [1,4]", -1, "shape");
}

TEST(ShapeBroadcastTo, Reference) {
  for (int trial = 0; trial < 30; ++trial) {
    std::vector<int64_t> target = random_shape(rnd(0, 4));
    size_t keep = static_cast<size_t>(rnd(0, static_cast<int64_t>(target.size())));
    std::vector<int64_t> s(target.end() - static_cast<int64_t>(keep), target.end());
    for (int64_t& d : s)
      if (rnd(0, 1)) d = 1;
    OneOp o = build_op(OpKind::BroadcastTo, {f32(to_dims(s))}, attrs({{"shape", to_dims(target)}}));
    ASSERT_FALSE(o.error) << o.error->message;
    RefTensor x = random_tensor(DType::F32, s);
    RefTensor want(DType::F32, target);
    int64_t flat = 0;
    for_each_index(target, [&](const std::vector<int64_t>& idx) {
      std::vector<int64_t> src;
      for (size_t k = 0; k < s.size(); ++k) src.push_back(s[k] == 1 ? 0 : idx[target.size() - s.size() + k]);
      want[flat++] = at(x, src);
    });
    expect_near(run_op(o, {x})[0], want, kTol, "broadcast_to");
  }
}

// --- slice, concat, split -------------------------------------------------------------

Attrs slice_attrs(int64_t axis, int64_t start, int64_t end) {
  return attrs({{"axis", axis}, {"start", start}, {"end", end}});
}

TEST(ShapeSlice, Rule) {
  OneOp o = build_op(OpKind::Slice, {f32({B, 10})}, slice_attrs(-1, 2, -1));
  EXPECT_EQ(type_of(o), f32({B, 7}));
  EXPECT_EQ(o.attrs().i("axis"), 1);
  EXPECT_EQ(o.attrs().i("start"), 2);
  EXPECT_EQ(o.attrs().i("end"), 9);
  EXPECT_EQ(type_of(build_op(OpKind::Slice, {f32({B, 10})}, slice_attrs(1, -10, 10))), f32({B, 10}));
  EXPECT_EQ(type_of(build_op(OpKind::Slice, {f32({B, 10})}, slice_attrs(1, 4, 4))), f32({B, 0}));
  // a symbolic extent: non-negative bounds are recorded unchecked
  EXPECT_EQ(type_of(build_op(OpKind::Slice, {f32({B, 10})}, slice_attrs(0, 1, 3))), f32({2, 10}));
}

TEST(ShapeSlice, Errors) {
  expect_error(build_op(OpKind::Slice, {f32({B, 10})}, slice_attrs(2, 0, 1)),
               "slice axis 2 is out of range for f32[B,10]", -1, "axis");
  expect_error(build_op(OpKind::Slice, {f32({B, 10})}, slice_attrs(1, 11, 11)),
               "slice start 11 is out of range for axis 1 of f32[B,10]", -1, "start");
  expect_error(build_op(OpKind::Slice, {f32({B, 10})}, slice_attrs(1, -11, 3)),
               "slice start -11 is out of range for axis 1 of f32[B,10]", -1, "start");
  expect_error(build_op(OpKind::Slice, {f32({B, 10})}, slice_attrs(1, 2, 12)),
               "slice end 12 is out of range for axis 1 of f32[B,10] (start 2)", -1, "end");
  expect_error(build_op(OpKind::Slice, {f32({B, 10})}, slice_attrs(1, 5, 3)),
               "slice end 3 is out of range for axis 1 of f32[B,10] (start 5)", -1, "end");
  expect_error(build_op(OpKind::Slice, {f32({B, 10})}, slice_attrs(0, -2, 4)),
               "slice [-2:4] on axis 0 of f32[B,10] needs non-negative bounds: the extent B is symbolic", -1, "start");
  expect_error(build_op(OpKind::Slice, {f32({B, 10})}, slice_attrs(0, 0, -1)),
               "slice [0:-1] on axis 0 of f32[B,10] needs non-negative bounds: the extent B is symbolic", -1, "end");
  expect_error(build_op(OpKind::Slice, {f32({B, 10})}, slice_attrs(0, 3, 1)),
               "slice end 1 is before start 3 on axis 0 of f32[B,10]", -1, "end");
}

TEST(ShapeSlice, Reference) {
  for (int trial = 0; trial < 30; ++trial) {
    int rank = static_cast<int>(rnd(1, 4));
    std::vector<int64_t> s = random_shape(rank, 1, 5);
    int64_t axis = rnd(0, rank - 1), n = s[static_cast<size_t>(axis)];
    int64_t start = rnd(0, n), end = rnd(start, n);
    int64_t gs = start, ge = end;  // given, possibly from the end
    if (rnd(0, 1) && start < n) gs -= n;
    if (rnd(0, 1) && end < n) ge -= n;
    OneOp o = build_op(OpKind::Slice, {f32(to_dims(s))}, slice_attrs(axis, gs, ge));
    ASSERT_FALSE(o.error) << o.error->message;
    RefTensor x = random_tensor(DType::F32, s);
    std::vector<int64_t> ws = s;
    ws[static_cast<size_t>(axis)] = end - start;
    RefTensor want(DType::F32, ws);
    int64_t flat = 0;
    for_each_index(ws, [&](std::vector<int64_t> idx) {
      idx[static_cast<size_t>(axis)] += start;
      want[flat++] = at(x, idx);
    });
    expect_near(run_op(o, {x})[0], want, kTol, "slice");
  }
}

TEST(ShapeSlice, SymbolicBoundsCheckedAtRunTime) {
  OneOp o = build_op(OpKind::Slice, {f32({B, 2})}, slice_attrs(0, 1, 3));
  ASSERT_FALSE(o.error);
  RefTensor x = random_tensor(DType::F32, {4, 2});
  RefTensor want(DType::F32, {2, 2});
  for (int64_t i = 0; i < 4; ++i) want[i] = x[i + 2];
  expect_near(run_op(o, {x})[0], want, kTol);
  EXPECT_THROW(run_op(o, {random_tensor(DType::F32, {2, 2})}), UserError);
}

TEST(ShapeConcat, Rule) {
  EXPECT_EQ(type_of(build_op(OpKind::Concat, {f32({B, 3}), f32({B, 5})}, attrs({{"axis", int64_t{-1}}}))),
            f32({B, 8}));
  OneOp o = build_op(OpKind::Concat, {f32({B, C}), f32({T, C}), f32({2, C})});
  EXPECT_EQ(type_of(o), f32({B + T + 2, C}));
  EXPECT_EQ(o.attrs().i("axis"), 0);
  EXPECT_EQ(type_of(build_op(OpKind::Concat, {f32({B})})), f32({B}));
}

TEST(ShapeConcat, Errors) {
  expect_error(build_op(OpKind::Concat, {}), "concat needs at least one tensor");
  expect_error(build_op(OpKind::Concat, {f32({})}), "concat needs tensors of rank >= 1, got f32[]", 0);
  expect_error(build_op(OpKind::Concat, {f32({B, 3})}, attrs({{"axis", int64_t{2}}})),
               "concat axis 2 is out of range for f32[B,3]", -1, "axis");
  expect_error(build_op(OpKind::Concat, {f32({B, 3}), f32({B, 3}), tt(DType::F16, {B, 3})}, attrs({{"axis", int64_t{1}}})),
               "dtype mismatch in concat: f32[B,3] and f16[B,3]", 2);
  expect_error(build_op(OpKind::Concat, {f32({B, 3}), f32({3})}),
               "concat needs tensors of the same rank: f32[B,3] and f32[3]", 1);
  expect_error(build_op(OpKind::Concat, {f32({B, 3}), f32({T, 5})}, attrs({{"axis", int64_t{1}}})),
               "concat shape mismatch on axis 0: f32[B,3] and f32[T,5]", 1);
}

TEST(ShapeConcat, Reference) {
  for (int trial = 0; trial < 30; ++trial) {
    int rank = static_cast<int>(rnd(1, 4));
    std::vector<int64_t> s = random_shape(rank);
    auto axis = static_cast<size_t>(rnd(0, rank - 1));
    int count = static_cast<int>(rnd(1, 4));
    std::vector<std::optional<TensorType>> types;
    std::vector<RefTensor> xs;
    std::vector<int64_t> starts;  // where each input starts along the axis
    int64_t total = 0;
    for (int i = 0; i < count; ++i) {
      std::vector<int64_t> si = s;
      si[axis] = rnd(0, 3);
      starts.push_back(total);
      total += si[axis];
      types.push_back(f32(to_dims(si)));
      xs.push_back(random_tensor(DType::F32, si));
    }
    OneOp o = build_op(OpKind::Concat, types, attrs({{"axis", static_cast<int64_t>(axis)}}));
    ASSERT_FALSE(o.error) << o.error->message;
    std::vector<int64_t> ws = s;
    ws[axis] = total;
    RefTensor want(DType::F32, ws);
    int64_t flat = 0;
    for_each_index(ws, [&](std::vector<int64_t> idx) {
      size_t i = 0;
      while (idx[axis] >= starts[i] + xs[i].shape[axis]) ++i;
      idx[axis] -= starts[i];
      want[flat++] = at(xs[i], idx);
    });
    expect_near(run_op(o, xs)[0], want, kTol, "concat");
  }
}

TEST(ShapeSplit, Rule) {
  OneOp o = build_op(OpKind::Split, {f32({B, T, C * 3})}, attrs({{"sections", int64_t{3}}}));
  ASSERT_FALSE(o.error);
  ASSERT_EQ(o.outputs().size(), 3u);
  for (const TensorType& t : o.outputs()) EXPECT_EQ(t, f32({B, T, C}));
  EXPECT_EQ(o.attrs().i("axis"), 2);
  OneOp p = build_op(OpKind::Split, {f32({B, 6 * C})}, attrs({{"sections", int64_t{4}}, {"axis", int64_t{0}}}));
  expect_error(p, "split cannot divide axis 0 of f32[B,6*C] (B) into 4 equal sections", -1, "sections");
  EXPECT_EQ(type_of(build_op(OpKind::Split, {f32({B, 6 * C})}, attrs({{"sections", int64_t{2}}})), 1), f32({B, 3 * C}));
  EXPECT_EQ(build_op(OpKind::Split, {f32({B, 6})}, attrs({{"sections", int64_t{1}}})).outputs().size(), 1u);
}

TEST(ShapeSplit, Errors) {
  expect_error(build_op(OpKind::Split, {f32({B, 10})}, attrs({{"sections", int64_t{0}}})),
               "split needs sections >= 1, got 0", -1, "sections");
  expect_error(build_op(OpKind::Split, {f32({B, 10})}, attrs({{"sections", int64_t{3}}})),
               "split cannot divide axis 1 of f32[B,10] (10) into 3 equal sections", -1, "sections");
  expect_error(build_op(OpKind::Split, {f32({B, 10})}, attrs({{"sections", int64_t{2}}, {"axis", int64_t{-3}}})),
               "split axis -3 is out of range for f32[B,10]", -1, "axis");
}

TEST(ShapeSplit, Reference) {
  for (int trial = 0; trial < 30; ++trial) {
    int rank = static_cast<int>(rnd(1, 4));
    std::vector<int64_t> s = random_shape(rank);
    auto axis = static_cast<size_t>(rnd(0, rank - 1));
    int64_t sections = rnd(1, 3), part = s[axis];
    s[axis] = part * sections;
    Shape decl = to_dims(s);
    if (axis != 0) decl[0] = B;  // a symbolic dim away from the axis
    OneOp o = build_op(OpKind::Split, {f32(decl)}, attrs({{"sections", sections}, {"axis", static_cast<int64_t>(axis)}}));
    ASSERT_FALSE(o.error) << o.error->message;
    RefTensor x = random_tensor(DType::F32, s);
    std::vector<RefTensor> got = run_op(o, {x});
    ASSERT_EQ(got.size(), static_cast<size_t>(sections));
    std::vector<int64_t> ws = s;
    ws[axis] = part;
    for (int64_t k = 0; k < sections; ++k) {
      RefTensor want(DType::F32, ws);
      int64_t flat = 0;
      for_each_index(ws, [&](std::vector<int64_t> idx) {
        idx[axis] += k * part;
        want[flat++] = at(x, idx);
      });
      expect_near(got[static_cast<size_t>(k)], want, kTol, "split section " + std::to_string(k));
    }
  }
}

}  // namespace
}  // namespace modelc::test
