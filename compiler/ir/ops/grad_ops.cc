// The ops that gradients are built from where no composition of other ops will do:
// one_hot (also callable), and the internal embedding_grad (a scatter-add),
// conv2d_grad_input, conv2d_grad_weight, max_pool2d_grad and avg_pool2d_grad.
//
// The window attributes have the names and the canonical two-entry forms of conv2d and
// the pools (compiler/ir/ops/conv.cc). Each *_grad op is told the shape of the input it
// differentiates (the output extent of a strided sweep does not determine it), and its
// shape rule checks that the incoming gradient has the extent that sweep gives. The
// references are direct loops, PyTorch's semantics; max_pool2d_grad sends each window's
// gradient to the first maximum of the window in row-major order (padding never wins).
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


// Checks that `grad` [N,O,HO,WO] is what a sweep of (kh,kw) over `in` [N,C,H,W] gives in
// its spatial extents; `in_what` names the input shape in the message.
bool check_sweep(InferCtx& c, const char* op, const TensorType& grad, int grad_input, const Shape& in,
                 const Dim& kh, const Dim& kw, const Ints& stride, const Ints& pad, const Ints& dil) {
  auto ho = window_sweep(in[2], kh, stride[0], pad[0], dil[0]);
  auto wo = window_sweep(in[3], kw, stride[1], pad[1], dil[1]);
  if (!ho || !wo || *ho != grad.shape[2] || *wo != grad.shape[3]) {
    c.fail(fmt::format("{} gradient {} does not fit input {} (a {}x{} window, stride {}, padding {}, dilation {} "
                       "gives {}x{})", op, grad.str(), shape_str(in), kh.str(), kw.str(), ints_str(stride),
                       ints_str(pad), ints_str(dil), ho ? ho->str() : "?", wo ? wo->str() : "?"), grad_input);
    return false;
  }
  return true;
}

bool image(InferCtx& c, const char* op, int i, const char* what) {
  const TensorType& t = c.input(i);
  if (is_float(t.dtype) && t.rank() == 4) return true;
  c.fail(fmt::format("{} needs a float {} [N,C,H,W], got {}", op, what, t.str()), i);
  return false;
}

bool shape4(InferCtx& c, const char* op, const char* name, Shape& s) {
  s = c.attrs.shape(name);
  if (s.size() == 4) return true;
  c.fail_attr(fmt::format("{} {} must have 4 dimensions, got {}", op, name, shape_str(s)), name);
  return false;
}

bool conv_attrs(InferCtx& c, const char* op, Ints& stride, Ints& pad, Ints& dil, int64_t& groups) {
  groups = c.attrs.i("groups");
  if (groups < 1) {
    c.fail_attr(fmt::format("{} groups must be >= 1, got {}", op, groups), "groups");
    return false;
  }
  return pair_attr(c, op, "stride", 1, stride) && pair_attr(c, op, "padding", 0, pad) &&
         pair_attr(c, op, "dilation", 1, dil);
}

bool pool_attrs(InferCtx& c, const char* op, Ints& kernel, Ints& stride, Ints& pad) {
  if (!pair_attr(c, op, "kernel", 1, kernel)) return false;
  if (c.attrs.ints("stride").empty()) c.attrs.set("stride", kernel);
  return pair_attr(c, op, "stride", 1, stride) && pair_attr(c, op, "padding", 0, pad);
}

// --- shape rules ----------------------------------------------------------------------

void infer_one_hot(InferCtx& c) {
  const TensorType& ids = c.input(0);
  if (ids.dtype != DType::I32) return c.fail("one_hot ids must be i32, got " + ids.str(), 0);
  int64_t classes = c.attrs.i("classes");
  if (classes < 1) return c.fail_attr(fmt::format("one_hot classes must be >= 1, got {}", classes), "classes");
  TensorType t{DType::F32, ids.shape};
  t.shape.push_back(Dim(classes));
  c.out = {t};
}

void infer_embedding_grad(InferCtx& c) {
  const TensorType& ids = c.input(0);
  const TensorType& g = c.input(1);
  if (ids.dtype != DType::I32) return c.fail("embedding_grad ids must be i32, got " + ids.str(), 0);
  if (!is_float(g.dtype) || g.rank() != ids.rank() + 1 || !std::equal(ids.shape.begin(), ids.shape.end(), g.shape.begin()))
    return c.fail(fmt::format("embedding_grad gradient must be float [{}..., W] for ids {}, got {}",
                              shape_str(ids.shape), ids.str(), g.str()), 1);
  int64_t rows = c.attrs.i("rows");
  if (rows < 1) return c.fail_attr(fmt::format("embedding_grad rows must be >= 1, got {}", rows), "rows");
  c.out = {TensorType{DType::F32, {Dim(rows), g.shape.back()}}};
}

