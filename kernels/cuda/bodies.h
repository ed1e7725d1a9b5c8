// The hand kernels' per-element math, shared by the CUDA kernels (kernels/cuda/hand_kernels.cu,
// compiled by nvcc as C++17 into PTX) and the host, which runs the very same functions over
// every index to test them against the CPU twins (tests/cuda_kernels/). Each kernel takes
// one parameter block (a struct below, passed by value) and runs body(params, i) for every i
// in [0, n) of a grid-stride loop; a body writes only what index i owns, so the order of
// indices does not matter and no body needs atomics, except for reporting an error.
//
// Numerics follow the CPU twins exactly: the same operations in the same order (nvcc runs
// with -fmad=false, so nothing is contracted into an FMA), hence bit-identical results,
// except erff in gelu (the device's erff and glibc's differ by an ulp or two).
//
// This header must stay plain C++17 with no host library beyond <cmath> and <cstdint> (and
// runtime/base/philox.h's <array>, whose constexpr members nvcc compiles for the device with
// --expt-relaxed-constexpr).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#ifdef __CUDACC__
#define MODELC_HD __host__ __device__ __forceinline__
#else
#define MODELC_HD inline
#endif

namespace modelc::kernels::cuda {

// ---- strided copies and fills (kernels/cpu/movement_plan.h) --------------------------------

constexpr int kMaxCopyRank = 8;

// dst[dst_base + sum idx[k] * dst_stride[k]] = src[src_base + sum idx[k] * src_stride[k]] for
// the i-th idx < shape in row-major order, elements of the kernel's width (1, 2 or 4 bytes).
struct CopyParams {
  const void* src;
  void* dst;
  int64_t n;  // the number of elements: the product of shape
  int64_t rank;
  int64_t shape[kMaxCopyRank];
  int64_t src_stride[kMaxCopyRank];
  int64_t dst_stride[kMaxCopyRank];
  int64_t src_base, dst_base;
};

template <class T>
MODELC_HD void copy_body(const CopyParams& p, int64_t i) {
  int64_t s = p.src_base, d = p.dst_base;
  for (int64_t k = p.rank - 1; k >= 1; --k) {
    const int64_t q = i / p.shape[k];
    const int64_t at = i - q * p.shape[k];
    i = q;
    s += at * p.src_stride[k];
    d += at * p.dst_stride[k];
  }
  if (p.rank > 0) {  // what is left of i indexes the outermost dim: no division
    s += i * p.src_stride[0];
    d += i * p.dst_stride[0];
  }
  static_cast<T*>(p.dst)[d] = static_cast<const T*>(p.src)[s];
}

struct FillParams {
  void* dst;
  int64_t n;
  uint32_t bits;  // the element's bits in the low bytes
  uint32_t pad;
};

template <class T>
MODELC_HD void fill_body(const FillParams& p, int64_t i) {
  static_cast<T*>(p.dst)[i] = static_cast<T>(p.bits);
}

// ---- errors found in data -------------------------------------------------------------------

// A kernel that finds a bad value (an id out of range) records the smallest position that
// holds one, with the value: the word is (position << 32) | uint32(value), kept at its
// minimum, and ~0 while there is no error. Positions must be below 2^31.
constexpr unsigned long long kNoError = ~0ull;

MODELC_HD void record_error(unsigned long long* word, int64_t position, int32_t value) {
  const unsigned long long w = (static_cast<unsigned long long>(position) << 32) | static_cast<uint32_t>(value);
#ifdef __CUDA_ARCH__
  atomicMin(word, w);
#else
  if (w < *word) *word = w;  // the host runs the indices one at a time
#endif
}

// ---- embedding (kernels/cpu/embedding_plan.h) ----------------------------------------------

struct EmbeddingParams {
  unsigned long long* error;  // the id check's word (kernels/cuda/errors.h)
  const int32_t* ids;
  const float* src;  // embedding: the table [rows, width]; embedding_grad: the gradient [ids, width]
  float* out;        // embedding: [ids, width]; embedding_grad: [rows, width]
  int64_t n;  // embedding: ids * width; embedding_grad: parts * width
  int64_t ids_count, rows, width;
  int64_t parts;  // embedding_grad: the table's rows are split into this many ranges
};

// out[r, k] = table[ids[r], k]; a bad id records an error and gives zeros.
MODELC_HD void embedding_body(const EmbeddingParams& p, int64_t i) {
  const int64_t r = i / p.width, k = i - r * p.width;
  const int32_t id = p.ids[r];
  if (id < 0 || id >= p.rows) {
    if (k == 0) record_error(p.error, r, id);
    p.out[i] = 0.0f;
    return;
  }
  p.out[i] = p.src[static_cast<int64_t>(id) * p.width + k];
}

// Index t owns column k = t % width of the table rows [r0, r1) of range t / width: it zeroes
// them, then adds every id's gradient row that falls in its range, in the order of the ids.
// The sums are therefore the CPU twin's, bit for bit, with no atomics; the price is that
// each index reads every id (ids in the L1/L2 cache, one broadcast load per warp).
MODELC_HD void embedding_grad_body(const EmbeddingParams& p, int64_t t) {
  const int64_t part = t / p.width, k = t - part * p.width;
  const int64_t r0 = part * p.rows / p.parts, r1 = (part + 1) * p.rows / p.parts;
  for (int64_t r = r0; r < r1; ++r) p.out[r * p.width + k] = 0.0f;
  const bool reporter = t == 0;
  for (int64_t i = 0; i < p.ids_count; ++i) {
    const int32_t id = p.ids[i];
    if (id >= r0 && id < r1) {
      p.out[id * p.width + k] += p.src[i * p.width + k];
    } else if (reporter && (id < 0 || id >= p.rows)) {
      record_error(p.error, i, id);
      return;  // positions only grow: the first bad one is recorded
    }
  }
}

// ---- pooling (kernels/cpu/pool_plan.h) ------------------------------------------------------

struct PoolParams {
  const float* x;  // the image (max_pool2d_grad: the forward input)
  const float* g;  // the pooled gradient (gradients only)
  float* out;
  int64_t n;
  int64_t kh, kw, sh, sw, ph, pw;
  int64_t N, C, H, W, HO, WO;
  float inv;  // 1 / (kh * kw)
  uint32_t pad;
};

// Whether x takes over as a window's maximum from m: when larger, or NaN (a NaN is the
// maximum and stays it, as in PyTorch), as the CPU twin's takes_max.
MODELC_HD bool pool_takes_max(float x, float m) { return m == m && (x > m || x != x); }

// The plane offset of window (i, j)'s first maximum in row-major scan order (a NaN is the
// maximum; the first element for a window of -inf), as the CPU twin's argmax.
MODELC_HD int64_t pool_argmax(const PoolParams& p, const float* xp, int64_t i, int64_t j) {
  int64_t best_at = -1;
  float best = -INFINITY;
  for (int64_t a = 0; a < p.kh; ++a) {
    const int64_t h = i * p.sh - p.ph + a;
    if (h < 0 || h >= p.H) continue;
    for (int64_t b = 0; b < p.kw; ++b) {
      const int64_t v = j * p.sw - p.pw + b;
      if (v < 0 || v >= p.W) continue;
      const int64_t at = h * p.W + v;
      if (best_at < 0) best_at = at;
      if (pool_takes_max(xp[at], best)) best = xp[at], best_at = at;
    }
  }
  return best_at;
}

// Forward: index i is output element [plane, oi, oj].
template <bool Max>
MODELC_HD void pool_body(const PoolParams& p, int64_t i) {
  const int64_t plane = i / (p.HO * p.WO), rem = i - plane * p.HO * p.WO;
  const int64_t oi = rem / p.WO, oj = rem - oi * p.WO;
  const float* xp = p.x + plane * p.H * p.W;
  float acc = Max ? -INFINITY : 0.0f;
  for (int64_t a = 0; a < p.kh; ++a) {
    const int64_t h = oi * p.sh - p.ph + a;
    if (h < 0 || h >= p.H) continue;
    for (int64_t b = 0; b < p.kw; ++b) {
      const int64_t v = oj * p.sw - p.pw + b;
      if (v < 0 || v >= p.W) continue;
      const float x = xp[h * p.W + v];
      if (Max) acc = pool_takes_max(x, acc) ? x : acc;
      else acc += x;
    }
  }
  p.out[i] = Max ? acc : acc * p.inv;
}

// The windows that cover image row h: oi in [*lo, *hi).
MODELC_HD void covering(int64_t h, int64_t k, int64_t s, int64_t pad, int64_t count, int64_t* lo, int64_t* hi) {
  const int64_t first = h + pad - k + 1;  // oi * s >= first
  *lo = first <= 0 ? 0 : (first + s - 1) / s;
  const int64_t last = (h + pad) / s;  // oi * s <= h + pad
  *hi = last + 1 < count ? last + 1 : count;
}

// Gradients, gathered: index i is image element [plane, h, v]; it sums, over the windows
// that cover it in row-major window order, what the CPU twin scatters to it in that order
// (max: the window's gradient when the element is the window's first maximum; avg: the
// window's gradient / (kh * kw)), so the sums are the twin's, bit for bit.
template <bool Max>
MODELC_HD void pool_grad_body(const PoolParams& p, int64_t i) {
  const int64_t plane = i / (p.H * p.W), at = i - plane * p.H * p.W;
  const int64_t h = at / p.W, v = at - h * p.W;
  int64_t i0, i1, j0, j1;
  covering(h, p.kh, p.sh, p.ph, p.HO, &i0, &i1);
  covering(v, p.kw, p.sw, p.pw, p.WO, &j0, &j1);
  const float* gp = p.g + plane * p.HO * p.WO;
  const float* xp = Max ? p.x + plane * p.H * p.W : nullptr;
  float acc = 0.0f;
  for (int64_t oi = i0; oi < i1; ++oi)
    for (int64_t oj = j0; oj < j1; ++oj) {
      if (Max) {
        if (pool_argmax(p, xp, oi, oj) == at) acc += gp[oi * p.WO + oj];
      } else {
        const float g = gp[oi * p.WO + oj] * p.inv;
        acc += g;
      }
    }
  p.out[i] = acc;
}

// ---- f32, f16 and bf16 elements (kernels/cpu/library.h: low_to_f32, f32_to_low) -----------

MODELC_HD float bits_f32(uint32_t u) {
#ifdef __CUDA_ARCH__
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, 4);
  return f;
#endif
}

