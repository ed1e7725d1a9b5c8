// conv2d, conv2d_grad_input and conv2d_grad_weight on the CPU: the shared geometry, the
// im2col + sgemm backend and the table's entries (conv.h) that dispatch to the chosen backend.
//
// im2col lays the receptive fields of a block of images out as a matrix col [Cg*KH*KW,
// images*HO*WO] per group, so that each group's convolution is ONE sgemm over the whole
// block (split over the pool, kernels/cpu/gemm.h); its gradients are the two transposed products and col2im.
// Blocks of images keep col under ~32 MB. col2im is split over (image, channel) planes, so
// the scatter-adds of the input gradient are race-free and deterministic.
#include "runtime/base/tensor.h"
#include "kernels/cpu/conv.h"
#include "kernels/cpu/epilogue.h"
#include "kernels/cpu/gemm.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace modelc::kernels {

namespace {

using rt::shape_str;

int64_t col_rows(const ConvGeom& g) { return g.Cg * g.KH * g.KW; }

// Images per block: col [CK, nb*P] stays under about 32 MB.
int64_t block_images(const ConvGeom& g) {
  int64_t per = std::max<int64_t>(1, col_rows(g) * g.HO * g.WO * 4);
  return std::clamp<int64_t>((32 << 20) / per, 1, g.N);
}

// col[r, (n-n0)*P + p] for images n0..n0+nb of group grp.
void im2col(const LibCall& c, const ConvGeom& g, const float* x, int64_t grp, int64_t n0, int64_t nb, float* col) {
  int64_t P = g.HO * g.WO, CK = col_rows(g);
  c.pool->parallel_for(CK * nb, 1, [&](int64_t r0, int64_t r1) {
    for (int64_t rr = r0; rr < r1; ++rr) {
      int64_t r = rr / nb, n = rr % nb;
      int64_t ci = r / (g.KH * g.KW), a = r / g.KW % g.KH, b = r % g.KW;
      const float* plane = x + ((n0 + n) * g.C + grp * g.Cg + ci) * g.H * g.W;
      float* dst = col + r * nb * P + n * P;
      for (int64_t i = 0; i < g.HO; ++i) {
        int64_t h = i * g.sh - g.ph + a * g.dh;
        float* row = dst + i * g.WO;
        if (h < 0 || h >= g.H) {
          std::memset(row, 0, static_cast<size_t>(g.WO) * sizeof(float));
          continue;
        }
        for (int64_t j = 0; j < g.WO; ++j) {
          int64_t v = j * g.sw - g.pw + b * g.dw;
          row[j] = v >= 0 && v < g.W ? plane[h * g.W + v] : 0.0f;
        }
      }
    }
  });
}

std::atomic<ConvBackend>& backend_slot() {
  static std::atomic<ConvBackend> b = [] {
    // The default is measured (docs/performance.md); MODELC_CONV overrides it.
    ConvBackend d = onednn_available() ? ConvBackend::OneDnn : ConvBackend::Im2col;
    if (const char* e = std::getenv("MODELC_CONV")) {
      std::string v = e;
      if (v == "im2col") d = ConvBackend::Im2col;
      else if (v == "onednn" && onednn_available()) d = ConvBackend::OneDnn;
    }
    return d;
  }();
  return b;
}

}  // namespace

// f16 / bf16 operands (autocast, docs/precision.md) are widened to f32 around the f32
// convolution and its result rounded back (run_widened): accumulation in f32.
void conv2d_cpu(const LibCall& c) {
  if (run_widened(c, conv2d_cpu)) return;
  conv_backend() == ConvBackend::OneDnn ? conv2d_onednn(c) : conv2d_im2col(c);
}
void conv2d_grad_input_cpu(const LibCall& c) {
  if (run_widened(c, conv2d_grad_input_cpu)) return;
  conv_backend() == ConvBackend::OneDnn ? conv2d_grad_input_onednn(c) : conv2d_grad_input_im2col(c);
}
void conv2d_grad_weight_cpu(const LibCall& c) {
  if (run_widened(c, conv2d_grad_weight_cpu)) return;
  conv_backend() == ConvBackend::OneDnn ? conv2d_grad_weight_onednn(c) : conv2d_grad_weight_im2col(c);
}

