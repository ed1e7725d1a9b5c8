// The bodies of scaled dot-product attention (kernels/sdpa.cc), included by bodies.h: the
// forward pass and the two halves of the backward, memory-efficient as FlashAttention is. No
// [T, S] matrix of scores or probabilities is ever stored: the forward runs an online
// softmax over blocks of kSdpaBlock keys and keeps two numbers per query row (the running
// maximum m and the sum l of exp(score - m)); the backward recomputes each probability from
// them, p = exp(score - m) / l.
//
// Work items, one per row, so no body needs atomics and every sum is added in one order on
// every device (the CPU kernel runs these same functions):
//   forward: one per query row (bh, t): out[bh, t, :] and stats[bh, t, :] = (m, l);
//   grad q:  one per query row: dq[bh, t, :];
//   grad kv: one per key row (bh, s): dk[bh, s, :] and dv[bh, s, :].
// The backward takes delta[bh, t] = sum_e dout[bh, t, e] * out[bh, t, e] (FlashAttention's
// D; the compiler computes it, compiler/ir/ops/attention.cc), since
// sum_s p'[t, s] * dp'[t, s] = dout[t] . out[t] for the dropped-out probabilities p'.
//
// Dropout (torch's dropout_p) zeroes probability (bh, t, s) where the Philox uniform of
// index (bh * T + t) * S + s of the call's site is below the rate, and scales the others by
// 1 / (1 - rate): the same draw as the dropout op's (runtime/base/philox.h), so the
// backward and a recomputed forward redraw the same mask. Causal masking is torch's
// (is_causal): query t sees keys s <= t.
#pragma once

#include "runtime/base/kernel_limits.h"
#include "runtime/base/philox.h"