void infer_conv2d_grad_input(InferCtx& c) {
  const char* op = "conv2d_grad_input";
  if (!image(c, op, 0, "gradient")) return;
  const TensorType& g = c.input(0);
  const TensorType& w = c.input(1);
  if (w.dtype != g.dtype || w.rank() != 4)
    return c.fail(fmt::format("{} weight must be {}[O,C/groups,kh,kw], got {}", op, dtype_name(g.dtype), w.str()), 1);
  Shape in;
  Ints stride, pad, dil;
  int64_t groups = 0;
  if (!shape4(c, op, "input_shape", in) || !conv_attrs(c, op, stride, pad, dil, groups)) return;
  if (w.shape[1] * Dim(groups) != in[1] || !Dim::divide(w.shape[0], Dim(groups)))
    return c.fail(fmt::format("{} weight {} with groups {} does not fit input {}", op, w.str(), groups,
                              shape_str(in)), 1);
  if (g.shape[0] != in[0] || g.shape[1] != w.shape[0])
    return c.fail(fmt::format("{} gradient {} does not fit input {} and weight {}", op, g.str(), shape_str(in),
                              w.str()), 0);
  if (!check_sweep(c, op, g, 0, in, w.shape[2], w.shape[3], stride, pad, dil)) return;
  c.out = {TensorType{g.dtype, in}};
}

void infer_conv2d_grad_weight(InferCtx& c) {
  const char* op = "conv2d_grad_weight";
  if (!image(c, op, 0, "input") || !image(c, op, 1, "gradient")) return;
  const TensorType& x = c.input(0);
  const TensorType& g = c.input(1);
  if (g.dtype != x.dtype)
    return c.fail(fmt::format("dtype mismatch in {}: {} and {}", op, x.str(), g.str()), 1);
  Shape ws;
  Ints stride, pad, dil;
  int64_t groups = 0;
  if (!shape4(c, op, "weight_shape", ws) || !conv_attrs(c, op, stride, pad, dil, groups)) return;
  if (ws[1] * Dim(groups) != x.shape[1] || !Dim::divide(ws[0], Dim(groups)))
    return c.fail_attr(fmt::format("{} weight_shape {} with groups {} does not fit input {}", op, shape_str(ws),
                                   groups, x.str()), "weight_shape");
  if (g.shape[0] != x.shape[0] || g.shape[1] != ws[0])
    return c.fail(fmt::format("{} gradient {} does not fit input {} and weight_shape {}", op, g.str(), x.str(),
                              shape_str(ws)), 1);
  if (!check_sweep(c, op, g, 1, x.shape, ws[2], ws[3], stride, pad, dil)) return;
  c.out = {TensorType{x.dtype, ws}};
}

void infer_max_pool2d_grad(InferCtx& c) {
  const char* op = "max_pool2d_grad";
  if (!image(c, op, 0, "input") || !image(c, op, 1, "gradient")) return;
  const TensorType& x = c.input(0);
  const TensorType& g = c.input(1);
  if (g.dtype != x.dtype) return c.fail(fmt::format("dtype mismatch in {}: {} and {}", op, x.str(), g.str()), 1);
  Ints kernel, stride, pad;
  if (!pool_attrs(c, op, kernel, stride, pad)) return;
  if (g.shape[0] != x.shape[0] || g.shape[1] != x.shape[1])
    return c.fail(fmt::format("{} gradient {} does not fit input {}", op, g.str(), x.str()), 1);
  if (!check_sweep(c, op, g, 1, x.shape, Dim(kernel[0]), Dim(kernel[1]), stride, pad, {1, 1})) return;
  c.out = {x};
}

void infer_avg_pool2d_grad(InferCtx& c) {
  const char* op = "avg_pool2d_grad";
  if (!image(c, op, 0, "gradient")) return;
  const TensorType& g = c.input(0);
  Shape in;
  Ints kernel, stride, pad;
  if (!shape4(c, op, "input_shape", in) || !pool_attrs(c, op, kernel, stride, pad)) return;
  if (g.shape[0] != in[0] || g.shape[1] != in[1])
    return c.fail(fmt::format("{} gradient {} does not fit input {}", op, g.str(), shape_str(in)), 0);
  if (!check_sweep(c, op, g, 0, in, Dim(kernel[0]), Dim(kernel[1]), stride, pad, {1, 1})) return;
  c.out = {TensorType{g.dtype, in}};
}

