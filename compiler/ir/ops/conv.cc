// Convolution and pooling over NCHW images: conv2d, max_pool2d and avg_pool2d.
//
// The window attributes (stride, padding, dilation, kernel) take one entry for both
// spatial axes or two (height, width); the shape rules canonicalise them to two. Output
// extents are computed on symbolic dims: with stride 1 the output size is a polynomial in
// the input's; with a larger stride it needs a floor division, which is only exact when
// the polynomial divides evenly, so a symbolic extent that does not fails rather than
// guessing. The references are direct loops, PyTorch's semantics.
#include <fmt/format.h>

#include <algorithm>
#include <limits>

#include "compiler/ir/grads/grad_util.h"
#include "compiler/ir/op_examples.h"
#include "compiler/ir/op_registry.h"
#include "compiler/ir/ops/window.h"

namespace modelc {

namespace {

std::string ints_str(const Ints& v) { return attr_str(AttrValue(v)); }


// The output extent of a window sweep over `in`: (in + 2*pad - span) / stride + 1, where
// span = dilation*(kernel-1) + 1 is the extent one window covers. `axis` ("height" or
// "width") names it in messages.
std::optional<Dim> sweep_extent(InferCtx& c, const char* op, const char* axis, const Dim& in,
                                const Dim& kernel, int64_t stride, int64_t pad, int64_t dilation) {
  if (auto e = window_sweep(in, kernel, stride, pad, dilation)) return e;
  const char* what = in.is_symbolic() ? "input" : "kernel";
  c.fail(fmt::format("{} with stride {} needs a known {} {}, got {}", op, stride, what, axis,
                     in.is_symbolic() ? in.str() : kernel.str()), in.is_symbolic() ? 0 : 1);
  return std::nullopt;
}

// Both output extents; fails when a constant one is not positive.
bool output_hw(InferCtx& c, const char* op, const TensorType& x, const Dim& kh, const Dim& kw,
               const Ints& stride, const Ints& pad, const Ints& dil, Dim& ho, Dim& wo) {
  auto h = sweep_extent(c, op, "height", x.shape[2], kh, stride[0], pad[0], dil[0]);
  if (!h) return false;
  auto w = sweep_extent(c, op, "width", x.shape[3], kw, stride[1], pad[1], dil[1]);
  if (!w) return false;
  for (const Dim* d : {&*h, &*w})
    if (auto v = d->as_const(); v && *v <= 0) {
      c.fail(fmt::format("{} output size {}x{} is not positive: input {}, kernel {}x{}", op, h->str(), w->str(),
                         x.str(), kh.str(), kw.str()));
      return false;
    }
  ho = *h, wo = *w;
  return true;
}

bool image_input(InferCtx& c, const char* op) {
  const TensorType& x = c.input(0);
  if (is_float(x.dtype) && x.rank() == 4) return true;
  c.fail(fmt::format("{} needs a float image [N,C,H,W], got {}", op, x.str()), 0);
  return false;
}

// --- shape rules ----------------------------------------------------------------------

void infer_conv2d(InferCtx& c) {
  if (!image_input(c, "conv2d")) return;
  const TensorType& x = c.input(0);
  const TensorType& w = c.input(1);
  if (w.dtype != x.dtype || w.rank() != 4)
    return c.fail(fmt::format("conv2d weight must be {}[O,C/groups,kh,kw] for {}, got {}", dtype_name(x.dtype),
                              x.str(), w.str()), 1);
  int64_t groups = c.attrs.i("groups");
  if (groups < 1) return c.fail_attr(fmt::format("conv2d groups must be >= 1, got {}", groups), "groups");
  Ints stride, pad, dil;
  if (!pair_attr(c, "conv2d", "stride", 1, stride) || !pair_attr(c, "conv2d", "padding", 0, pad) ||
      !pair_attr(c, "conv2d", "dilation", 1, dil))
    return;
  // Each group of C/groups input channels feeds O/groups output channels.
  const Dim& C = x.shape[1];
  const Dim& O = w.shape[0];
  if (w.shape[1] * Dim(groups) != C)
    return c.fail(fmt::format("conv2d weight {} with groups {} expects {} input channel{}, got {}", w.str(), groups,
                              (w.shape[1] * Dim(groups)).str(), w.shape[1] * Dim(groups) == Dim(1) ? "" : "s", x.str()), 1);
  if (!Dim::divide(O, Dim(groups)))
    return c.fail_attr(fmt::format("conv2d groups {} does not divide the {} output channels of weight {}", groups,
                                   O.str(), w.str()), "groups");
  if (c.has_input(2) && c.input(2) != TensorType{x.dtype, {O}})
    return c.fail(fmt::format("conv2d bias must be {} for weight {}, got {}", TensorType{x.dtype, {O}}.str(),
                              w.str(), c.input(2).str()), 2);
  Dim ho, wo;
  if (!output_hw(c, "conv2d", x, w.shape[2], w.shape[3], stride, pad, dil, ho, wo)) return;
  c.out = {TensorType{x.dtype, {x.shape[0], O, ho, wo}}};
}

InferFn infer_pool(const char* op) {
  return [op](InferCtx& c) {
    if (!image_input(c, op)) return;
    const TensorType& x = c.input(0);
    Ints kernel, stride, pad;
    if (!pair_attr(c, op, "kernel", 1, kernel)) return;
    if (c.attrs.ints("stride").empty()) c.attrs.set("stride", kernel);  // PyTorch: stride defaults to kernel
    if (!pair_attr(c, op, "stride", 1, stride) || !pair_attr(c, op, "padding", 0, pad)) return;
    // PyTorch's limit: a larger pad would make windows that see only padding.
    if (pad[0] > kernel[0] / 2 || pad[1] > kernel[1] / 2)
      return c.fail_attr(fmt::format("{} padding {} must be at most half the kernel {}", op, ints_str(pad),
                                     ints_str(kernel)), "padding");
    Dim ho, wo;
    if (!output_hw(c, op, x, Dim(kernel[0]), Dim(kernel[1]), stride, pad, {1, 1}, ho, wo)) return;
    c.out = {TensorType{x.dtype, {x.shape[0], x.shape[1], ho, wo}}};
  };
}

// --- references -----------------------------------------------------------------------

void ref_conv2d(RefCtx& c) {
  const RefTensor& x = c.input(0);
  const RefTensor& w = c.input(1);
  const RefTensor* bias = c.in.at(2);
  RefTensor& out = c.out[0];
  const Ints& st = c.attrs().ints("stride");
  const Ints& pd = c.attrs().ints("padding");
  const Ints& dl = c.attrs().ints("dilation");
  int64_t groups = c.attrs().i("groups");
  int64_t N = x.shape[0], C = x.shape[1], H = x.shape[2], W = x.shape[3];
  int64_t O = w.shape[0], Cg = w.shape[1], KH = w.shape[2], KW = w.shape[3];
  int64_t HO = out.shape[2], WO = out.shape[3], Og = O / groups;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t o = 0; o < O; ++o) {
      int64_t c0 = (o / Og) * Cg;  // the first input channel of o's group
      for (int64_t i = 0; i < HO; ++i)
        for (int64_t j = 0; j < WO; ++j) {
          double acc = bias ? (*bias)[o] : 0.0;
          for (int64_t ci = 0; ci < Cg; ++ci)
            for (int64_t a = 0; a < KH; ++a) {
              int64_t h = i * st[0] - pd[0] + a * dl[0];
              if (h < 0 || h >= H) continue;  // zero padding: contributes nothing
              for (int64_t b = 0; b < KW; ++b) {
                int64_t v = j * st[1] - pd[1] + b * dl[1];
                if (v < 0 || v >= W) continue;
                acc += x[((n * C + c0 + ci) * H + h) * W + v] * w[((o * Cg + ci) * KH + a) * KW + b];
              }
            }
          out[((n * O + o) * HO + i) * WO + j] = acc;
        }
    }
}

// Max or average over each window; padding is -inf for the max (never chosen, since every
// window holds a real element) and 0 for the average, whose divisor is the full window
// (PyTorch's count_include_pad=True). A NaN is the maximum of its window (NaN propagates,
// as in PyTorch).
void ref_pool(RefCtx& c, bool max) {
  const RefTensor& x = c.input(0);
  RefTensor& out = c.out[0];
  const Ints& k = c.attrs().ints("kernel");
  const Ints& st = c.attrs().ints("stride");
  const Ints& pd = c.attrs().ints("padding");
  int64_t planes = x.shape[0] * x.shape[1], H = x.shape[2], W = x.shape[3];
  int64_t HO = out.shape[2], WO = out.shape[3];
  for (int64_t p = 0; p < planes; ++p)
    for (int64_t i = 0; i < HO; ++i)
      for (int64_t j = 0; j < WO; ++j) {
        double acc = max ? -std::numeric_limits<double>::infinity() : 0.0;
        for (int64_t a = 0; a < k[0]; ++a)
          for (int64_t b = 0; b < k[1]; ++b) {
            int64_t h = i * st[0] - pd[0] + a, v = j * st[1] - pd[1] + b;
            if (h < 0 || h >= H || v < 0 || v >= W) continue;
            double e = x[(p * H + h) * W + v];
            acc = !max ? acc + e : std::isnan(acc) || e > acc || std::isnan(e) ? (std::isnan(acc) ? acc : e) : acc;
          }
        out[(p * HO + i) * WO + j] = max ? acc : acc / static_cast<double>(k[0] * k[1]);
      }
}

}  // namespace

