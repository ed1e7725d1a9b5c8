// Convolutions built from conv2d's kernels: conv1d (a conv2d of images one pixel high, as
// torch.nn.functional.conv1d) and conv_transpose2d (conv2d's gradient with respect to its
// input, which is what a transposed convolution is: torch.nn.functional.conv_transpose2d,
// weights [C_in, C_out/groups, kh, kw]). Their references below are direct loops written
// apart from the expansions (tests/conformance (g)); their gradients are their parts'
// (conv2d_grad_input's: compiler/ir/grads/conv.cc).
#include <fmt/format.h>

#include "compiler/ir/op_examples.h"
#include "compiler/ir/op_registry.h"
#include "compiler/ir/ops/window.h"

namespace modelc {
namespace {

// Groups, channels and bias shared by both rules: x [N, C, ...] and w [A, B, ...] where
// conv1d has A = O (outputs), B = C / groups and conv_transpose2d A = C, B = O / groups.
// Sets `out_channels`; false after a failure.
bool check_channels(InferCtx& c, std::string_view op, bool transposed, Dim& out_channels) {
  const TensorType& x = c.input(0);
  const TensorType& w = c.input(1);
  const int64_t groups = c.attrs.i("groups");
  if (groups < 1) {
    c.fail_attr(fmt::format("{}: groups must be >= 1, got {}", op, groups), "groups");
    return false;
  }
  const Dim g(groups);
  const Dim& C = x.shape[1];
  const bool ok = transposed ? w.shape[0] == C && Dim::divide(C, g).has_value()
                             : w.shape[1] * g == C && Dim::divide(w.shape[0], g).has_value();
  if (!ok) {
    c.fail(fmt::format("{}: weight {} with groups {} does not fit input {} (weights are {})", op, w.str(), groups,
                       x.str(), transposed ? "[C_in, C_out/groups, kh, kw]" : "[C_out, C_in/groups, k]"), 1);
    return false;
  }
  out_channels = transposed ? w.shape[1] * g : w.shape[0];
  if (c.has_input(2) && c.input(2) != TensorType{x.dtype, {out_channels}}) {
    c.fail(fmt::format("{}: bias must be {} for weight {}, got {}", op, TensorType{x.dtype, {out_channels}}.str(),
                       w.str(), c.input(2).str()), 2);
    return false;
  }
  return true;
}

bool ranks(InferCtx& c, std::string_view op, int rank, const char* layout) {
  const TensorType& x = c.input(0);
  const TensorType& w = c.input(1);
  if (!is_float(x.dtype) || x.rank() != rank) {
    c.fail(fmt::format("{} needs a float input {}, got {}", op, layout, x.str()), 0);
    return false;
  }
  if (w.dtype != x.dtype || w.rank() != rank) {
    c.fail(fmt::format("{}: the weight must be a {} tensor of rank {}, got {}", op, dtype_name(x.dtype), rank, w.str()), 1);
    return false;
  }
  return true;
}

// ---- conv1d ----

void infer_conv1d(InferCtx& c) {
  if (!ranks(c, "conv1d", 3, "[N, C, L]")) return;
  Dim O;
  if (!check_channels(c, "conv1d", false, O)) return;
  const int64_t s = c.attrs.i("stride"), p = c.attrs.i("padding"), d = c.attrs.i("dilation");
  if (s < 1 || d < 1 || p < 0)
    return c.fail_attr(fmt::format("conv1d: stride and dilation must be positive and padding non-negative, got "
                                   "{}, {} and {}", s, d, p), s < 1 ? "stride" : d < 1 ? "dilation" : "padding");
  const TensorType& x = c.input(0);
  const std::optional<Dim> lo = window_sweep(x.shape[2], c.input(1).shape[2], s, p, d);
  if (!lo) return c.fail(fmt::format("conv1d with stride {} needs a known length, got {}", s, x.str()), 0);
  if (auto v = lo->as_const(); v && *v <= 0)
    return c.fail(fmt::format("conv1d output length {} is not positive: input {}, kernel {}", lo->str(), x.str(),
                              c.input(1).shape[2].str()), 0);
  c.out = {TensorType{x.dtype, {x.shape[0], O, *lo}}};
}

void ref_conv1d(RefCtx& c) {
  const RefTensor& x = c.input(0);
  const RefTensor& w = c.input(1);
  const RefTensor* bias = c.in.at(2);
  const int64_t s = c.attrs().i("stride"), p = c.attrs().i("padding"), d = c.attrs().i("dilation");
  const int64_t N = x.shape[0], C = x.shape[1], L = x.shape[2], O = w.shape[0], Cg = w.shape[1], K = w.shape[2];
  const int64_t LO = c.out[0].shape[2], Og = O / c.attrs().i("groups");
  for (int64_t n = 0; n < N; ++n)
    for (int64_t o = 0; o < O; ++o)
      for (int64_t i = 0; i < LO; ++i) {
        double acc = bias ? (*bias)[o] : 0.0;
        for (int64_t ci = 0; ci < Cg; ++ci)
          for (int64_t k = 0; k < K; ++k) {
            const int64_t at = i * s - p + k * d;
            if (at >= 0 && at < L) acc += x[(n * C + (o / Og) * Cg + ci) * L + at] * w[(o * Cg + ci) * K + k];
          }
        c.out[0][(n * O + o) * LO + i] = acc;
      }
}

Value expand_conv1d(ExpandCtx& x) {
  const Shape& xs = x.type(x.input(0)).shape;
  const Shape& ws = x.type(x.input(1)).shape;
  const Value img = x.op(OpKind::Reshape, {x.input(0)}, {{"shape", Shape{xs[0], xs[1], Dim(1), xs[2]}}});
  const Value w = x.op(OpKind::Reshape, {x.input(1)}, {{"shape", Shape{ws[0], ws[1], Dim(1), ws[2]}}});
  Attrs a;
  a.set("stride", Ints{1, x.attrs.i("stride")});
  a.set("padding", Ints{0, x.attrs.i("padding")});
  a.set("dilation", Ints{1, x.attrs.i("dilation")});
  a.set("groups", x.attrs.i("groups"));
  const Value y = x.op(OpKind::Conv2d, {img, w, x.has_input(2) ? x.input(2) : Value{}}, std::move(a));
  return x.op(OpKind::Reshape, {y}, {{"shape", x.out.shape}});
}

std::vector<OpExample> conv1d_examples(ExampleRng& rng) {
  using examples::pick;
  return examples::calls(4, [&](int rep, OpExample& e) {
    const int64_t groups = rep == 3 ? 2 : 1, N = pick(rng, 1, 2), C = groups * pick(rng, 1, 2), O = groups * pick(rng, 1, 3);
    const int64_t k = pick(rng, 1, 3), stride = pick(rng, 1, 2), pad = pick(rng, 0, 1), dil = rep == 2 ? 2 : 1;
    const int64_t L = dil * (k - 1) + pick(rng, 1, 5);
    e.inputs = {examples::values(rng, DType::F32, {N, C, L}, Domain{-1, 1}),
                examples::values(rng, DType::F32, {O, C / groups, k}, Domain{-1, 1}), std::nullopt};
    if (rep % 2) e.inputs[2] = examples::values(rng, DType::F32, {O}, Domain{-1, 1});
    e.attrs.set("stride", stride);
    e.attrs.set("padding", pad);
    e.attrs.set("dilation", dil);
    e.attrs.set("groups", groups);
    e.label = fmt::format("x {} w {} stride {} padding {} dilation {} groups {}{}", e.inputs[0]->shape_str(),
                          e.inputs[1]->shape_str(), stride, pad, dil, groups, rep % 2 ? " bias" : "");
  });
}

// ---- conv_transpose2d ----

// Each output extent: (in - 1) stride - 2 padding + dilation (k - 1) + output_padding + 1,
// which conv2d with the same window maps back onto `in` (checked, so that a symbolic
// extent conv2d cannot divide is refused here and not by a part).
void infer_conv_transpose2d(InferCtx& c) {
  const char* op = "conv_transpose2d";
  if (!ranks(c, op, 4, "[N, C, H, W]")) return;
  Dim O;
  if (!check_channels(c, op, true, O)) return;
  Ints st, pd, dl, op_pad;
  if (!pair_attr(c, op, "stride", 1, st) || !pair_attr(c, op, "padding", 0, pd) ||
      !pair_attr(c, op, "dilation", 1, dl) || !pair_attr(c, op, "output_padding", 0, op_pad))
    return;
  for (int a = 0; a < 2; ++a)
    if (op_pad[a] >= st[a] && op_pad[a] >= dl[a])
      return c.fail_attr(fmt::format("{}: output_padding {} must be smaller than the stride {} or the dilation {}",
                                     op, op_pad[a], st[a], dl[a]), "output_padding");
  const TensorType& x = c.input(0);
  const Shape& w = c.input(1).shape;
  Shape out{x.shape[0], O, Dim(0), Dim(0)};
  for (int a = 0; a < 2; ++a) {
    const Dim& in = x.shape[2 + a];
    Dim e = (in - Dim(1)) * Dim(st[a]) - Dim(2 * pd[a]) + Dim(dl[a]) * (w[2 + a] - Dim(1)) + Dim(op_pad[a] + 1);
    if (auto v = e.as_const(); v && *v <= 0)
      return c.fail(fmt::format("{} output size {} is not positive: input {}, weight {}", op, e.str(), x.str(),
                                c.input(1).str()), 0);
    const std::optional<Dim> back = window_sweep(e, w[2 + a], st[a], pd[a], dl[a]);
    if (!back || *back != in)
      return c.fail(fmt::format("{} with stride {} needs a known input {}, got {}", op, st[a], a ? "width" : "height",
                                x.str()), 0);
    out[2 + static_cast<size_t>(a)] = e;
  }
  c.out = {TensorType{x.dtype, out}};
}

void ref_conv_transpose2d(RefCtx& c) {
  const RefTensor& x = c.input(0);
  const RefTensor& w = c.input(1);
  const RefTensor* bias = c.in.at(2);
  RefTensor& out = c.out[0];
  const Ints& st = c.attrs().ints("stride");
  const Ints& pd = c.attrs().ints("padding");
  const Ints& dl = c.attrs().ints("dilation");
  const int64_t N = x.shape[0], C = x.shape[1], H = x.shape[2], W = x.shape[3];
  const int64_t Og = w.shape[1], KH = w.shape[2], KW = w.shape[3], Cg = C / c.attrs().i("groups");
  const int64_t O = out.shape[1], HO = out.shape[2], WO = out.shape[3];
  for (int64_t e = 0; e < out.numel(); ++e) out[e] = bias ? (*bias)[(e / (HO * WO)) % O] : 0.0;
  // Each input pixel scatters its window: output (i s - p + a d, j s - p + b d) of every
  // output channel of its group.
  for (int64_t n = 0; n < N; ++n)
    for (int64_t ci = 0; ci < C; ++ci)
      for (int64_t oc = 0; oc < Og; ++oc) {
        const int64_t o = (ci / Cg) * Og + oc;
        for (int64_t i = 0; i < H; ++i)
          for (int64_t j = 0; j < W; ++j)
            for (int64_t a = 0; a < KH; ++a)
              for (int64_t b = 0; b < KW; ++b) {
                const int64_t h = i * st[0] - pd[0] + a * dl[0], v = j * st[1] - pd[1] + b * dl[1];
                if (h < 0 || h >= HO || v < 0 || v >= WO) continue;
                out[((n * O + o) * HO + h) * WO + v] +=
                    x[((n * C + ci) * H + i) * W + j] * w[((ci * Og + oc) * KH + a) * KW + b];
              }
      }
}

Value expand_conv_transpose2d(ExpandCtx& x) {
  Attrs a;
  for (const char* k : {"stride", "padding", "dilation", "groups"}) a.set(k, *x.attrs.find(k));
  a.set("input_shape", x.out.shape);
  const Value y = x.op(OpKind::Conv2dGradInput, {x.input(0), x.input(1)}, std::move(a));
  if (!x.has_input(2)) return y;
  const Value b = x.op(OpKind::Reshape, {x.input(2)}, {{"shape", Shape{Dim(1), x.out.shape[1], Dim(1), Dim(1)}}});
  return x.op(OpKind::Add, {y, b});
}

std::vector<OpExample> conv_transpose2d_examples(ExampleRng& rng) {
  using examples::pick;
  return examples::calls(5, [&](int rep, OpExample& e) {
    const int64_t groups = rep == 3 ? 2 : 1, N = pick(rng, 1, 2), C = groups * pick(rng, 1, 2), Og = pick(rng, 1, 3);
    const int64_t kh = pick(rng, 1, 3), kw = pick(rng, 1, 3), stride = rep == 4 ? 2 : pick(rng, 1, 2);
    const int64_t pad = pick(rng, 0, 1), dil = rep == 2 ? 2 : 1, out_pad = rep == 4 ? 1 : 0;
    const int64_t H = pick(rng, 1, 4) + 2 * pad, W = pick(rng, 1, 4) + 2 * pad;  // a positive output
    e.inputs = {examples::values(rng, DType::F32, {N, C, H, W}, Domain{-1, 1}),
                examples::values(rng, DType::F32, {C, Og, kh, kw}, Domain{-1, 1}), std::nullopt};
    if (rep % 2) e.inputs[2] = examples::values(rng, DType::F32, {Og * groups}, Domain{-1, 1});
    e.attrs.set("stride", Ints{stride});
    e.attrs.set("padding", Ints{pad});
    e.attrs.set("output_padding", Ints{out_pad});
    e.attrs.set("dilation", Ints{dil});
    e.attrs.set("groups", groups);
    e.label = fmt::format("x {} w {} stride {} padding {} output_padding {} dilation {} groups {}{}",
                          e.inputs[0]->shape_str(), e.inputs[1]->shape_str(), stride, pad, out_pad, dil, groups,
                          rep % 2 ? " bias" : "");
  });
}

}  // namespace

void register_conv_composites(OpRegistry& r) {
  r.def(OpKind::Conv1d)
      .signature("x: tensor, w: tensor, bias: tensor? = none, stride: int = 1, padding: int = 0, dilation: int = 1, "
                 "groups: int = 1")
      .infer(infer_conv1d).reference(ref_conv1d).composite(expand_conv1d).examples(conv1d_examples)
      .nonfinite(NonFinite::Superset)  // conv2d's: an infinite weight on the zero padding
      .summary("1-D convolution of [N,C,L] with weights [O,C/groups,k], zero padding (as torch's conv1d; runs as "
               "conv2d on images one pixel high)");
  r.def(OpKind::ConvTranspose2d)
      .signature("x: tensor, w: tensor, bias: tensor? = none, stride: ints = [1], padding: ints = [0], "
                 "output_padding: ints = [0], dilation: ints = [1], groups: int = 1")
      .infer(infer_conv_transpose2d).reference(ref_conv_transpose2d).composite(expand_conv_transpose2d)
      .examples(conv_transpose2d_examples).nonfinite(NonFinite::Superset)
      .summary("transposed 2-D convolution of NCHW images with weights [C,O/groups,kh,kw] (as torch's "
               "conv_transpose2d: each output extent is (in - 1) stride - 2 padding + dilation (k - 1) + "
               "output_padding + 1); runs as conv2d's gradient with respect to its input");
}

}  // namespace modelc