// --- references -----------------------------------------------------------------------

void ref_one_hot(RefCtx& c) {
  const RefTensor& ids = c.input(0);
  RefTensor& out = c.out[0];
  int64_t classes = c.attrs().i("classes");
  std::fill(out.data.begin(), out.data.end(), 0.0);
  for (int64_t i = 0; i < ids.numel(); ++i) {
    auto id = static_cast<int64_t>(ids[i]);
    if (id >= 0 && id < classes) out[i * classes + id] = 1.0;  // out of range: a zero row
  }
}

void ref_embedding_grad(RefCtx& c) {
  const RefTensor& ids = c.input(0);
  const RefTensor& g = c.input(1);
  RefTensor& out = c.out[0];
  int64_t rows = out.shape[0], width = out.shape[1];
  std::fill(out.data.begin(), out.data.end(), 0.0);
  for (int64_t i = 0; i < ids.numel(); ++i) {
    auto id = static_cast<int64_t>(ids[i]);
    if (id < 0 || id >= rows)
      throw UserError(fmt::format("embedding_grad: index {} is out of range for a table of {} rows", id, rows));
    for (int64_t k = 0; k < width; ++k) out[id * width + k] += g[i * width + k];
  }
}

struct ConvGeom {
  int64_t N, C, H, W, O, Cg, KH, KW, HO, WO, Og;
  Ints st, pd, dl;
};

ConvGeom conv_geom(const RefCtx& c, const std::vector<int64_t>& x, const std::vector<int64_t>& w,
                   const std::vector<int64_t>& g) {
  int64_t groups = c.attrs().i("groups");
  return {x[0], x[1], x[2], x[3], w[0], w[1], w[2], w[3], g[2], g[3], w[0] / groups,
          c.attrs().ints("stride"), c.attrs().ints("padding"), c.attrs().ints("dilation")};
}

// Calls f(x offset, w offset, grad offset) for every product term of the forward
// convolution, exactly as ref_conv2d sums them.
template <class F>
void conv_terms(const ConvGeom& k, F f) {
  for (int64_t n = 0; n < k.N; ++n)
    for (int64_t o = 0; o < k.O; ++o) {
      int64_t c0 = (o / k.Og) * k.Cg;
      for (int64_t i = 0; i < k.HO; ++i)
        for (int64_t j = 0; j < k.WO; ++j) {
          int64_t go = ((n * k.O + o) * k.HO + i) * k.WO + j;
          for (int64_t ci = 0; ci < k.Cg; ++ci)
            for (int64_t a = 0; a < k.KH; ++a) {
              int64_t h = i * k.st[0] - k.pd[0] + a * k.dl[0];
              if (h < 0 || h >= k.H) continue;
              for (int64_t b = 0; b < k.KW; ++b) {
                int64_t v = j * k.st[1] - k.pd[1] + b * k.dl[1];
                if (v < 0 || v >= k.W) continue;
                f(((n * k.C + c0 + ci) * k.H + h) * k.W + v, ((o * k.Cg + ci) * k.KH + a) * k.KW + b, go);
              }
            }
        }
    }
}

void ref_conv2d_grad_input(RefCtx& c) {
  const RefTensor& g = c.input(0);
  const RefTensor& w = c.input(1);
  RefTensor& out = c.out[0];
  std::fill(out.data.begin(), out.data.end(), 0.0);
  conv_terms(conv_geom(c, out.shape, w.shape, g.shape),
             [&](int64_t xo, int64_t wo, int64_t go) { out[xo] += w[wo] * g[go]; });
}

void ref_conv2d_grad_weight(RefCtx& c) {
  const RefTensor& x = c.input(0);
  const RefTensor& g = c.input(1);
  RefTensor& out = c.out[0];
  std::fill(out.data.begin(), out.data.end(), 0.0);
  conv_terms(conv_geom(c, x.shape, out.shape, g.shape),
             [&](int64_t xo, int64_t wo, int64_t go) { out[wo] += x[xo] * g[go]; });
}