MODELC_HD uint32_t f32_bits(float f) {
#ifdef __CUDA_ARCH__
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
#endif
}

// bf16 and f16 bits to and from f32 as kernels::low_to_f32 / f32_to_low do, bit for bit:
// widening is exact; narrowing rounds to nearest even, overflows to inf and keeps NaN a
// quiet NaN (bf16: the top payload bits kept; f16: 0x7e00 with the sign).
MODELC_HD float bf16_to_f32(uint16_t b) { return bits_f32(static_cast<uint32_t>(b) << 16); }

MODELC_HD uint16_t f32_to_bf16(float f) {
  uint32_t u = f32_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

MODELC_HD float f16_to_f32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
  if (e == 0) {  // zero or subnormal: m * 2^-24, exact
    const float v = static_cast<float>(m) * 5.9604644775390625e-8f;
    return bits_f32(f32_bits(v) | sign);
  }
  if (e == 31) return bits_f32(sign | 0x7f800000u | (m << 13));
  return bits_f32(sign | ((e + 112u) << 23) | (m << 13));
}

MODELC_HD uint16_t f32_to_f16(float f) {
  uint32_t u = f32_bits(f);
  const uint32_t sign = (u >> 16) & 0x8000u;
  u &= 0x7fffffffu;
  if (u > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);                      // NaN: quiet
  if (u >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);                      // rounds to inf
  if (u < 0x38800000u) {
    // Below 2^-14: a subnormal or zero. Adding 0.5 leaves the value rounded (to nearest
    // even) to a multiple of 2^-24 in the low mantissa bits.
    const float v = bits_f32(u) + 0.5f;
    return static_cast<uint16_t>(sign | (f32_bits(v) - 0x3f000000u));
  }
  const uint32_t odd = (u >> 13) & 1u;
  u += (static_cast<uint32_t>(15 - 127) << 23) + 0xfffu + odd;
  return static_cast<uint16_t>(sign | (u >> 13));
}