ConvGeom conv_geometry(const LibCall& c, const TensorArg& x, const TensorArg& w, const TensorArg& y,
                       const char* x_role, const char* w_role, const char* y_role, bool low_float) {
  const ElemType type = low_float && is_low_float(x.type) ? x.type : ElemType::F32;
  for (auto [t, role] : {std::pair{&x, x_role}, {&w, w_role}, {&y, y_role}}) {
    c.expect_type(*t, type, role);
    c.expect_rank(*t, 4, role);
  }
  ConvGeom g{};
  g.N = x.dim(0), g.C = x.dim(1), g.H = x.dim(2), g.W = x.dim(3);
  g.O = w.dim(0), g.Cg = w.dim(1), g.KH = w.dim(2), g.KW = w.dim(3);
  g.groups = c.int_or("groups", 1);
  auto s = c.pair_attr("stride", {1, 1});
  auto p = c.pair_attr("padding", {0, 0});
  auto d = c.pair_attr("dilation", {1, 1});
  g.sh = s.first, g.sw = s.second, g.ph = p.first, g.pw = p.second, g.dh = d.first, g.dw = d.second;
  if (g.groups < 1) c.fail(fmt::format("groups must be >= 1, got {}", g.groups));
  if (g.sh < 1 || g.sw < 1 || g.dh < 1 || g.dw < 1 || g.ph < 0 || g.pw < 0)
    c.fail(fmt::format("stride {}x{} and dilation {}x{} must be positive, padding {}x{} non-negative", g.sh, g.sw, g.dh,
                       g.dw, g.ph, g.pw));
  if (g.Cg * g.groups != g.C || g.O % g.groups != 0)
    c.fail(fmt::format("{} {} with groups {} does not fit {} {}", w_role, shape_str(w.shape), g.groups, x_role, shape_str(x.shape)));
  g.Og = g.O / g.groups;
  int64_t nh = g.H + 2 * g.ph - g.dh * (g.KH - 1) - 1, nw = g.W + 2 * g.pw - g.dw * (g.KW - 1) - 1;
  g.HO = nh < 0 ? 0 : nh / g.sh + 1;
  g.WO = nw < 0 ? 0 : nw / g.sw + 1;
  std::vector<int64_t> want{g.N, g.O, g.HO, g.WO};
  if (g.HO < 1 || g.WO < 1 || y.shape != want)
    c.fail(fmt::format("{} has shape {}, expected {} for {} {} and {} {}", y_role, shape_str(y.shape), shape_str(want),
                       x_role, shape_str(x.shape), w_role, shape_str(w.shape)));
  return g;
}

const TensorArg* conv_bias(const LibCall& c, const ConvGeom& g) {
  const TensorArg* bias = c.inputs.size() > 2 && c.inputs[2].present() ? &c.inputs[2] : nullptr;
  if (bias && (bias->type != ElemType::F32 || bias->shape != std::vector<int64_t>{g.O}))
    c.fail(fmt::format("bias must be f32[{}], got {}{}", g.O, dtype_name(bias->type), shape_str(bias->shape)));
  return bias;
}

ConvEpilogue conv_epilogue(const LibCall& c, const ConvGeom& g) {
  const TensorArg* own = conv_bias(c, g);
  const Epilogue e = read_epilogue(c, 3, g.O, "output channel");
  if (own && e.bias) c.fail("has a bias of its own (input 2) and an epilogue bias (input 3); a convolution takes one");
  return {own ? own->f32() : e.bias, e.act};
}

void conv2d_im2col(const LibCall& c) {
  c.expect_arity(2, 4, 1, 1);
  const TensorArg& x = c.in(0);
  const TensorArg& w = c.in(1);
  const TensorArg& y = c.out(0);
  ConvGeom g = conv_geometry(c, x, w, y, "input", "weight", "output");
  const ConvEpilogue epi = conv_epilogue(c, g);
  int64_t P = g.HO * g.WO, CK = col_rows(g), NB = block_images(g);
  std::vector<float> col(static_cast<size_t>(CK * NB * P)), tmp(static_cast<size_t>(g.Og * NB * P));
  for (int64_t n0 = 0; n0 < g.N; n0 += NB) {
    int64_t nb = std::min(NB, g.N - n0);
    for (int64_t grp = 0; grp < g.groups; ++grp) {
      im2col(c, g, x.f32(), grp, n0, nb, col.data());
      parallel_sgemm(*c.pool, false, false, g.Og, nb * P, CK, w.f32() + grp * g.Og * CK, CK, col.data(), nb * P, 0.0f, tmp.data(), nb * P);
      c.pool->parallel_for(nb * g.Og, 1, [&](int64_t q0, int64_t q1) {
        for (int64_t q = q0; q < q1; ++q) {
          int64_t n = q / g.Og, o = q % g.Og, oc = grp * g.Og + o;
          float b = epi.bias ? epi.bias[oc] : 0.0f;
          const float* src = tmp.data() + o * nb * P + n * P;
          float* dst = y.f32() + ((n0 + n) * g.O + oc) * P;
          for (int64_t p = 0; p < P; ++p) dst[p] = src[p] + b;
          apply_activation(epi.act, dst, P);
        }
      });
    }
  }
}