std::optional<Dim> window_sweep(const Dim& in, const Dim& kernel, int64_t stride, int64_t pad, int64_t dilation) {
  Dim num = in + Dim(2 * pad) - Dim(dilation) * (kernel - Dim(1)) - Dim(1);
  if (stride == 1) return num + Dim(1);
  if (auto n = num.as_const()) {
    int64_t q = *n >= 0 ? *n / stride : -((-*n + stride - 1) / stride);
    return Dim(q + 1);
  }
  if (auto q = Dim::divide(num, Dim(stride))) return *q + Dim(1);
  return std::nullopt;
}

bool pair_attr(InferCtx& c, const char* op, const char* name, int64_t min, Ints& hw) {
  hw = c.attrs.ints(name);
  if (hw.size() != 1 && hw.size() != 2) {
    c.fail_attr(fmt::format("{} {} must have 1 or 2 entries, got {}", op, name, ints_str(hw)), name);
    return false;
  }
  if (hw.size() == 1) hw.push_back(hw[0]);
  if (hw[0] < min || hw[1] < min) {
    c.fail_attr(fmt::format("{} {} must be {}, got {}", op, name, min > 0 ? "positive" : "non-negative",
                            ints_str(c.attrs.ints(name))), name);
    return false;
  }
  c.attrs.set(name, hw);
  return true;
}