// The element types of runtime/base/program.h's ElemType that the float kernels (epilogue,
// cumsum) read and write.
enum FloatType : int32_t { kFloatF32 = 0, kFloatF16 = 1, kFloatBF16 = 2 };

// Element i of `p`, an array of `type`, as f32 (exact).
MODELC_HD float load_f32(const void* p, int32_t type, int64_t i) {
  if (type == kFloatF32) return static_cast<const float*>(p)[i];
  const uint16_t b = static_cast<const uint16_t*>(p)[i];
  return type == kFloatF16 ? f16_to_f32(b) : bf16_to_f32(b);
}

// Element i of `p`, an array of `type`, set to `v` rounded to the type.
MODELC_HD void store_f32(void* p, int32_t type, int64_t i, float v) {
  if (type == kFloatF32) static_cast<float*>(p)[i] = v;
  else static_cast<uint16_t*>(p)[i] = type == kFloatF16 ? f32_to_f16(v) : f32_to_bf16(v);
}

// ---- epilogues (kernels/cpu/epilogue.h) -----------------------------------------------------

// e^x as the CPU epilogue's vexp (Cephes' polynomial; below -87 it is 0, above 88 +inf).
MODELC_HD float ep_exp(float x) {
  float xc = x < -87.0f ? -87.0f : x;
  xc = xc > 88.0f ? 88.0f : xc;
  xc = xc == xc ? xc : 0.0f;
  const float n = (xc * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
  float r = xc - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  const int32_t bits = (static_cast<int32_t>(n) + 127) * (1 << 23);
  float y = p * bits_f32(static_cast<uint32_t>(bits));
  y = x > 88.0f ? INFINITY : y;
  y = x < -87.0f ? 0.0f : y;
  return x == x ? y : x;
}

MODELC_HD float ep_tanh(float x) {
  const float x2 = x * x;
  float p = -929569.0f / 638512875.0f;
  p = p * x2 + 21844.0f / 6081075;
  p = p * x2 + -1382.0f / 155925;
  p = p * x2 + 62.0f / 2835;
  p = p * x2 + -17.0f / 315;
  p = p * x2 + 2.0f / 15;
  p = p * x2 + -1.0f / 3;
  const float small = x * (1.0f + x2 * p);
  const float ax = x < 0 ? -x : x;
  const float big = 1.0f - 2.0f / (ep_exp(ax * 2.0f) + 1.0f);
  return ax < 0.5f ? small : (x < 0 ? -big : big);
}

MODELC_HD float ep_sigmoid(float x) {
  const float t = ep_exp(-(x < 0 ? -x : x));
  const float r = 1.0f / (1.0f + t);
  return x >= 0 ? r : (x == x ? t * r : x);
}

// The activation codes of runtime/base/program.h's EpilogueActivation.
enum EpilogueAct : int32_t { kActNone = 0, kActRelu = 1, kActGeluErf = 2, kActGeluTanh = 3, kActTanh = 4, kActSigmoid = 5 };

MODELC_HD float ep_activation(int32_t act, float x) {
  switch (act) {
    case kActRelu: return x < 0 ? 0.0f : x;  // NaN stays
    case kActGeluErf: return 0.5f * x * (1.0f + erff(x * 0.7071067811865476f));
    case kActGeluTanh: return 0.5f * x * (1.0f + ep_tanh(0.7978845608028654f * (x + 0.044715f * x * x * x)));
    case kActTanh: return ep_tanh(x);
    case kActSigmoid: return ep_sigmoid(x);
    default: return x;
  }
}

struct EpilogueParams {
  void* out;          // [rows, L, inner] of the type
  const float* bias;  // [L] or null
  int64_t n;          // rows * L * inner
  int64_t L, inner;
  int32_t type, act;  // a FloatType; an EpilogueAct
};

// out[r, j, k] = act(out[r, j, k] + bias[j]) in f32, rounded back to the output's type.
MODELC_HD void epilogue_body(const EpilogueParams& p, int64_t i) {
  float x = load_f32(p.out, p.type, i);
  if (p.bias) x += p.bias[(i / p.inner) % p.L];
  store_f32(p.out, p.type, i, ep_activation(p.act, x));
}

// ---- cumsum (kernels/cumsum.cc) ---------------------------------------------------------------

struct CumsumParams {
  const void* x;  // [outer, len, inner] of the type
  void* out;      // the same shape and type (may be x itself)
  int64_t n;      // the lines: outer * inner
  int64_t len, inner;
  int32_t type, reverse;  // a FloatType; 1: sum from the end
};

// Index i is line [o, :, k] (i = o * inner + k): one f32 accumulator adds the line's terms in
// axis order (reverse: from the last), each output rounded once, as the CPU twin does. The
// neighbouring indices of a warp read neighbouring addresses when inner > 1.
MODELC_HD void cumsum_body(const CumsumParams& p, int64_t i) {
  const int64_t o = i / p.inner, k = i - o * p.inner;
  const int64_t base = o * p.len * p.inner + k;
  float acc = 0.0f;
  for (int64_t s = 0; s < p.len; ++s) {
    const int64_t at = base + (p.reverse ? p.len - 1 - s : s) * p.inner;
    acc += load_f32(p.x, p.type, at);
    store_f32(p.out, p.type, at, acc);
  }
}

}  // namespace modelc::kernels::cuda

// Scaled dot-product attention's bodies (ep_exp above is their exponential).
#include "kernels/cuda/bodies_sdpa.h"
