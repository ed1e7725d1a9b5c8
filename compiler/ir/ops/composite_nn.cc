// Composite layers and tensor helpers of torch.nn.functional: repeat, pad, upsample (nearest, bilinear),
// adaptive_avg_pool2d, group_norm, rms_norm and cosine_similarity, each built from other ops
// where it is called (OpInfo::expand) and checked against the reference below, written
// apart from the expansion (tests/conformance (g)).
#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "compiler/ir/op_examples.h"
#include "compiler/ir/op_registry.h"

namespace modelc {
namespace {

// ---- repeat: tiles x `repeats` times along each axis (more repeats than axes add leading ones)

void infer_repeat(InferCtx& ctx) {
  const TensorType& x = ctx.input(0);
  const Ints& r = ctx.attrs.ints("repeats");
  if (static_cast<int>(r.size()) < x.rank())
    return ctx.fail_attr(fmt::format("repeat: {} repeats for {} (rank {}): give one per axis", r.size(), x.str(), x.rank()),
                         "repeats");
  TensorType t{x.dtype, {}};
  const size_t lead = r.size() - static_cast<size_t>(x.rank());
  for (size_t k = 0; k < r.size(); ++k) {
    if (r[k] < 1) return ctx.fail_attr(fmt::format("repeat: repeats must be >= 1, got {}", attr_str(r)), "repeats");
    t.shape.push_back(Dim(r[k]) * (k < lead ? Dim(1) : x.shape[k - lead]));
  }
  ctx.out = {t};
}

Value expand_repeat(ExpandCtx& x) {
  const Ints& r = x.attrs.ints("repeats");
  const Shape& s = x.type(x.input(0)).shape;
  const size_t lead = r.size() - s.size();
  Shape split, wide;
  for (size_t k = 0; k < r.size(); ++k) {
    const Dim e = k < lead ? Dim(1) : s[k - lead];
    split.insert(split.end(), {Dim(1), e});
    wide.insert(wide.end(), {Dim(r[k]), e});
  }
  const Value v = x.op(OpKind::Reshape, {x.input(0)}, {{"shape", split}});
  const Value b = x.op(OpKind::BroadcastTo, {v}, {{"shape", wide}});
  return x.op(OpKind::Reshape, {b}, {{"shape", x.out.shape}});
}

void ref_repeat(RefCtx& c) {
  const RefTensor& x = c.input(0);
  RefTensor& out = c.out[0];
  std::vector<int64_t> xs(out.shape.size() - x.shape.size(), 1);
  xs.insert(xs.end(), x.shape.begin(), x.shape.end());
  std::vector<int64_t> idx;
  for (int64_t i = 0; i < out.numel(); ++i) {
    unravel(i, out.shape, idx);
    for (size_t k = 0; k < idx.size(); ++k) idx[k] %= xs[k];
    out[i] = x[ravel(idx, xs)];
  }
}

// ---- pad: constant padding, pads as torch.nn.functional.pad: (before, after) pairs from the
// last axis backwards

void infer_pad(InferCtx& ctx) {
  const TensorType& x = ctx.input(0);
  const Ints& p = ctx.attrs.ints("pads");
  if (p.size() % 2 || static_cast<int>(p.size() / 2) > x.rank() || p.empty())
    return ctx.fail_attr(fmt::format("pad: pads {} must be (before, after) pairs for at most the {} axes of {}, from the "
                                     "last axis backwards", attr_str(p), x.rank(), x.str()), "pads");
  TensorType t = x;
  for (size_t k = 0; k < p.size() / 2; ++k) {
    if (p[2 * k] < 0 || p[2 * k + 1] < 0)
      return ctx.fail_attr(fmt::format("pad: pads {} must not be negative (crop with slice)", attr_str(p)), "pads");
    Dim& d = t.shape[t.shape.size() - 1 - k];
    d = d + Dim(p[2 * k] + p[2 * k + 1]);
  }
  if (ctx.attrs.s("mode") != "constant")
    return ctx.fail_attr(fmt::format("pad: mode \"{}\" is not supported; only \"constant\" is", ctx.attrs.s("mode")), "mode");
  ctx.out = {t};
}

Value expand_pad(ExpandCtx& x) {
  const Ints& p = x.attrs.ints("pads");
  Value v = x.input(0);
  const DType t = x.out.dtype;
  for (size_t k = 0; k < p.size() / 2; ++k) {
    const auto axis = static_cast<int64_t>(x.type(v).shape.size() - 1 - k);
    auto fill = [&](int64_t n) {
      Shape s = x.type(v).shape;
      s[static_cast<size_t>(axis)] = Dim(n);
      return x.op(OpKind::BroadcastTo, {x.number(x.attrs.f("value"), t)}, {{"shape", s}});
    };
    std::vector<Value> parts;
    if (p[2 * k] > 0) parts.push_back(fill(p[2 * k]));
    parts.push_back(v);
    if (p[2 * k + 1] > 0) parts.push_back(fill(p[2 * k + 1]));
    if (parts.size() > 1) v = x.op(OpKind::Concat, parts, {{"axis", axis}});
  }
  return v == x.input(0) ? x.op(OpKind::Mul, {v, x.number(1, t)}) : v;  // no padding: still a node of its own
}

void ref_pad(RefCtx& c) {
  const RefTensor& x = c.input(0);
  RefTensor& out = c.out[0];
  const Ints& p = c.attrs().ints("pads");
  std::vector<int64_t> before(x.shape.size(), 0);
  for (size_t k = 0; k < p.size() / 2; ++k) before[x.shape.size() - 1 - k] = p[2 * k];
  std::vector<int64_t> idx;
  for (int64_t i = 0; i < out.numel(); ++i) {
    unravel(i, out.shape, idx);
    bool inside = true;
    for (size_t k = 0; k < idx.size(); ++k) {
      idx[k] -= before[k];
      inside &= idx[k] >= 0 && idx[k] < x.shape[k];
    }
    out[i] = inside ? x[ravel(idx, x.shape)] : c.attrs().f("value");
  }
}

// ---- upsample (nearest and bilinear) and adaptive_avg_pool2d on NCHW images with known H and W

bool known_hw(InferCtx& ctx, std::string_view name, const TensorType& x) {
  if (x.rank() != 4) {
    ctx.fail(fmt::format("{} expects NCHW images (rank 4), got {}", name, x.str()), 0);
    return false;
  }
  if (!x.shape[2].is_const() || !x.shape[3].is_const()) {
    ctx.fail(fmt::format("{} needs known image sizes, got {}", name, x.str()), 0);
    return false;
  }
  return true;
}

void infer_upsample(InferCtx& ctx) {
  const TensorType& x = ctx.input(0);
  if (!known_hw(ctx, "upsample", x)) return;
  const int64_t s = ctx.attrs.i("scale");
  if (s < 1) return ctx.fail_attr(fmt::format("upsample: scale must be >= 1, got {}", s), "scale");
  const std::string& mode = ctx.attrs.s("mode");
  if (mode != "nearest" && mode != "bilinear")
    return ctx.fail_attr(fmt::format("upsample: mode \"{}\" is not one of \"nearest\" and \"bilinear\"", mode), "mode");
  if (mode == "nearest" && ctx.attrs.b("align_corners"))
    return ctx.fail_attr("upsample: align_corners is for mode \"bilinear\" only (as in PyTorch)", "align_corners");
  TensorType t = x;
  t.shape[2] = x.shape[2] * Dim(s);
  t.shape[3] = x.shape[3] * Dim(s);
  ctx.out = {t};
}

// Bilinear along one axis of extent n scaled by k (PyTorch's rule): output o reads source
// src = (o + 0.5) / k - 0.5 clamped at 0 (align_corners: o (n - 1) / (n k - 1)),
// i0 = floor(src), i1 = min(i0 + 1, n - 1), with weights 1 - l and l = src - i0. src is
// computed as one integer divided by another, (2 o + 1 - k) / 2k, so that it is exactly an
// integer (a tap of weight 0, where 0 * inf is NaN, as in PyTorch) in f32 and in double
// alike; PyTorch multiplies by a rounded 1/k, which differs from it by an ulp.
Value bilinear_axis(ExpandCtx& x, Value v, int64_t axis, int64_t k) {
  const Shape& s = x.type(v).shape;
  const int64_t n = s[static_cast<size_t>(axis)].const_value(), m = n * k;
  const auto f = [&](double c) { return x.number(c, DType::F32); };
  const Value ones = x.op(OpKind::BroadcastTo, {f(1)}, {{"shape", Shape{Dim(m)}}});
  const Value o = x.op(OpKind::Sub, {x.op(OpKind::Cumsum, {ones}, {{"axis", int64_t{0}}}), f(1)});
  Value src;
  if (x.attrs.b("align_corners")) {
    src = m > 1 ? x.op(OpKind::Div, {x.op(OpKind::Mul, {o, f(static_cast<double>(n - 1))}), f(static_cast<double>(m - 1))})
                : x.op(OpKind::Mul, {o, f(0)});
  } else {
    const Value num = x.op(OpKind::Add, {x.op(OpKind::Mul, {o, f(2)}), f(static_cast<double>(1 - k))});
    src = x.op(OpKind::Maximum, {x.op(OpKind::Div, {num, f(static_cast<double>(2 * k))}), f(0)});
  }
  const Value i0 = x.op(OpKind::Floor, {src});
  const Value i1 = x.op(OpKind::Minimum, {x.op(OpKind::Add, {i0, f(1)}), f(static_cast<double>(n - 1))});
  const Value l1 = x.op(OpKind::Sub, {src, i0});
  const Value l0 = x.op(OpKind::Sub, {f(1), l1});
  Shape ws(s.size() - static_cast<size_t>(axis), Dim(1));  // broadcasts along `axis`
  ws[0] = Dim(m);
  const auto pick = [&](Value i, Value w) {
    const Value idx = x.op(OpKind::Cast, {i}, {{"dtype", DType::I32}});
    const Value rows = x.op(OpKind::IndexSelect, {v, idx}, {{"axis", axis}});
    return x.op(OpKind::Mul, {x.op(OpKind::Reshape, {w}, {{"shape", ws}}), rows});
  };
  return x.op(OpKind::Add, {pick(i0, l0), pick(i1, l1)});
}

Value expand_upsample(ExpandCtx& x) {
  const int64_t scale = x.attrs.i("scale");
  if (x.attrs.s("mode") == "bilinear") return bilinear_axis(x, bilinear_axis(x, x.input(0), 3, scale), 2, scale);
  const Shape& s = x.type(x.input(0)).shape;
  const Dim k(scale);
  const Value v = x.op(OpKind::Reshape, {x.input(0)}, {{"shape", Shape{s[0], s[1], s[2], Dim(1), s[3], Dim(1)}}});
  const Value b = x.op(OpKind::BroadcastTo, {v}, {{"shape", Shape{s[0], s[1], s[2], k, s[3], k}}});
  return x.op(OpKind::Reshape, {b}, {{"shape", x.out.shape}});
}

// The source of output o along an axis of extent n (bilinear_axis's rule, in double).
struct Taps {
  int64_t i0, i1;
  double l0, l1;
};
Taps taps(int64_t o, int64_t n, int64_t k, bool align) {
  const int64_t m = n * k;
  const double src = align ? (m > 1 ? static_cast<double>(o * (n - 1)) / static_cast<double>(m - 1) : 0)
                           : std::max(static_cast<double>(2 * o + 1 - k) / static_cast<double>(2 * k), 0.0);
  const auto i0 = static_cast<int64_t>(std::floor(src));
  const double l1 = src - static_cast<double>(i0);
  return {i0, std::min(i0 + 1, n - 1), 1 - l1, l1};
}

void ref_upsample(RefCtx& c) {
  const RefTensor& x = c.input(0);
  const int64_t s = c.attrs().i("scale");
  std::vector<int64_t> idx;
  if (c.attrs().s("mode") == "bilinear") {
    const bool align = c.attrs().b("align_corners");
    const int64_t H = x.shape[2], W = x.shape[3];
    for (int64_t i = 0; i < c.out[0].numel(); ++i) {
      unravel(i, c.out[0].shape, idx);
      const Taps h = taps(idx[2], H, s, align), w = taps(idx[3], W, s, align);
      const int64_t base = (idx[0] * x.shape[1] + idx[1]) * H * W;
      const auto at = [&](int64_t r, int64_t q) { return x[base + r * W + q]; };
      // PyTorch's order: each row's taps first, then the rows.
      c.out[0][i] = h.l0 * (w.l0 * at(h.i0, w.i0) + w.l1 * at(h.i0, w.i1)) +
                    h.l1 * (w.l0 * at(h.i1, w.i0) + w.l1 * at(h.i1, w.i1));
    }
    return;
  }
  for (int64_t i = 0; i < c.out[0].numel(); ++i) {
    unravel(i, c.out[0].shape, idx);
    idx[2] /= s;
    idx[3] /= s;
    c.out[0][i] = x[ravel(idx, x.shape)];
  }
}

void infer_adaptive_avg(InferCtx& ctx) {
  const TensorType& x = ctx.input(0);
  if (!known_hw(ctx, "adaptive_avg_pool2d", x)) return;
  Ints o = ctx.attrs.ints("output");
  if (o.size() == 1) o.push_back(o[0]);
  if (o.size() != 2 || o[0] < 1 || o[1] < 1)
    return ctx.fail_attr(fmt::format("adaptive_avg_pool2d: output {} must be one or two sizes >= 1", attr_str(o)), "output");
  const int64_t h = x.shape[2].const_value(), w = x.shape[3].const_value();
  if (h % o[0] || w % o[1])
    return ctx.fail_attr(fmt::format("adaptive_avg_pool2d: the image {}x{} does not divide into {}x{} equal windows "
                                     "(uneven windows are not supported)", h, w, o[0], o[1]), "output");
  ctx.attrs.set("output", o);
  TensorType t = x;
  t.shape[2] = Dim(o[0]);
  t.shape[3] = Dim(o[1]);
  ctx.out = {t};
}

Value expand_adaptive_avg(ExpandCtx& x) {
  const Ints& o = x.attrs.ints("output");
  const Shape& s = x.type(x.input(0)).shape;
  if (o[0] == 1 && o[1] == 1) return x.op(OpKind::Mean, {x.input(0)}, {{"axes", Ints{2, 3}}, {"keepdims", true}});
  const Ints k = {s[2].const_value() / o[0], s[3].const_value() / o[1]};
  return x.op(OpKind::AvgPool2d, {x.input(0)}, {{"kernel", k}, {"stride", k}});
}

void ref_adaptive_avg(RefCtx& c) {
  const RefTensor& x = c.input(0);
  RefTensor& out = c.out[0];
  const int64_t kh = x.shape[2] / out.shape[2], kw = x.shape[3] / out.shape[3];
  std::vector<int64_t> o;
  for (int64_t i = 0; i < out.numel(); ++i) {
    unravel(i, out.shape, o);
    double s = 0;
    for (int64_t a = 0; a < kh; ++a)
      for (int64_t b = 0; b < kw; ++b) s += x[ravel({o[0], o[1], o[2] * kh + a, o[3] * kw + b}, x.shape)];
    out[i] = s / static_cast<double>(kh * kw);
  }
}

}  // namespace

void register_norm_composites(OpRegistry& r);  // compiler/ir/ops/composite_norm.cc

void register_nn_composites(OpRegistry& r) {
  r.def(OpKind::Repeat).signature("x: tensor, repeats: ints").infer(infer_repeat).reference(ref_repeat)
      .composite(expand_repeat)
      .examples([](ExampleRng& rng) {
        return examples::calls(5, [&](int rep, OpExample& e) {
          const std::vector<int64_t> s = examples::shape(rng, 0, 3, 1, 3);
          Ints reps;
          for (size_t k = 0; k < s.size() + (rep % 2); ++k) reps.push_back(examples::pick(rng, 1, 3));
          if (reps.empty()) reps.push_back(2);
          e.inputs = {examples::values(rng, DType::F32, s, Domain{-3, 3})};
          e.attrs.set("repeats", reps);
          e.label = fmt::format("{} repeats {}", RefTensor(DType::F32, s).shape_str(), attr_str(reps));
        });
      })
      .summary("tiles x repeats[k] times along each axis, as torch.Tensor.repeat (more repeats than axes add "
               "leading axes): [2, 3] repeated [2, 1] is [4, 3]");
  r.def(OpKind::Pad).signature("x: tensor, pads: ints, value: float = 0.0, mode: str = \"constant\"").infer(infer_pad)
      .reference(ref_pad).composite(expand_pad)
      .examples([](ExampleRng& rng) {
        return examples::calls(5, [&](int rep, OpExample& e) {
          const std::vector<int64_t> s = examples::shape(rng, 1, 3, 1, 4);
          Ints pads;
          const int64_t axes = examples::pick(rng, 1, static_cast<int64_t>(s.size()));
          for (int64_t k = 0; k < 2 * axes; ++k) pads.push_back(examples::pick(rng, 0, 2));
          e.inputs = {examples::values(rng, DType::F32, s, Domain{-3, 3})};
          e.attrs.set("pads", pads);
          e.attrs.set("value", rep == 0 ? 0.0 : -1.5);
          e.label = fmt::format("{} pads {}", RefTensor(DType::F32, s).shape_str(), attr_str(pads));
        });
      })
      .summary("pads with a constant as torch.nn.functional.pad: pads = [before, after] of the last axis, then of "
               "the one before, ...; mode \"constant\" only");
  auto image_examples = [](const char* attr, bool adaptive) {
    return [attr, adaptive](ExampleRng& rng) {
      return examples::calls(4, [&](int rep, OpExample& e) {
        const int64_t oh = examples::pick(rng, 1, 3), ow = examples::pick(rng, 1, 3);
        const int64_t k = examples::pick(rng, 1, 3);
        const std::vector<int64_t> s = {examples::pick(rng, 1, 2), examples::pick(rng, 1, 3), adaptive ? oh * k : oh,
                                        adaptive ? ow * examples::pick(rng, 1, 2) : ow};
        e.inputs = {examples::values(rng, DType::F32, s, Domain{-3, 3})};
        if (adaptive) e.attrs.set(attr, rep == 0 ? Ints{1} : Ints{oh, ow});
        else e.attrs.set(attr, k);
        e.label = fmt::format("{} {} {}", RefTensor(DType::F32, s).shape_str(), attr, adaptive ? attr_str(e.attrs.ints(attr)) : std::to_string(k));
      });
    };
  };
  r.def(OpKind::Upsample).signature("x: tensor, scale: int, mode: str = \"nearest\", align_corners: bool = false")
      .infer(infer_upsample)
      .reference(ref_upsample).composite(expand_upsample)
      .examples([](ExampleRng& rng) {
        return examples::calls(6, [&](int rep, OpExample& e) {
          const std::vector<int64_t> s = {examples::pick(rng, 1, 2), examples::pick(rng, 1, 3), examples::pick(rng, 1, 4),
                                          examples::pick(rng, 1, 4)};
          const int64_t k = examples::pick(rng, 1, 3);
          const bool align = rep == 5;
          e.inputs = {examples::values(rng, DType::F32, s, Domain{-3, 3})};
          e.attrs.set("scale", k);
          e.attrs.set("mode", std::string(rep < 2 ? "nearest" : "bilinear"));
          e.attrs.set("align_corners", align);
          e.label = fmt::format("{} scale {} {}{}", RefTensor(DType::F32, s).shape_str(), k, e.attrs.s("mode"),
                                align ? " align_corners" : "");
        });
      })
      .summary("enlarges NCHW images by an integer scale, as torch's Upsample: mode \"nearest\" repeats each pixel "
               "scale x scale times, \"bilinear\" interpolates between the four nearest (align_corners as torch's)");
  r.def(OpKind::AdaptiveAvgPool2d).signature("x: tensor, output: ints").infer(infer_adaptive_avg)
      .reference(ref_adaptive_avg).composite(expand_adaptive_avg).examples(image_examples("output", true))
      .summary("averages NCHW images down to output [OH, OW] (one size: square; [1]: global average pooling); the "
               "image must divide into equal windows");
  register_norm_composites(r);
}

}  // namespace modelc
