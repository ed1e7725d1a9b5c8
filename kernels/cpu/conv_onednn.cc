// conv2d and its gradients through oneDNN 2.6 (when the runtime is built with it). The
// buffers are plain (nchw, oihw / goihw); the primitives usually run on oneDNN's blocked
// layouts with reorders around them (see layout_policy); oneDNN's primitive cache makes
// the per-call primitive creation cheap. oneDNN numbers
// dilation from 0 and takes an explicit right padding: PyTorch's floor semantics give a
// right padding of (HO-1)*stride + span - H - left. The calls split the batch over the
// runtime's pool and run oneDNN single-threaded inside each piece. Without oneDNN, or when the right
// padding would be negative, the calls fall back to im2col.
// conv2d's epilogue (runtime/base/program.h, ints["epilogue"]): its bias (its own input 2, or the
// epilogue's input 3) is the primitive's bias argument; the activation is ours
// (kernels/cpu/epilogue.h), applied to each sub-batch right after its primitive while it is
// in cache. oneDNN's eltwise post-ops are not used: its relu is max(x, 0), which turns NaN
// into 0, and its tanh and logistic clamp their input first (NaN becomes a finite value);
// IEEE and PyTorch keep NaN. Its gelus also differ from the compiler's definitions by up to
// 2e-4 relative near x = -4.
#include <fmt/format.h>

#include <dlfcn.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>

#include "kernels/cpu/conv.h"
#include "kernels/cpu/epilogue.h"

#ifdef MODELC_HAVE_DNNL
#include <dnnl.hpp>
#endif

