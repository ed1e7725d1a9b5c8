// Shape and data-movement ops: matmul, transpose, permute, reshape, broadcast_to, slice,
// concat and split.
//
// The shape rules work on symbolic dims and canonicalise their attributes (negative axes,
// a reshape's -1, a slice's negative bounds) so that later passes see one spelling. The
// references are plain index loops over row-major tensors.
#include <fmt/format.h>

#include <algorithm>

#include "compiler/ir/grads/grad_util.h"
#include "compiler/ir/op_examples.h"
#include "compiler/ir/op_registry.h"

namespace modelc {

namespace {

Dim numel(const Shape& s) {
  Dim n(1);
  for (const Dim& d : s) n = n * d;
  return n;
}

std::string ints_str(const Ints& v) { return attr_str(AttrValue(v)); }

// Normalises the axis attribute `name` of the op `op` against x; fails (blaming the
// attribute) when it is out of range.
bool axis_attr(InferCtx& c, const char* op, const char* name, const TensorType& x, int64_t& axis) {
  axis = c.attrs.i(name);
  int64_t given = axis;
  if (!normalize_axis(axis, x.rank())) {
    c.fail_attr(fmt::format("{} {} {} is out of range for {}", op, name, given, x.str()), name);
    return false;
  }
  c.attrs.set(name, axis);
  return true;
}

// out[i] = x[i permuted]: out dim k is x dim perm[k].
void ref_permute(const RefTensor& x, const std::vector<int64_t>& perm, RefTensor& out) {
  std::vector<int64_t> xs = x.strides(), idx;
  for (int64_t i = 0; i < out.numel(); ++i) {
    unravel(i, out.shape, idx);
    int64_t off = 0;
    for (size_t k = 0; k < perm.size(); ++k) off += idx[k] * xs[static_cast<size_t>(perm[k])];
    out[i] = x[off];
  }
}

// The offset in `x` of the out multi-index `idx` under numpy broadcasting (x's dims align
// to the right of idx; size-1 dims repeat). The last `skip_tail` dims are left at 0.
int64_t broadcast_offset(const RefTensor& x, const std::vector<int64_t>& xs,
                         const std::vector<int64_t>& idx, size_t skip_tail = 0) {
  int64_t off = 0;
  size_t lead = idx.size() - x.shape.size();
  for (size_t k = 0; k + skip_tail < x.shape.size(); ++k)
    if (x.shape[k] != 1) off += idx[lead + k] * xs[k];
  return off;
}

// --- shape rules ----------------------------------------------------------------------

void infer_matmul(InferCtx& c) {
  const TensorType& a = c.input(0);
  const TensorType& b = c.input(1);
  for (int i = 0; i < 2; ++i)
    if (c.input(i).rank() == 0)
      return c.fail("matmul needs tensors of rank >= 1, got " + c.input(i).str(), i);
  if (a.dtype != b.dtype) return c.fail(fmt::format("dtype mismatch in matmul: {} and {}", a.str(), b.str()));
  if (!is_float(a.dtype)) return c.fail("matmul needs float tensors, got " + a.str(), 0);
  // numpy: a 1-D left operand is a row [1,K], a 1-D right operand a column [K,1]; the
  // added dim is dropped from the result.
  Shape sa = a.shape, sb = b.shape;
  bool vec_a = sa.size() == 1, vec_b = sb.size() == 1;
  if (vec_a) sa.insert(sa.begin(), Dim(1));
  if (vec_b) sb.push_back(Dim(1));
  std::string mismatch = fmt::format("matmul shape mismatch: {} @ {}", a.str(), b.str());
  // The right operand is the one blamed: `x @ w` usually fails because of w's declaration.
  if (sa[sa.size() - 1] != sb[sb.size() - 2])
    return c.fail(fmt::format("{} (inner dimensions {} and {} differ)", mismatch, sa[sa.size() - 1].str(), sb[sb.size() - 2].str()), 1);
  auto batch = broadcast_shapes(Shape(sa.begin(), sa.end() - 2), Shape(sb.begin(), sb.end() - 2));
  if (!batch) return c.fail(mismatch);
  Shape out = *batch;
  if (!vec_a) out.push_back(sa[sa.size() - 2]);
  if (!vec_b) out.push_back(sb[sb.size() - 1]);
  c.out = {TensorType{a.dtype, out}};
}

void infer_transpose(InferCtx& c) {
  const TensorType& x = c.input(0);
  int64_t d0 = 0, d1 = 0;
  if (!axis_attr(c, "transpose", "dim0", x, d0) || !axis_attr(c, "transpose", "dim1", x, d1)) return;
  TensorType t = x;
  std::swap(t.shape[static_cast<size_t>(d0)], t.shape[static_cast<size_t>(d1)]);
  c.out = {t};
}

void infer_permute(InferCtx& c) {
  const TensorType& x = c.input(0);
  Ints dims = c.attrs.ints("dims");
  if (static_cast<int>(dims.size()) != x.rank())
    return c.fail_attr(fmt::format("permute needs {} dims for {}, got {}", x.rank(), x.str(), ints_str(dims)), "dims");
  std::vector<bool> seen(dims.size(), false);
  for (int64_t& d : dims) {
    int64_t given = d;
    if (!normalize_axis(d, x.rank()))
      return c.fail_attr(fmt::format("permute dim {} is out of range for {}", given, x.str()), "dims");
    if (seen[static_cast<size_t>(d)])
      return c.fail_attr(fmt::format("permute dims {} are not a permutation of the {} axes of {}",
                                     ints_str(c.attrs.ints("dims")), x.rank(), x.str()), "dims");
    seen[static_cast<size_t>(d)] = true;
  }
  TensorType t{x.dtype, {}};
  for (int64_t d : dims) t.shape.push_back(x.shape[static_cast<size_t>(d)]);
  c.attrs.set("dims", dims);
  c.out = {t};
}

void infer_reshape(InferCtx& c) {
  const TensorType& x = c.input(0);
  Shape target = c.attrs.shape("shape");
  int holes = 0;
  size_t hole = 0;
  Dim known(1);
  for (size_t i = 0; i < target.size(); ++i) {
    if (target[i] == Dim(-1)) { ++holes; hole = i; continue; }
    if (auto v = target[i].as_const(); v && *v < 0)
      return c.fail_attr(fmt::format("reshape target {} has a negative dimension", shape_str(target)), "shape");
    known = known * target[i];
  }
  if (holes > 1)
    return c.fail_attr(fmt::format("reshape target {} has more than one -1", shape_str(target)), "shape");
  Dim have = numel(x.shape);
  if (holes == 1) {
    auto q = Dim::divide(have, known);
    if (!q)
      return c.fail_attr(fmt::format("reshape cannot infer the -1 in {}: {} has {}, not a multiple of {}",
                                     shape_str(target), x.str(), have.str(), known.str()), "shape");
    target[hole] = *q;
  } else if (known != have) {
    return c.fail_attr(fmt::format("reshape cannot change the number of elements: {} has {}, {} has {}",
                                   x.str(), have.str(), shape_str(target), known.str()), "shape");
  }
  c.attrs.set("shape", target);
  c.out = {TensorType{x.dtype, target}};
}

void infer_broadcast_to(InferCtx& c) {
  const TensorType& x = c.input(0);
  const Shape& target = c.attrs.shape("shape");
  std::string why;
  auto r = broadcast_shapes(x.shape, target, &why);
  if (!r || *r != target) {
    std::string msg = fmt::format("broadcast_to cannot broadcast {} to {}", x.str(), shape_str(target));
    if (!r) msg += " (" + why + ")";
    return c.fail_attr(msg, "shape");
  }
  c.out = {TensorType{x.dtype, target}};
}

void infer_slice(InferCtx& c) {
  const TensorType& x = c.input(0);
  int64_t axis = 0;
  if (!axis_attr(c, "slice", "axis", x, axis)) return;
  const Dim& d = x.shape[static_cast<size_t>(axis)];
  int64_t start = c.attrs.i("start"), end = c.attrs.i("end");
  if (auto n = d.as_const()) {
    // Python-like: negative bounds count from the end; unlike Python they must then lie
    // in range (a silent clamp would hide a shape bug).
    int64_t s = start < 0 ? start + *n : start, e = end < 0 ? end + *n : end;
    if (s < 0 || s > *n)
      return c.fail_attr(fmt::format("slice start {} is out of range for axis {} of {}", start, axis, x.str()), "start");
    if (e < s || e > *n)
      return c.fail_attr(fmt::format("slice end {} is out of range for axis {} of {} (start {})", end, axis,
                                     x.str(), start), "end");
    start = s, end = e;
  } else {
    // A symbolic extent cannot be checked here; the reference checks it at run time.
    if (start < 0 || end < 0)
      return c.fail_attr(fmt::format("slice [{}:{}] on axis {} of {} needs non-negative bounds: the extent {} "
                                     "is symbolic", start, end, axis, x.str(), d.str()), start < 0 ? "start" : "end");
    if (end < start)
      return c.fail_attr(fmt::format("slice end {} is before start {} on axis {} of {}", end, start, axis, x.str()), "end");
  }
  c.attrs.set("start", start);
  c.attrs.set("end", end);
  TensorType t = x;
  t.shape[static_cast<size_t>(axis)] = Dim(end - start);
  c.out = {t};
}

void infer_concat(InferCtx& c) {
  if (c.in.empty()) return c.fail("concat needs at least one tensor");
  const TensorType& x = c.input(0);
  if (x.rank() == 0) return c.fail("concat needs tensors of rank >= 1, got " + x.str(), 0);
  int64_t axis = 0;
  if (!axis_attr(c, "concat", "axis", x, axis)) return;
  TensorType t = x;
  for (int i = 1; i < static_cast<int>(c.in.size()); ++i) {
    const TensorType& y = c.input(i);
    if (y.dtype != x.dtype) return c.fail(fmt::format("dtype mismatch in concat: {} and {}", x.str(), y.str()), i);
    if (y.rank() != x.rank())
      return c.fail(fmt::format("concat needs tensors of the same rank: {} and {}", x.str(), y.str()), i);
    for (int k = 0; k < x.rank(); ++k)
      if (k != axis && y.shape[static_cast<size_t>(k)] != x.shape[static_cast<size_t>(k)])
        return c.fail(fmt::format("concat shape mismatch on axis {}: {} and {}", k, x.str(), y.str()), i);
    t.shape[static_cast<size_t>(axis)] = t.shape[static_cast<size_t>(axis)] + y.shape[static_cast<size_t>(axis)];
  }
  c.out = {t};
}

void infer_split(InferCtx& c) {
  const TensorType& x = c.input(0);
  int64_t sections = c.attrs.i("sections");
  if (sections < 1) return c.fail_attr(fmt::format("split needs sections >= 1, got {}", sections), "sections");
  int64_t axis = 0;
  if (!axis_attr(c, "split", "axis", x, axis)) return;
  const Dim& d = x.shape[static_cast<size_t>(axis)];
  auto part = Dim::divide(d, Dim(sections));
  if (!part)
    return c.fail_attr(fmt::format("split cannot divide axis {} of {} ({}) into {} equal sections", axis,
                                   x.str(), d.str(), sections), "sections");
  TensorType t = x;
  t.shape[static_cast<size_t>(axis)] = *part;
  c.out.assign(static_cast<size_t>(sections), t);
}

// --- references -----------------------------------------------------------------------

void ref_matmul(RefCtx& c) {
  const RefTensor& a = c.input(0);
  const RefTensor& b = c.input(1);
  RefTensor& out = c.out[0];
  // Work on the promoted shapes; dropping a size-1 dim does not move any element, so
  // `out` can be filled in the promoted layout.
  RefTensor pa = a, pb = b;
  if (pa.rank() == 1) pa.shape.insert(pa.shape.begin(), 1);
  if (pb.rank() == 1) pb.shape.push_back(1);
  int64_t M = pa.shape[pa.shape.size() - 2], K = pa.shape.back(), N = pb.shape.back();
  std::vector<int64_t> batch(out.shape.begin(), out.shape.end() - (a.rank() == 1 ? 0 : 1) - (b.rank() == 1 ? 0 : 1));
  std::vector<int64_t> as = pa.strides(), bs = pb.strides(), idx;
  int64_t nbatch = RefTensor::numel_of(batch);
  for (int64_t bi = 0; bi < nbatch; ++bi) {
    unravel(bi, batch, idx);
    idx.push_back(0), idx.push_back(0);
    int64_t ao = broadcast_offset(pa, as, idx, 2), bo = broadcast_offset(pb, bs, idx, 2);
    for (int64_t m = 0; m < M; ++m)
      for (int64_t n = 0; n < N; ++n) {
        double acc = 0;
        for (int64_t k = 0; k < K; ++k) acc += pa[ao + m * K + k] * pb[bo + k * N + n];
        out[(bi * M + m) * N + n] = acc;
      }
  }
}

void ref_transpose(RefCtx& c) {
  std::vector<int64_t> perm(static_cast<size_t>(c.input(0).rank()));
  for (size_t i = 0; i < perm.size(); ++i) perm[i] = static_cast<int64_t>(i);
  std::swap(perm[static_cast<size_t>(c.attrs().i("dim0"))], perm[static_cast<size_t>(c.attrs().i("dim1"))]);
  ref_permute(c.input(0), perm, c.out[0]);
}

void ref_reshape(RefCtx& c) {
  MODELC_CHECK(c.input(0).numel() == c.out[0].numel(), "reshape changes the number of elements");
  c.out[0].data = c.input(0).data;
}

void ref_broadcast_to(RefCtx& c) {
  const RefTensor& x = c.input(0);
  RefTensor& out = c.out[0];
  std::vector<int64_t> xs = x.strides(), idx;
  for (int64_t i = 0; i < out.numel(); ++i) {
    unravel(i, out.shape, idx);
    out[i] = x[broadcast_offset(x, xs, idx)];
  }
}

void ref_slice(RefCtx& c) {
  const RefTensor& x = c.input(0);
  RefTensor& out = c.out[0];
  auto axis = static_cast<size_t>(c.attrs().i("axis"));
  int64_t start = c.attrs().i("start"), end = c.attrs().i("end");
  // On a symbolic extent the shape rule could not check the bounds: do it now.
  if (end > x.shape[axis])
    throw UserError(fmt::format("slice [{}:{}] is out of range for axis {} of extent {}", start, end, axis, x.shape[axis]));
  std::vector<int64_t> xs = x.strides(), idx;
  for (int64_t i = 0; i < out.numel(); ++i) {
    unravel(i, out.shape, idx);
    idx[axis] += start;
    int64_t off = 0;
    for (size_t k = 0; k < idx.size(); ++k) off += idx[k] * xs[k];
    out[i] = x[off];
  }
}

// Concat and split move blocks: `outer` rows (the dims before the axis), each holding an
// axis-extent times `inner` (the dims after it) contiguous elements per tensor.
void block_sizes(const std::vector<int64_t>& shape, size_t axis, int64_t& outer, int64_t& inner) {
  outer = inner = 1;
  for (size_t k = 0; k < axis; ++k) outer *= shape[k];
  for (size_t k = axis + 1; k < shape.size(); ++k) inner *= shape[k];
}

void ref_concat(RefCtx& c) {
  RefTensor& out = c.out[0];
  auto axis = static_cast<size_t>(c.attrs().i("axis"));
  int64_t outer = 0, inner = 0;
  block_sizes(out.shape, axis, outer, inner);
  int64_t row = out.shape[axis] * inner, at = 0;
  for (const RefTensor* x : c.in) {
    int64_t len = x->shape[axis] * inner;
    for (int64_t o = 0; o < outer; ++o)
      std::copy_n(x->data.begin() + o * len, len, out.data.begin() + o * row + at);
    at += len;
  }
}

void ref_split(RefCtx& c) {
  const RefTensor& x = c.input(0);
  auto axis = static_cast<size_t>(c.attrs().i("axis"));
  int64_t outer = 0, inner = 0;
  block_sizes(x.shape, axis, outer, inner);
  int64_t row = x.shape[axis] * inner, at = 0;
  for (RefTensor& out : c.out) {
    int64_t len = out.shape[axis] * inner;
    for (int64_t o = 0; o < outer; ++o)
      std::copy_n(x.data.begin() + o * row + at, len, out.data.begin() + o * len);
    at += len;
  }
}

// --- test domains ---------------------------------------------------------------------

using examples::pick;

// A value of each element in [-1, 1] (f32) or [-9, 9] (i32: the movement ops copy bits).
RefTensor any_values(ExampleRng& rng, std::vector<int64_t> shape, bool i32) {
  return examples::values(rng, i32 ? DType::I32 : DType::F32, std::move(shape), Domain{i32 ? -9.0 : -1.0, i32 ? 9.0 : 1.0});
}

OpExample movement(ExampleRng& rng, std::string label, std::vector<RefTensor> xs, Attrs attrs) {
  OpExample e;
  e.label = std::move(label);
  for (RefTensor& x : xs) e.inputs.push_back(std::move(x));
  e.attrs = std::move(attrs);
  e.grad = e.inputs[0]->dtype == DType::F32;
  (void)rng;
  return e;
}

// 2-D, batched with broadcasting batch dims, and 1-D operands on either side.
std::vector<OpExample> matmul_examples(ExampleRng& rng) {
  const int64_t M = pick(rng, 1, 5), K = pick(rng, 1, 6), N = pick(rng, 1, 5), B = pick(rng, 2, 3);
  const std::vector<std::pair<std::vector<int64_t>, std::vector<int64_t>>> shapes = {
      {{M, K}, {K, N}}, {{B, M, K}, {K, N}}, {{M, K}, {B, K, N}}, {{B, 1, M, K}, {2, K, N}},
      {{K}, {K, N}},    {{M, K}, {K}},       {{K}, {K}},          {{B, M, K}, {K}}};
  std::vector<OpExample> out;
  for (const auto& [a, b] : shapes) {
    OpExample e;
    e.inputs = {examples::values(rng, DType::F32, a, Domain{-1, 1}), examples::values(rng, DType::F32, b, Domain{-1, 1})};
    e.label = e.inputs[0]->shape_str() + " @ " + e.inputs[1]->shape_str();
    out.push_back(std::move(e));
  }
  return out;
}

std::vector<OpExample> transpose_examples(ExampleRng& rng) {
  std::vector<OpExample> out;
  for (int rep = 0; rep < 4; ++rep) {
    std::vector<int64_t> s = examples::shape(rng, 2, 4);
    const auto r = static_cast<int64_t>(s.size());
    Attrs a;
    a.set("dim0", pick(rng, -r, r - 1));
    a.set("dim1", pick(rng, -r, r - 1));
    out.push_back(movement(rng, "transpose", {any_values(rng, s, rep == 3)}, a));
  }
  return out;
}

std::vector<OpExample> permute_examples(ExampleRng& rng) {
  std::vector<OpExample> out;
  for (int rep = 0; rep < 4; ++rep) {
    std::vector<int64_t> s = examples::shape(rng, 1, 4);
    Ints dims(s.size());
    for (size_t k = 0; k < dims.size(); ++k) dims[k] = static_cast<int64_t>(k);
    std::shuffle(dims.begin(), dims.end(), rng);
    if (pick(rng, 0, 1)) dims[0] -= static_cast<int64_t>(dims.size());  // a negative spelling
    Attrs a;
    a.set("dims", dims);
    out.push_back(movement(rng, "dims " + attr_str(dims), {any_values(rng, s, rep == 3)}, a));
  }
  return out;
}

// Regroupings of the same elements: all in one axis, the first two merged, a -1 entry.
std::vector<OpExample> reshape_examples(ExampleRng& rng) {
  std::vector<OpExample> out;
  for (int rep = 0; rep < 3; ++rep) {
    std::vector<int64_t> s = examples::shape(rng, 2, 4);
    int64_t n = 1;
    for (int64_t d : s) n *= d;
    Shape to;
    if (rep == 0) to = {Dim(n)};
    else if (rep == 1) to = {Dim(s[0] * s[1])}, to.insert(to.end(), s.begin() + 2, s.end());
    else to = {Dim(-1), Dim(s.back())};
    Attrs a;
    a.set("shape", to);
    out.push_back(movement(rng, "to " + attr_str(to), {any_values(rng, s, rep == 2)}, a));
  }
  return out;
}

std::vector<OpExample> broadcast_to_examples(ExampleRng& rng) {
  std::vector<OpExample> out;
  for (int rep = 0; rep < 3; ++rep) {
    std::vector<int64_t> target = examples::shape(rng, 1, 4);
    Shape to(target.begin(), target.end());
    Attrs a;
    a.set("shape", to);
    out.push_back(movement(rng, "to " + attr_str(to), {any_values(rng, examples::broadcastable_to(rng, target), rep == 2)}, a));
  }
  return out;
}

std::vector<OpExample> slice_examples(ExampleRng& rng) {
  std::vector<OpExample> out;
  for (int rep = 0; rep < 4; ++rep) {
    std::vector<int64_t> s = examples::shape(rng, 1, 4, 1, 6);
    const int64_t axis = pick(rng, 0, static_cast<int64_t>(s.size()) - 1), n = s[static_cast<size_t>(axis)];
    const int64_t start = pick(rng, 0, n - 1), end = pick(rng, start + 1, n);
    Attrs a;
    a.set("axis", pick(rng, 0, 1) ? axis : axis - static_cast<int64_t>(s.size()));
    a.set("start", pick(rng, 0, 1) ? start : start - n);  // negative bounds count from the end
    a.set("end", end);
    out.push_back(movement(rng, fmt::format("axis {} [{}:{}]", axis, start, end), {any_values(rng, s, rep == 3)}, a));
  }
  return out;
}

std::vector<OpExample> concat_examples(ExampleRng& rng) {
  std::vector<OpExample> out;
  for (int rep = 0; rep < 3; ++rep) {
    std::vector<int64_t> s = examples::shape(rng, 1, 3);
    const auto axis = static_cast<size_t>(pick(rng, 0, static_cast<int64_t>(s.size()) - 1));
    std::vector<RefTensor> xs;
    for (int64_t k = pick(rng, 1, 3); k > 0; --k) {
      s[axis] = pick(rng, 1, 4);
      xs.push_back(any_values(rng, s, rep == 2));
    }
    Attrs a;
    a.set("axis", static_cast<int64_t>(axis));
    out.push_back(movement(rng, fmt::format("{} parts, axis {}", xs.size(), axis), std::move(xs), a));
  }
  return out;
}

std::vector<OpExample> split_examples(ExampleRng& rng) {
  std::vector<OpExample> out;
  for (int rep = 0; rep < 3; ++rep) {
    std::vector<int64_t> s = examples::shape(rng, 1, 3);
    const auto axis = static_cast<size_t>(pick(rng, 0, static_cast<int64_t>(s.size()) - 1));
    const int64_t sections = pick(rng, 1, 3);
    s[axis] = sections * pick(rng, 1, 3);
    Attrs a;
    a.set("sections", sections);
    a.set("axis", static_cast<int64_t>(axis));
    out.push_back(movement(rng, fmt::format("{} sections, axis {}", sections, axis), {any_values(rng, s, rep == 2)}, a));
  }
  return out;
}

}  // namespace

void register_shape_ops(OpRegistry& r) {
  r.def(OpKind::Matmul).signature("a: tensor, b: tensor").fusion(FusionKind::Opaque).library()
      .infer(infer_matmul).reference(ref_matmul).autocast(AutocastPolicy::Lower).grad(grads::matmul)
      .flops([](const Graph& g, const Node& n) {  // output elements (M, N and batch) times K
        return Dim(2) * numel(n.outputs[0].shape) * g.type(n.inputs.at(0)).shape.back();
      })
      .examples(matmul_examples)
      .summary("the matrix product with numpy semantics: batch dims broadcast, 1-D operands promoted; written @");
  r.def(OpKind::Transpose).signature("x: tensor, dim0: int = -2, dim1: int = -1").fusion(FusionKind::Injective)
      .library().moves_values().infer(infer_transpose).reference(ref_transpose).grad(grads::transpose).examples(transpose_examples)
      .summary("swaps two axes (by default the last two)");
  r.def(OpKind::Permute).signature("x: tensor, dims: ints").fusion(FusionKind::Injective).library().moves_values()
      .infer(infer_permute)
      .reference([](RefCtx& c) { ref_permute(c.input(0), c.attrs().ints("dims"), c.out[0]); })
      .grad(grads::permute).examples(permute_examples)
      .summary("reorders the axes: output axis k is input axis dims[k]");
  r.def(OpKind::Reshape).signature("x: tensor, shape: shape").fusion(FusionKind::Injective).library()
      .moves_values().infer(infer_reshape).reference(ref_reshape).grad(grads::reshape).examples(reshape_examples)
      .summary("the same elements in row-major order under a new shape (one entry may be -1)");
  r.def(OpKind::BroadcastTo).signature("x: tensor, shape: shape").fusion(FusionKind::Broadcast)
      .moves_values().infer(infer_broadcast_to).reference(ref_broadcast_to).grad(grads::broadcast_to).examples(broadcast_to_examples)
      .summary("repeats size-1 and missing leading axes to reach a shape (numpy rules)");
  r.def(OpKind::Slice).signature("x: tensor, axis: int, start: int, end: int").fusion(FusionKind::Injective)
      .library().moves_values().infer(infer_slice).reference(ref_slice).grad(grads::slice).examples(slice_examples)
      .summary("the elements start..end-1 along one axis (negative bounds count from the end)");
  r.def(OpKind::Concat).signature("xs: tensors, axis: int = 0").fusion(FusionKind::Injective).library()
      .moves_values().infer(infer_concat).reference(ref_concat).grad(grads::concat).examples(concat_examples)
      .summary("joins [a, b, ...] along an axis; the other axes must agree");
  r.def(OpKind::Split).signature("x: tensor, sections: int, axis: int = -1").fusion(FusionKind::Injective)
      .library().moves_values().infer(infer_split).reference(ref_split).grad(grads::split).examples(split_examples)
      .summary("cuts a tensor into equal sections along an axis, one output each: q, k, v = split(x, 3)");
}

}  // namespace modelc