// Sends each window's gradient back: to its first maximum (max; a NaN is the maximum, as the
// forward takes it: PyTorch's rule) or spread over the whole window, padding included (avg,
// whose padding share is dropped).
void ref_pool_grad(RefCtx& c, bool max) {
  const RefTensor& g = c.input(max ? 1 : 0);
  const RefTensor* x = max ? &c.input(0) : nullptr;
  RefTensor& out = c.out[0];
  const Ints& k = c.attrs().ints("kernel");
  const Ints& st = c.attrs().ints("stride");
  const Ints& pd = c.attrs().ints("padding");
  int64_t planes = out.shape[0] * out.shape[1], H = out.shape[2], W = out.shape[3];
  int64_t HO = g.shape[2], WO = g.shape[3];
  double scale = 1.0 / static_cast<double>(k[0] * k[1]);
  std::fill(out.data.begin(), out.data.end(), 0.0);
  for (int64_t p = 0; p < planes; ++p)
    for (int64_t i = 0; i < HO; ++i)
      for (int64_t j = 0; j < WO; ++j) {
        double gv = g[(p * HO + i) * WO + j];
        int64_t best = -1;
        double best_v = -std::numeric_limits<double>::infinity();
        for (int64_t a = 0; a < k[0]; ++a)
          for (int64_t b = 0; b < k[1]; ++b) {
            int64_t h = i * st[0] - pd[0] + a, v = j * st[1] - pd[1] + b;
            if (h < 0 || h >= H || v < 0 || v >= W) continue;
            int64_t at = (p * H + h) * W + v;
            if (!max) out[at] += gv * scale;
            else if (best < 0 || (*x)[at] > best_v || (std::isnan((*x)[at]) && !std::isnan(best_v)))
              best = at, best_v = (*x)[at];
          }
        if (max && best >= 0) out[best] += gv;
      }
}

// --- test domains: each gradient op called as the gradient of its forward op's domain ----

// One call of `op` per call of the forward op's domain: `make` builds its inputs from the
// forward call and a random gradient of the forward output's shape.
template <class Make>
std::vector<OpExample> from_forward(ExampleRng& rng, OpKind forward, std::vector<OpExample> fwd, Make make) {
  std::vector<OpExample> out;
  for (OpExample& f : fwd) {
    RefTensor g = examples::values(rng, DType::F32, examples::out_shape(forward, f), Domain{-1, 1});
    OpExample e = make(f, std::move(g));
    e.label = "the gradient of " + f.label;
    out.push_back(std::move(e));
  }
  return out;
}

Shape shape_of(const RefTensor& t) { return Shape(t.shape.begin(), t.shape.end()); }

Attrs conv_attrs(const OpExample& f) {
  Attrs a;
  for (const char* k : {"stride", "padding", "dilation", "groups"})
    if (const AttrValue* v = f.attrs.find(k)) a.set(k, *v);
  return a;
}

Attrs pool_attrs(const OpExample& f) {
  Attrs a;
  for (const char* k : {"kernel", "stride", "padding"})
    if (const AttrValue* v = f.attrs.find(k)) a.set(k, *v);
  return a;
}

std::vector<OpExample> embedding_grad_examples(ExampleRng& rng) {
  std::vector<OpExample> out;
  for (int rep = 0; rep < 3; ++rep) {
    const int64_t rows = examples::pick(rng, 1, 7);
    std::vector<int64_t> ids = examples::shape(rng, 0, 3), g = ids;
    g.push_back(examples::pick(rng, 1, 5));
    OpExample e;
    e.label = fmt::format("{} rows", rows);
    e.inputs = {examples::ids(rng, ids, rows), examples::values(rng, DType::F32, g, Domain{-1, 1})};
    e.attrs.set("rows", rows);
    out.push_back(std::move(e));
  }
  return out;
}

std::vector<OpExample> conv2d_grad_input_examples(ExampleRng& rng) {
  return from_forward(rng, OpKind::Conv2d, conv2d_examples(rng), [](const OpExample& f, RefTensor g) {
    OpExample e;
    e.inputs = {std::move(g), f.inputs[1]};
    e.attrs = conv_attrs(f);
    e.attrs.set("input_shape", shape_of(*f.inputs[0]));
    return e;
  });
}

std::vector<OpExample> conv2d_grad_weight_examples(ExampleRng& rng) {
  return from_forward(rng, OpKind::Conv2d, conv2d_examples(rng), [](const OpExample& f, RefTensor g) {
    OpExample e;
    e.inputs = {f.inputs[0], std::move(g)};
    e.attrs = conv_attrs(f);
    e.attrs.set("weight_shape", shape_of(*f.inputs[1]));
    return e;
  });
}

std::vector<OpExample> max_pool2d_grad_examples(ExampleRng& rng) {
  return from_forward(rng, OpKind::MaxPool2d, pool_examples(rng), [](const OpExample& f, RefTensor g) {
    OpExample e;
    e.inputs = {f.inputs[0], std::move(g)};
    e.attrs = pool_attrs(f);
    return e;
  });
}