namespace modelc::kernels {

bool onednn_available() {
#ifdef MODELC_HAVE_DNNL
  return true;
#else
  return false;
#endif
}

// Sets oneDNN's OpenMP thread count when libgomp is loaded (found at run time, so the
// runtime need not link it).
void set_onednn_threads(int threads) {
  using Fn = void (*)(int);
  static Fn fn = reinterpret_cast<Fn>(dlsym(RTLD_DEFAULT, "omp_set_num_threads"));
  if (fn) fn(threads < 1 ? 1 : threads);
}

#ifdef MODELC_HAVE_DNNL

namespace {

using dnnl::memory;
using tag = memory::format_tag;
using dt = memory::data_type;

dnnl::engine& engine() {
  static dnnl::engine e(dnnl::engine::kind::cpu, 0);
  return e;
}

// Whether a primitive may choose its own (blocked) layouts, with reorders to and from the
// plain buffers around it. Measured (docs/performance.md): blocked layouts win except for
// the input gradient of a convolution with few input channels per group, where oneDNN's
// blocked backward-data kernel is several times slower than its plain gemm one.
// MODELC_ONEDNN_LAYOUT=plain|any forces one choice for every call.
enum class Layout { Auto, Plain, Any };

Layout layout_policy() {
  static const Layout l = [] {
    const char* e = std::getenv("MODELC_ONEDNN_LAYOUT");
    std::string v = e ? e : "";
    return v == "plain" ? Layout::Plain : v == "any" ? Layout::Any : Layout::Auto;
  }();
  return l;
}

bool blocked_for(bool backward_data, int64_t channels_per_group) {
  switch (layout_policy()) {
    case Layout::Plain: return false;
    case Layout::Any: return true;
    case Layout::Auto: return !backward_data || channels_per_group >= 16;
  }
  return false;
}

memory::desc any_of(const memory::desc& d, bool blocked) {
  return blocked ? memory::desc(d.dims(), dt::f32, tag::any) : d;
}

// A primitive's operand: the user's memory, or a reordered copy in the layout `want`.
memory to_layout(const memory::desc& want, const memory& user, dnnl::stream& s) {
  if (want == user.get_desc()) return user;
  memory m(want, engine());
  dnnl::reorder(user, m).execute(s, const_cast<memory&>(user), m);
  return m;
}

struct Descs {
  memory::desc src, wei, dst;
  memory::dims strides, dilates, pad_l, pad_r;
  bool ok = true;  // false: oneDNN cannot express it (negative right padding)
};

Descs descs(const ConvGeom& g) {
  Descs d;
  d.src = memory::desc({g.N, g.C, g.H, g.W}, dt::f32, tag::nchw);
  d.dst = memory::desc({g.N, g.O, g.HO, g.WO}, dt::f32, tag::nchw);
  d.wei = g.groups > 1 ? memory::desc({g.groups, g.Og, g.Cg, g.KH, g.KW}, dt::f32, tag::goihw)
                       : memory::desc({g.O, g.Cg, g.KH, g.KW}, dt::f32, tag::oihw);
  d.strides = {g.sh, g.sw};
  d.dilates = {g.dh - 1, g.dw - 1};
  d.pad_l = {g.ph, g.pw};
  int64_t rh = (g.HO - 1) * g.sh + g.dh * (g.KH - 1) + 1 - g.H - g.ph;
  int64_t rw = (g.WO - 1) * g.sw + g.dw * (g.KW - 1) + 1 - g.W - g.pw;
  d.pad_r = {rh, rw};
  d.ok = rh >= 0 && rw >= 0;
  return d;
}

dnnl::convolution_forward::primitive_desc forward_pd(const Descs& d, const memory::desc* bias, bool blocked) {
  auto desc = bias ? dnnl::convolution_forward::desc(dnnl::prop_kind::forward_training, dnnl::algorithm::convolution_direct,
                                                     any_of(d.src, blocked), any_of(d.wei, blocked), *bias, any_of(d.dst, blocked), d.strides,
                                                     d.dilates, d.pad_l, d.pad_r)
                   : dnnl::convolution_forward::desc(dnnl::prop_kind::forward_training, dnnl::algorithm::convolution_direct,
                                                     any_of(d.src, blocked), any_of(d.wei, blocked), any_of(d.dst, blocked), d.strides,
                                                     d.dilates, d.pad_l, d.pad_r);
  return dnnl::convolution_forward::primitive_desc(desc, engine());
}

template <class F>
void guarded(const LibCall& c, F f) {
  try {
    f();
  } catch (const dnnl::error& e) {
    c.fail(fmt::format("oneDNN failed: {} (status {})", e.what(), static_cast<int>(e.status)));
  }
}

}  // namespace

namespace {

// Runs body(piece, n0, n1) on `pieces` consecutive sub-batches of the N images, spread over the
// pool; oneDNN runs single-threaded inside each, so the pool's --threads is the only
// parallelism (OpenMP teams under a shared, oversubscribed CPU stall badly: see
// docs/performance.md).
template <class F>
void over_batches(const LibCall& c, int64_t N, int64_t pieces, F body) {
  c.pool->parallel_for(pieces, 1, [&](int64_t p0, int64_t p1) {
    set_onednn_threads(1);
    for (int64_t p = p0; p < p1; ++p) {
      int64_t n0 = p * N / pieces, n1 = (p + 1) * N / pieces;
      if (n0 < n1) guarded(c, [&] { body(p, n0, n1); });
    }
  });
}

ConvGeom sub_batch(ConvGeom g, int64_t n0, int64_t n1) {
  g.N = n1 - n0;
  return g;
}

}  // namespace

void conv2d_onednn(const LibCall& c) {
  c.expect_arity(2, 4, 1, 1);
  const TensorArg& x = c.in(0);
  const TensorArg& w = c.in(1);
  const TensorArg& y = c.out(0);
  ConvGeom g = conv_geometry(c, x, w, y, "input", "weight", "output");
  const ConvEpilogue epi = conv_epilogue(c, g);
  const float* bias = epi.bias;
  if (!descs(g).ok) return conv2d_im2col(c);
  over_batches(c, g.N, c.pool->chunks_for(g.N, 1), [&](int64_t, int64_t n0, int64_t n1) {
    Descs d = descs(sub_batch(g, n0, n1));
    memory::desc bmd({g.O}, dt::f32, tag::x);
    auto pd = forward_pd(d, bias ? &bmd : nullptr, blocked_for(false, g.Cg));
    dnnl::stream s(engine());
    memory user_dst(d.dst, engine(), y.f32() + n0 * g.O * g.HO * g.WO);
    memory dst = pd.dst_desc() == d.dst ? user_dst : memory(pd.dst_desc(), engine());
    memory src(d.src, engine(), x.f32() + n0 * g.C * g.H * g.W);
    std::unordered_map<int, memory> args{{DNNL_ARG_SRC, to_layout(pd.src_desc(), src, s)},
                                         {DNNL_ARG_WEIGHTS, to_layout(pd.weights_desc(), memory(d.wei, engine(), w.data), s)},
                                         {DNNL_ARG_DST, dst}};
    if (bias) args.emplace(DNNL_ARG_BIAS, memory(bmd, engine(), const_cast<float*>(bias)));
    dnnl::convolution_forward(pd).execute(s, args);
    if (dst != user_dst) dnnl::reorder(dst, user_dst).execute(s, dst, user_dst);
    s.wait();
    apply_activation(epi.act, y.f32() + n0 * g.O * g.HO * g.WO, (n1 - n0) * g.O * g.HO * g.WO);
  });
}

void conv2d_grad_input_onednn(const LibCall& c) {
  c.expect_arity(2, 2, 1, 1);
  const TensorArg& gy = c.in(0);
  const TensorArg& w = c.in(1);
  const TensorArg& dx = c.out(0);
  ConvGeom g = conv_geometry(c, dx, w, gy, "input gradient", "weight", "output gradient");
  std::vector<int64_t> given = c.ints_or("input_shape", {});
  if (!given.empty() && given != dx.shape) return conv2d_grad_input_im2col(c);  // it reports the mismatch
  if (!descs(g).ok) return conv2d_grad_input_im2col(c);
  over_batches(c, g.N, c.pool->chunks_for(g.N, 1), [&](int64_t, int64_t n0, int64_t n1) {
    Descs d = descs(sub_batch(g, n0, n1));
    bool blocked = blocked_for(true, g.Cg);
    auto hint = forward_pd(d, nullptr, blocked);
    dnnl::convolution_backward_data::desc desc(dnnl::algorithm::convolution_direct, any_of(d.src, blocked),
                                               any_of(d.wei, blocked), any_of(d.dst, blocked), d.strides, d.dilates,
                                               d.pad_l, d.pad_r);
    dnnl::convolution_backward_data::primitive_desc pd(desc, engine(), hint);
    dnnl::stream s(engine());
    memory user_dx(d.src, engine(), dx.f32() + n0 * g.C * g.H * g.W);
    memory gx = pd.diff_src_desc() == d.src ? user_dx : memory(pd.diff_src_desc(), engine());
    memory gout(d.dst, engine(), gy.f32() + n0 * g.O * g.HO * g.WO);
    dnnl::convolution_backward_data(pd).execute(
        s, {{DNNL_ARG_DIFF_DST, to_layout(pd.diff_dst_desc(), gout, s)},
            {DNNL_ARG_WEIGHTS, to_layout(pd.weights_desc(), memory(d.wei, engine(), w.data), s)},
            {DNNL_ARG_DIFF_SRC, gx}});
    if (gx != user_dx) dnnl::reorder(gx, user_dx).execute(s, gx, user_dx);
    s.wait();
  });
}

// The weight gradient sums over images: each of a FIXED number of sub-batches (not one per
// thread) writes a partial sum, added in order, so the result does not depend on --threads.
void conv2d_grad_weight_onednn(const LibCall& c) {
  c.expect_arity(2, 2, 1, 1);
  const TensorArg& x = c.in(0);
  const TensorArg& gy = c.in(1);
  const TensorArg& dw = c.out(0);
  ConvGeom g = conv_geometry(c, x, dw, gy, "input", "weight gradient", "output gradient");
  std::vector<int64_t> given = c.ints_or("weight_shape", {});
  if (!given.empty() && given != dw.shape) return conv2d_grad_weight_im2col(c);  // it reports the mismatch
  if (!descs(g).ok) return conv2d_grad_weight_im2col(c);
  const int64_t pieces = std::min<int64_t>(g.N, 4), wsize = dw.numel();
  std::vector<float> partial(static_cast<size_t>((pieces - 1) * wsize));
  over_batches(c, g.N, pieces, [&](int64_t piece, int64_t n0, int64_t n1) {
    Descs d = descs(sub_batch(g, n0, n1));
    float* out = piece == 0 ? dw.f32() : partial.data() + (piece - 1) * wsize;
    bool blocked = blocked_for(false, g.Cg);
    auto hint = forward_pd(d, nullptr, blocked);
    dnnl::convolution_backward_weights::desc desc(dnnl::algorithm::convolution_direct, any_of(d.src, blocked),
                                                  any_of(d.wei, blocked), any_of(d.dst, blocked), d.strides, d.dilates,
                                                  d.pad_l, d.pad_r);
    dnnl::convolution_backward_weights::primitive_desc pd(desc, engine(), hint);
    dnnl::stream s(engine());
    memory user_dw(d.wei, engine(), out);
    memory gw = pd.diff_weights_desc() == d.wei ? user_dw : memory(pd.diff_weights_desc(), engine());
    memory src(d.src, engine(), x.f32() + n0 * g.C * g.H * g.W);
    memory gout(d.dst, engine(), gy.f32() + n0 * g.O * g.HO * g.WO);
    dnnl::convolution_backward_weights(pd).execute(s, {{DNNL_ARG_SRC, to_layout(pd.src_desc(), src, s)},
                                                       {DNNL_ARG_DIFF_DST, to_layout(pd.diff_dst_desc(), gout, s)},
                                                       {DNNL_ARG_DIFF_WEIGHTS, gw}});
    if (gw != user_dw) dnnl::reorder(gw, user_dw).execute(s, gw, user_dw);
    s.wait();
  });
  float* acc = dw.f32();
  for (int64_t p = 1; p < pieces; ++p) {
    const float* part = partial.data() + (p - 1) * wsize;
    for (int64_t i = 0; i < wsize; ++i) acc[i] += part[i];
  }
}

#else  // no oneDNN: the im2col backend serves every call

void conv2d_onednn(const LibCall& c) { conv2d_im2col(c); }
void conv2d_grad_input_onednn(const LibCall& c) { conv2d_grad_input_im2col(c); }
void conv2d_grad_weight_onednn(const LibCall& c) { conv2d_grad_weight_im2col(c); }

#endif

}  // namespace modelc::kernels
