// Finite-difference checks of the shape and data-movement gradient rules: matmul (batch
// broadcasting, 1-D operands), transpose, permute, reshape, broadcast_to, slice, concat,
// split, on fresh random shapes and attributes.
#include "tests/grad/grad_check.h"

namespace modelc::test {
namespace {

TEST(GradShape, MatmulWithBatchBroadcastingAndVectors) {
  for (int rep = 0; rep < 8; ++rep) {
    int64_t M = rnd(1, 4), K = rnd(1, 4), N = rnd(1, 4);
    std::vector<int64_t> batch = random_shape(rnd(0, 2), 1, 3), ba = batch, bb = batch;
    for (int64_t& d : ba) if (rnd(0, 2) == 0) d = 1;
    for (int64_t& d : bb) if (rnd(0, 2) == 0) d = 1;
    if (!bb.empty() && rnd(0, 1)) bb.erase(bb.begin());
    std::vector<int64_t> sa = ba, sb = bb;
    sa.push_back(M), sa.push_back(K);
    sb.push_back(K), sb.push_back(N);
    check_op_grad(OpKind::Matmul, {rand_f(sa), rand_f(sb)});
  }
  int64_t K = rnd(1, 4);
  check_op_grad(OpKind::Matmul, {rand_f({K}), rand_f({K})});
  check_op_grad(OpKind::Matmul, {rand_f({K}), rand_f({rnd(1, 2), K, rnd(1, 3)})});
  check_op_grad(OpKind::Matmul, {rand_f({rnd(1, 2), rnd(1, 3), K}), rand_f({K})});
}

TEST(GradShape, TransposePermuteReshapeBroadcastTo) {
  for (int rep = 0; rep < 5; ++rep) {
    auto s = random_shape(rnd(2, 4), 1, 4);
    int64_t r = static_cast<int64_t>(s.size());
    check_op_grad(OpKind::Transpose, {rand_f(s)}, attrs({{"dim0", rnd(-r, r - 1)}, {"dim1", rnd(-r, r - 1)}}));
    Ints perm(s.size());
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng());
    check_op_grad(OpKind::Permute, {rand_f(s)}, attrs({{"dims", perm}}));
    int64_t n = RefTensor::numel_of(s);
    check_op_grad(OpKind::Reshape, {rand_f(s)}, attrs({{"shape", Shape{Dim(n), Dim(1)}}}));
    std::vector<int64_t> small = s;
    for (int64_t& d : small) if (rnd(0, 1)) d = 1;
    Shape target = to_dims(s);
    target.insert(target.begin(), Dim(rnd(1, 3)));
    check_op_grad(OpKind::BroadcastTo, {rand_f(small)}, attrs({{"shape", target}}));
  }
}

TEST(GradShape, SliceConcatSplit) {
  for (int rep = 0; rep < 6; ++rep) {
    auto s = random_shape(rnd(1, 3), 1, 5);
    int64_t axis = rnd(0, static_cast<int64_t>(s.size()) - 1), n = s[static_cast<size_t>(axis)];
    int64_t start = rnd(0, n - 1), end = rnd(start + 1, n);
    check_op_grad(OpKind::Slice, {rand_f(s)}, attrs({{"axis", axis}, {"start", start}, {"end", end}}));
    std::vector<std::optional<RefTensor>> parts;
    for (int k = 0, m = static_cast<int>(rnd(1, 3)); k < m; ++k) {
      auto p = s;
      p[static_cast<size_t>(axis)] = rnd(1, 3);
      parts.push_back(rand_f(p));
    }
    check_op_grad(OpKind::Concat, parts, attrs({{"axis", axis - (rnd(0, 1) ? static_cast<int64_t>(s.size()) : 0)}}));
    int64_t sections = rnd(1, 3);
    auto t = s;
    t[static_cast<size_t>(axis)] = sections * rnd(1, 2);
    check_op_grad(OpKind::Split, {rand_f(t)}, attrs({{"sections", sections}, {"axis", axis}}));
  }
}

}  // namespace
}  // namespace modelc::test
