// A counter-based random number generator: Philox4x32-10 (Salmon et al., "Parallel
// random numbers: as easy as 1, 2, 3", SC'11), the generator of cuRAND and PyTorch.
//
// Counter-based means a random value is a pure function of (key, counter): there is no
// state to carry, so any element of any step can be drawn in any order on any thread, and
// a recomputation (a checkpointed forward replayed during the backward pass) draws the
// same dropout mask as the original. The reference interpreter, the CPU runtime and the
// generated GPU kernels all draw through this header, so it includes nothing from
// compiler/ and only the standard library.
#pragma once

#include <array>
#include <cstdint>

#if defined(__CUDACC__)
#define MODELC_PHILOX_FN __host__ __device__ inline
#else
#define MODELC_PHILOX_FN inline
#endif

namespace modelc {

using PhiloxCounter = std::array<uint32_t, 4>;
using PhiloxKey = std::array<uint32_t, 2>;

namespace philox_detail {

// The multipliers and Weyl increments of the published generator.
inline constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;
inline constexpr uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;

MODELC_PHILOX_FN constexpr void mulhilo(uint32_t a, uint32_t b, uint32_t& hi, uint32_t& lo) {
  uint64_t p = static_cast<uint64_t>(a) * b;
  hi = static_cast<uint32_t>(p >> 32);
  lo = static_cast<uint32_t>(p);
}

MODELC_PHILOX_FN constexpr PhiloxCounter philox_round(const PhiloxCounter& c, const PhiloxKey& k) {
  uint32_t hi0 = 0, lo0 = 0, hi1 = 0, lo1 = 0;
  mulhilo(kM0, c[0], hi0, lo0);
  mulhilo(kM1, c[2], hi1, lo1);
  return {hi1 ^ c[1] ^ k[0], lo1, hi0 ^ c[3] ^ k[1], lo0};
}

MODELC_PHILOX_FN constexpr uint32_t lo32(uint64_t x) { return static_cast<uint32_t>(x); }
MODELC_PHILOX_FN constexpr uint32_t hi32(uint64_t x) { return static_cast<uint32_t>(x >> 32); }

}  // namespace philox_detail

// Philox4x32 with 10 rounds: four independent 32-bit random words per (counter, key).
MODELC_PHILOX_FN constexpr PhiloxCounter philox4x32_10(PhiloxCounter counter, PhiloxKey key) {
  for (int r = 0; r < 10; ++r) {
    if (r > 0) {  // the key is bumped between rounds, not before the first
      key[0] += philox_detail::kW0;
      key[1] += philox_detail::kW1;
    }
    counter = philox_detail::philox_round(counter, key);
  }
  return counter;
}

// A 32-bit word to a float uniform in [0, 1): the top 24 bits, so that every value is
// exactly representable in f32 and 1.0 is never returned.
MODELC_PHILOX_FN constexpr float uniform_from_bits(uint32_t bits) {
  return static_cast<float>(bits >> 8) * (1.0f / 16777216.0f);
}

// The Philox key of one dropout site under one seed. (seed, key) is 128 bits but Philox
// takes a 64-bit key, so the pair is hashed by Philox itself: for a fixed seed the map from
// site key to counter block is a bijection, and keeping 64 of its bits makes two sites
// collide only by chance (2^-64). Kernels compute this once per launch, not per element.
MODELC_PHILOX_FN constexpr PhiloxKey dropout_key(uint64_t seed, uint64_t key) {
  using namespace philox_detail;
  PhiloxCounter h = philox4x32_10({lo32(key), hi32(key), 0u, 0u}, {lo32(seed), hi32(seed)});
  return {h[0], h[1]};
}

// The uniform in [0, 1) that decides element `index` of the dropout site `key` at training
// step `step` under run seed `seed`. It depends on these four arguments only: no state, no
// thread or launch geometry, so a recomputed forward reproduces the mask.
MODELC_PHILOX_FN constexpr float dropout_uniform_with(const PhiloxKey& site, uint64_t step, uint64_t index) {
  using namespace philox_detail;
  return uniform_from_bits(philox4x32_10({lo32(index), hi32(index), lo32(step), hi32(step)}, site)[0]);
}

MODELC_PHILOX_FN constexpr float dropout_uniform(uint64_t seed, uint64_t key, uint64_t step, uint64_t index) {
  return dropout_uniform_with(dropout_key(seed, key), step, index);
}

}  // namespace modelc

#undef MODELC_PHILOX_FN