// Gathers grad[n0..n0+nb, group's channels] into G [Og, nb*P].
static void gather_grad(const LibCall& c, const ConvGeom& g, const float* grad, int64_t grp, int64_t n0, int64_t nb, float* G) {
  int64_t P = g.HO * g.WO;
  c.pool->parallel_for(nb * g.Og, 4, [&](int64_t q0, int64_t q1) {
    for (int64_t q = q0; q < q1; ++q) {
      int64_t n = q / g.Og, o = q % g.Og;
      std::memcpy(G + o * nb * P + n * P, grad + ((n0 + n) * g.O + grp * g.Og + o) * P, static_cast<size_t>(P) * sizeof(float));
    }
  });
}

void conv2d_grad_input_im2col(const LibCall& c) {
  c.expect_arity(2, 2, 1, 1);
  const TensorArg& gy = c.in(0);
  const TensorArg& w = c.in(1);
  const TensorArg& dx = c.out(0);
  std::vector<int64_t> given = c.ints_or("input_shape", {});
  if (!given.empty() && given != dx.shape)
    c.fail(fmt::format("input_shape {} disagrees with the output's shape {}", shape_str(given), shape_str(dx.shape)));
  ConvGeom g = conv_geometry(c, dx, w, gy, "input gradient", "weight", "output gradient");
  int64_t P = g.HO * g.WO, CK = col_rows(g), NB = block_images(g);
  std::vector<float> col(static_cast<size_t>(CK * NB * P)), G(static_cast<size_t>(g.Og * NB * P));
  std::memset(dx.data, 0, static_cast<size_t>(dx.numel()) * sizeof(float));
  for (int64_t n0 = 0; n0 < g.N; n0 += NB) {
    int64_t nb = std::min(NB, g.N - n0);
    for (int64_t grp = 0; grp < g.groups; ++grp) {
      gather_grad(c, g, gy.f32(), grp, n0, nb, G.data());
      parallel_sgemm(*c.pool, true, false, CK, nb * P, g.Og, w.f32() + grp * g.Og * CK, CK, G.data(), nb * P, 0.0f, col.data(), nb * P);
      // col2im, one (image, channel) plane per work item.
      c.pool->parallel_for(nb * g.Cg, 1, [&](int64_t q0, int64_t q1) {
        for (int64_t q = q0; q < q1; ++q) {
          int64_t n = q / g.Cg, ci = q % g.Cg;
          float* plane = dx.f32() + ((n0 + n) * g.C + grp * g.Cg + ci) * g.H * g.W;
          for (int64_t a = 0; a < g.KH; ++a)
            for (int64_t b = 0; b < g.KW; ++b) {
              const float* src = col.data() + ((ci * g.KH + a) * g.KW + b) * nb * P + n * P;
              for (int64_t i = 0; i < g.HO; ++i) {
                int64_t h = i * g.sh - g.ph + a * g.dh;
                if (h < 0 || h >= g.H) continue;
                for (int64_t j = 0; j < g.WO; ++j) {
                  int64_t v = j * g.sw - g.pw + b * g.dw;
                  if (v >= 0 && v < g.W) plane[h * g.W + v] += src[i * g.WO + j];
                }
              }
            }
        }
      });
    }
  }
}

void conv2d_grad_weight_im2col(const LibCall& c) {
  c.expect_arity(2, 2, 1, 1);
  const TensorArg& x = c.in(0);
  const TensorArg& gy = c.in(1);
  const TensorArg& dw = c.out(0);
  std::vector<int64_t> given = c.ints_or("weight_shape", {});
  if (!given.empty() && given != dw.shape)
    c.fail(fmt::format("weight_shape {} disagrees with the output's shape {}", shape_str(given), shape_str(dw.shape)));
  ConvGeom g = conv_geometry(c, x, dw, gy, "input", "weight gradient", "output gradient");
  int64_t P = g.HO * g.WO, CK = col_rows(g), NB = block_images(g);
  std::vector<float> col(static_cast<size_t>(CK * NB * P)), G(static_cast<size_t>(g.Og * NB * P));
  for (int64_t n0 = 0; n0 < g.N; n0 += NB) {
    int64_t nb = std::min(NB, g.N - n0);
    for (int64_t grp = 0; grp < g.groups; ++grp) {
      im2col(c, g, x.f32(), grp, n0, nb, col.data());
      gather_grad(c, g, gy.f32(), grp, n0, nb, G.data());
      parallel_sgemm(*c.pool, false, true, g.Og, CK, nb * P, G.data(), nb * P, col.data(), nb * P, n0 == 0 ? 0.0f : 1.0f,
            dw.f32() + grp * g.Og * CK, CK);
    }
  }
}

ConvBackend conv_backend() { return backend_slot().load(); }

void set_conv_backend(ConvBackend b) {
  if (b == ConvBackend::OneDnn && !onednn_available())
    throw rt::RuntimeError("conv backend 'onednn' is not available: the runtime was built without oneDNN");
  backend_slot().store(b);
}

}  // namespace modelc::kernels