std::vector<OpExample> avg_pool2d_grad_examples(ExampleRng& rng) {
  return from_forward(rng, OpKind::AvgPool2d, pool_examples(rng), [](const OpExample& f, RefTensor g) {
    OpExample e;
    e.inputs = {std::move(g)};
    e.attrs = pool_attrs(f);
    e.attrs.set("input_shape", shape_of(*f.inputs[0]));
    return e;
  });
}

// Ids in [-1, classes]: the ones out of range give rows of zeros.
std::vector<OpExample> one_hot_examples(ExampleRng& rng) {
  std::vector<OpExample> out;
  for (int rep = 0; rep < 3; ++rep) {
    const int64_t classes = examples::pick(rng, 1, 6);
    OpExample e;
    e.label = fmt::format("{} classes", classes);
    e.inputs = {examples::values(rng, DType::I32, examples::shape(rng, 0, 3), Domain{-1.0, static_cast<double>(classes)})};
    e.attrs.set("classes", classes);
    e.grad = false;
    out.push_back(std::move(e));
  }
  return out;
}

const char* kConvAttrs = "stride: ints = [1], padding: ints = [0], dilation: ints = [1], groups: int = 1";
const char* kPoolAttrs = "kernel: ints, stride: ints = [], padding: ints = [0]";

}  // namespace

void register_grad_ops(OpRegistry& r) {
  r.def(OpKind::OneHot).signature("ids: tensor, classes: int").fusion(FusionKind::Injective)
      .infer(infer_one_hot).reference(ref_one_hot).examples(one_hot_examples)
      .no_grad("its input is integer ids")
      .summary("f32 [..., classes] for i32 ids [...]: 1 where the id equals the class, else 0 (an id out of "
               "range: a row of zeros)");
  r.def(OpKind::EmbeddingGrad).internal().no_grad("a gradient op (gradients are first-order)").signature("ids: tensor, grad: tensor, rows: int")
      .fusion(FusionKind::Opaque).library().infer(infer_embedding_grad).reference(ref_embedding_grad)
      .examples(embedding_grad_examples).index_operand({0, -1, 0, "rows", "rows of the table"})
      .summary("f32 [rows, W]: the rows of grad [..., W] added up at their ids (embedding's gradient)");
  // Differentiable: it is conv_transpose2d's kernel (compiler/ir/ops/composite_conv.cc).
  r.def(OpKind::Conv2dGradInput).internal().grad(grads::conv2d_grad_input)
      .signature(std::string("grad: tensor, w: tensor, input_shape: shape, ") + kConvAttrs)
      .fusion(FusionKind::Opaque).library().infer(infer_conv2d_grad_input).reference(ref_conv2d_grad_input)
      .autocast(AutocastPolicy::Lower).examples(conv2d_grad_input_examples).nonfinite(NonFinite::Superset)
      .summary("conv2d's gradient with respect to its input [N,C,H,W] = input_shape");
  r.def(OpKind::Conv2dGradWeight).internal().no_grad("a gradient op (gradients are first-order)")
      .signature(std::string("x: tensor, grad: tensor, weight_shape: shape, ") + kConvAttrs)
      .fusion(FusionKind::Opaque).library().infer(infer_conv2d_grad_weight).reference(ref_conv2d_grad_weight)
      .autocast(AutocastPolicy::Lower).examples(conv2d_grad_weight_examples).nonfinite(NonFinite::Superset)
      .summary("conv2d's gradient with respect to its weight [O,C/groups,kh,kw] = weight_shape");
  r.def(OpKind::MaxPool2dGrad).internal().no_grad("a gradient op (gradients are first-order)").signature(std::string("x: tensor, grad: tensor, ") + kPoolAttrs)
      .fusion(FusionKind::Opaque).library().infer(infer_max_pool2d_grad)
      .reference([](RefCtx& c) { ref_pool_grad(c, true); }).examples(max_pool2d_grad_examples)
      .summary("max_pool2d's gradient: each window's to its first maximum in row-major order");
  r.def(OpKind::AvgPool2dGrad).internal().no_grad("a gradient op (gradients are first-order)").signature(std::string("grad: tensor, input_shape: shape, ") + kPoolAttrs)
      .fusion(FusionKind::Opaque).library().infer(infer_avg_pool2d_grad)
      .reference([](RefCtx& c) { ref_pool_grad(c, false); }).examples(avg_pool2d_grad_examples)
      .summary("avg_pool2d's gradient: each window's spread evenly over its kernel[0]*kernel[1] places");
}

}  // namespace modelc
