#include "kernels/cpu/matmul_shape.h"

#include <fmt/format.h>

#include <algorithm>

#include "runtime/base/tensor.h"

namespace modelc::kernels {

void MatmulShape::offsets(int64_t bi, int64_t& oa, int64_t& ob) const {
  oa = ob = 0;
  for (size_t k = batch.size(); k-- > 0;) {
    const int64_t i = bi % batch[k];
    bi /= batch[k];
    oa += i * stride_a[k], ob += i * stride_b[k];
  }
}

MatmulShape analyze_matmul(const LibCall& c) {
  using rt::shape_str;
  const TensorArg& a = c.in(0);
  const TensorArg& b = c.in(1);
  const TensorArg& out = c.out(0);
  if (a.rank() == 0 || b.rank() == 0)
    c.fail(fmt::format("operands must have rank >= 1, got {} @ {}", shape_str(a.shape), shape_str(b.shape)));
  MatmulShape s;
  std::vector<int64_t> sa = a.shape, sb = b.shape;
  s.vec_a = sa.size() == 1;
  s.vec_b = sb.size() == 1;
  if (s.vec_a) sa.insert(sa.begin(), 1);
  if (s.vec_b) sb.push_back(1);
  s.M = sa[sa.size() - 2], s.K = sa.back(), s.N = sb.back();
  const std::string mismatch = fmt::format("shape mismatch: {} @ {}", shape_str(a.shape), shape_str(b.shape));
  if (sb[sb.size() - 2] != s.K) c.fail(mismatch + " (inner dimensions differ)");
  const std::vector<int64_t> ba(sa.begin(), sa.end() - 2), bb(sb.begin(), sb.end() - 2);
  const size_t nb = std::max(ba.size(), bb.size());
  s.batch.assign(nb, 1);
  for (size_t k = 0; k < nb; ++k) {
    const int64_t da = k + ba.size() >= nb ? ba[k + ba.size() - nb] : 1;
    const int64_t db = k + bb.size() >= nb ? bb[k + bb.size() - nb] : 1;
    if (da != db && da != 1 && db != 1) c.fail(mismatch + " (batch dimensions do not broadcast)");
    s.batch[k] = da == 1 ? db : da;
  }
  std::vector<int64_t> want = s.batch;
  if (!s.vec_a) want.push_back(s.M);
  if (!s.vec_b) want.push_back(s.N);
  if (out.shape != want)
    c.fail(fmt::format("output has shape {}, expected {} for {} @ {}", shape_str(out.shape), shape_str(want), shape_str(a.shape),
                       shape_str(b.shape)));
  s.channels = out.rank() == 0 ? 1 : out.dim(-1);
  for (int64_t d : s.batch) s.nbatch *= d;
  int64_t na = 1;
  for (int64_t d : ba) na *= d;
  s.a_folds = bb.empty() && na == s.nbatch;
  s.stride_a.assign(nb, 0);
  s.stride_b.assign(nb, 0);
  int64_t st = s.M * s.K;
  for (size_t k = ba.size(); k-- > 0;) {
    if (ba[k] != 1) s.stride_a[k + nb - ba.size()] = st;
    st *= ba[k];
  }
  st = s.K * s.N;
  for (size_t k = bb.size(); k-- > 0;) {
    if (bb[k] != 1) s.stride_b[k + nb - bb.size()] = st;
    st *= bb[k];
  }
  return s;
}

}  // namespace modelc::kernels