namespace modelc::kernels::cuda {

constexpr int64_t kSdpaBlock = 32;     // the keys of one online-softmax block

struct SdpaParams {
  const float* q;      // [bh, T, D]
  const float* k;      // [bh, S, D]
  const float* v;      // [bh, S, E]
  const float* dout;   // grad: [bh, T, E]
  const float* stats;  // grad: [bh, T, 2] as the forward wrote it
  const float* delta;  // grad: [bh, T]
  float* out;          // forward: [bh, T, E]
  float* stats_out;    // forward: [bh, T, 2]
  float *dq, *dk, *dv; // grad
  int64_t n;           // the work items: bh * T, or bh * S for the kv gradient
  int64_t T, S, D, E;
  float scale;         // of the scores q . k
  float keep_scale;    // 1 / (1 - dropout), rounded to f32
  double dropout;      // the rate; 0: none
  uint32_t site0, site1;  // the Philox key of the call's site (dropout_key(seed, key))
  uint64_t step;
  int32_t causal;
};

MODELC_HD float sdpa_dot(const float* a, const float* b, int64_t n) {
  float acc = 0.0f;
  for (int64_t d = 0; d < n; ++d) acc += a[d] * b[d];
  return acc;
}

// The larger of a and b, NaN when either is.
MODELC_HD float sdpa_max(float a, float b) { return a != a || b != b ? a + b : (a > b ? a : b); }

// The keys query t sees.
MODELC_HD int64_t sdpa_keys(const SdpaParams& p, int64_t t) { return p.causal && t + 1 < p.S ? t + 1 : p.S; }

// What probability (row, s) is multiplied by under dropout: 0 or 1 / (1 - rate).
MODELC_HD float sdpa_keep(const SdpaParams& p, int64_t row, int64_t s) {
  if (p.dropout <= 0.0) return 1.0f;
  const float u = dropout_uniform_with(PhiloxKey{p.site0, p.site1}, p.step, static_cast<uint64_t>(row * p.S + s));
  return static_cast<double>(u) >= p.dropout ? p.keep_scale : 0.0f;
}

MODELC_HD float sdpa_score(const SdpaParams& p, const float* q, int64_t bh, int64_t s) {
  return sdpa_dot(q, p.k + (bh * p.S + s) * p.D, p.D) * p.scale;
}

// Query row i = bh * T + t: an online softmax over blocks of keys, the accumulator rescaled
// once per block.
MODELC_HD void sdpa_forward_body(const SdpaParams& p, int64_t i) {
  const int64_t bh = i / p.T, t = i - bh * p.T;
  const float* q = p.q + i * p.D;
  const int64_t keys = sdpa_keys(p, t);
  float acc[kSdpaMaxHead];
  float sc[kSdpaBlock];
  for (int64_t e = 0; e < p.E; ++e) acc[e] = 0.0f;
  float m = -INFINITY, l = 0.0f;
  for (int64_t s0 = 0; s0 < keys; s0 += kSdpaBlock) {
    const int64_t nb = keys - s0 < kSdpaBlock ? keys - s0 : kSdpaBlock;
    float mb = -INFINITY;
    for (int64_t j = 0; j < nb; ++j) {
      sc[j] = sdpa_score(p, q, bh, s0 + j);
      mb = sdpa_max(mb, sc[j]);
    }
    const float mn = sdpa_max(m, mb);
    const float alpha = m == mn ? 1.0f : ep_exp(m - mn);
    l *= alpha;
    for (int64_t e = 0; e < p.E; ++e) acc[e] *= alpha;
    for (int64_t j = 0; j < nb; ++j) {
      const float pj = ep_exp(sc[j] - mn);
      l += pj;
      const float w = pj * sdpa_keep(p, i, s0 + j);
      const float* v = p.v + (bh * p.S + s0 + j) * p.E;
      for (int64_t e = 0; e < p.E; ++e) acc[e] += w * v[e];
    }
    m = mn;
  }
  for (int64_t e = 0; e < p.E; ++e) p.out[i * p.E + e] = acc[e] / l;
  p.stats_out[2 * i] = m;
  p.stats_out[2 * i + 1] = l;
}

// dq[t] = scale * sum_s p[t, s] (dp[t, s] - delta[t]) k[s], dp = keep * (dout[t] . v[s]).
MODELC_HD void sdpa_grad_q_body(const SdpaParams& p, int64_t i) {
  const int64_t bh = i / p.T, t = i - bh * p.T;
  const float* q = p.q + i * p.D;
  const float* dout = p.dout + i * p.E;
  const float m = p.stats[2 * i], l = p.stats[2 * i + 1], delta = p.delta[i];
  float acc[kSdpaMaxHead];
  for (int64_t d = 0; d < p.D; ++d) acc[d] = 0.0f;
  const int64_t keys = sdpa_keys(p, t);
  for (int64_t s = 0; s < keys; ++s) {
    const float pr = ep_exp(sdpa_score(p, q, bh, s) - m) / l;
    const float dp = sdpa_dot(dout, p.v + (bh * p.S + s) * p.E, p.E) * sdpa_keep(p, i, s);
    const float ds = pr * (dp - delta);
    const float* k = p.k + (bh * p.S + s) * p.D;
    for (int64_t d = 0; d < p.D; ++d) acc[d] += ds * k[d];
  }
  for (int64_t d = 0; d < p.D; ++d) p.dq[i * p.D + d] = acc[d] * p.scale;
}

// Key row i = bh * S + s: dv[s] = sum_t p'[t, s] dout[t] and dk[s] = scale * sum_t
// p[t, s] (dp[t, s] - delta[t]) q[t], over the queries that see s.
MODELC_HD void sdpa_grad_kv_body(const SdpaParams& p, int64_t i) {
  const int64_t bh = i / p.S, s = i - bh * p.S;
  const float* v = p.v + i * p.E;
  float ak[kSdpaMaxHead], av[kSdpaMaxHead];
  for (int64_t d = 0; d < p.D; ++d) ak[d] = 0.0f;
  for (int64_t e = 0; e < p.E; ++e) av[e] = 0.0f;
  for (int64_t t = p.causal ? s : 0; t < p.T; ++t) {
    const int64_t row = bh * p.T + t;
    const float* q = p.q + row * p.D;
    const float* dout = p.dout + row * p.E;
    const float pr = ep_exp(sdpa_score(p, q, bh, s) - p.stats[2 * row]) / p.stats[2 * row + 1];
    const float keep = sdpa_keep(p, row, s);
    const float w = pr * keep;
    for (int64_t e = 0; e < p.E; ++e) av[e] += w * dout[e];
    const float ds = pr * (sdpa_dot(dout, v, p.E) * keep - p.delta[row]);
    for (int64_t d = 0; d < p.D; ++d) ak[d] += ds * q[d];
  }
  for (int64_t d = 0; d < p.D; ++d) p.dk[i * p.D + d] = ak[d] * p.scale;
  for (int64_t e = 0; e < p.E; ++e) p.dv[i * p.E + e] = av[e];
}

}  // namespace modelc::kernels::cuda