// --- test domains ---------------------------------------------------------------------

// NCHW convolutions with every window attribute varied (stride, padding, dilation,
// groups), with and without a bias; shared with the gradient ops' domains (grad_ops.cc).
std::vector<OpExample> conv2d_examples(ExampleRng& rng) {
  using examples::pick;
  std::vector<OpExample> out;
  for (int rep = 0; rep < 4; ++rep) {
    const int64_t groups = rep == 3 ? 2 : 1, N = pick(rng, 1, 2), C = groups * pick(rng, 1, 2), O = groups * pick(rng, 1, 3);
    const int64_t kh = pick(rng, 1, 3), kw = pick(rng, 1, 3), stride = pick(rng, 1, 2), pad = pick(rng, 0, 1),
                  dil = rep == 2 ? 2 : 1;
    const int64_t H = dil * (kh - 1) + pick(rng, 1, 4), W = dil * (kw - 1) + pick(rng, 1, 4);
    OpExample e;
    e.inputs = {examples::values(rng, DType::F32, {N, C, H, W}, Domain{-1, 1}),
                examples::values(rng, DType::F32, {O, C / groups, kh, kw}, Domain{-1, 1}), std::nullopt};
    if (rep % 2) e.inputs[2] = examples::values(rng, DType::F32, {O}, Domain{-1, 1});
    e.attrs.set("stride", Ints{stride});
    e.attrs.set("padding", Ints{pad});
    e.attrs.set("dilation", Ints{dil});
    e.attrs.set("groups", groups);
    e.label = fmt::format("x {} w {} stride {} padding {} dilation {} groups {}{}", e.inputs[0]->shape_str(),
                          e.inputs[1]->shape_str(), stride, pad, dil, groups, rep % 2 ? " bias" : "");
    out.push_back(std::move(e));
  }
  return out;
}

