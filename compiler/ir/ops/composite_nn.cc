// Composite layers and tensor helpers of torch.nn.functional: repeat, pad, upsample (nearest),
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

// ---- upsample (nearest) and adaptive_avg_pool2d on NCHW images with known H and W

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
  if (ctx.attrs.s("mode") != "nearest")
    return ctx.fail_attr(fmt::format("upsample: mode \"{}\" is not supported yet; \"nearest\" is (bilinear is "
                                     "planned)", ctx.attrs.s("mode")), "mode");
  TensorType t = x;
  t.shape[2] = x.shape[2] * Dim(s);
  t.shape[3] = x.shape[3] * Dim(s);
  ctx.out = {t};
}

Value expand_upsample(ExpandCtx& x) {
  const Shape& s = x.type(x.input(0)).shape;
  const Dim k(x.attrs.i("scale"));
  const Value v = x.op(OpKind::Reshape, {x.input(0)}, {{"shape", Shape{s[0], s[1], s[2], Dim(1), s[3], Dim(1)}}});
  const Value b = x.op(OpKind::BroadcastTo, {v}, {{"shape", Shape{s[0], s[1], s[2], k, s[3], k}}});
  return x.op(OpKind::Reshape, {b}, {{"shape", x.out.shape}});
}

void ref_upsample(RefCtx& c) {
  const RefTensor& x = c.input(0);
  const int64_t s = c.attrs().i("scale");
  std::vector<int64_t> idx;
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
  r.def(OpKind::Upsample).signature("x: tensor, scale: int, mode: str = \"nearest\"").infer(infer_upsample)
      .reference(ref_upsample).composite(expand_upsample).examples(image_examples("scale", false))
      .summary("enlarges NCHW images by an integer scale, each pixel repeated scale x scale times (mode "
               "\"nearest\"; bilinear is not supported yet)");
  r.def(OpKind::AdaptiveAvgPool2d).signature("x: tensor, output: ints").infer(infer_adaptive_avg)
      .reference(ref_adaptive_avg).composite(expand_adaptive_avg).examples(image_examples("output", true))
      .summary("averages NCHW images down to output [OH, OW] (one size: square; [1]: global average pooling); the "
               "image must divide into equal windows");
  register_norm_composites(r);
}

}  // namespace modelc