// Windows of 1 to 3 with the default stride (the kernel) or 1 or 2, padding up to half
// the kernel.
std::vector<OpExample> pool_examples(ExampleRng& rng) {
  using examples::pick;
  std::vector<OpExample> out;
  for (int rep = 0; rep < 4; ++rep) {
    const int64_t k = pick(rng, 1, 3), pad = pick(rng, 0, k / 2);
    OpExample e;
    e.inputs = {examples::values(rng, DType::F32, {pick(rng, 1, 2), pick(rng, 1, 3), k + pick(rng, 0, 4), k + pick(rng, 0, 4)},
                                 Domain{-2, 2})};
    e.attrs.set("kernel", Ints{k});
    if (rep > 0) e.attrs.set("stride", Ints{pick(rng, 1, 2)});
    e.attrs.set("padding", Ints{pad});
    e.label = fmt::format("x {} kernel {} padding {}", e.inputs[0]->shape_str(), k, pad);
    out.push_back(std::move(e));
  }
  return out;
}

void register_conv_ops(OpRegistry& r) {
  r.def(OpKind::Conv2d)
      .signature("x: tensor, w: tensor, bias: tensor? = none, stride: ints = [1], padding: ints = [0], "
                 "dilation: ints = [1], groups: int = 1")
      .fusion(FusionKind::Opaque).library().infer(infer_conv2d).reference(ref_conv2d).autocast(AutocastPolicy::Lower)
      .grad(grads::conv2d)
      .flops([](const Graph& g, const Node& n) {  // output elements times C/groups * kh * kw, a multiply-add each
        const Shape& w = g.type(n.inputs.at(1)).shape;  // [O, C/groups, kh, kw]
        Dim out(1);
        for (const Dim& d : n.outputs[0].shape) out = out * d;
        return Dim(2) * out * w.at(1) * w.at(2) * w.at(3);
      })
      .examples(conv2d_examples)
      .nonfinite(NonFinite::Superset)  // an infinite weight on the zero padding: NaN on some backends
      .summary("2-D convolution of NCHW images [N,C,H,W] with weights [O,C/groups,kh,kw], zero padding");
  r.def(OpKind::MaxPool2d).signature("x: tensor, kernel: ints, stride: ints = [], padding: ints = [0]")
      .fusion(FusionKind::Reduction).library().infer(infer_pool("max_pool2d"))
      .reference([](RefCtx& c) { ref_pool(c, true); })
      .grad(grads::max_pool2d).examples(pool_examples)
      .summary("the maximum of each kernel window of NCHW images (stride defaults to the kernel)");
  r.def(OpKind::AvgPool2d).signature("x: tensor, kernel: ints, stride: ints = [], padding: ints = [0]")
      .fusion(FusionKind::Reduction).library().infer(infer_pool("avg_pool2d"))
      .reference([](RefCtx& c) { ref_pool(c, false); })
      .grad(grads::avg_pool2d).examples(pool_examples)
      .summary("the mean of each kernel window of NCHW images, padding counted as zeros");
}

}  // namespace modelc
