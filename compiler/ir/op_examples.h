// Test domains: the calls of each op the conformance test (tests/conformance) runs through
// every check, on fresh random inputs where the op is defined and smooth. A record gives
// them as `examples` (a generator written with the helpers below) or, for an elementwise
// op, as `domains`, from which default_examples makes calls on random shapes that
// broadcast, in every dtype the op's shape rule accepts.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "compiler/ir/op_registry.h"

namespace modelc::examples {

// Uniform integer in [lo, hi].
int64_t pick(ExampleRng& rng, int64_t lo, int64_t hi);
// A shape of rank in [rank_lo, rank_hi], each extent in [lo, hi].
std::vector<int64_t> shape(ExampleRng& rng, int rank_lo, int rank_hi, int64_t lo = 1, int64_t hi = 5);
// A shape that broadcasts to `out`: a random suffix of it with some extents replaced by 1.
std::vector<int64_t> broadcastable_to(ExampleRng& rng, const std::vector<int64_t>& out);
// Values drawn from the domain (f32, f16, bf16: as given, never rounded: the reference does
// not round inputs; i32: integers in [round(lo), round(hi)]; bool: 0 or 1).
RefTensor values(ExampleRng& rng, DType t, std::vector<int64_t> shape, Domain d = {});
// i32 ids in [0, n).
RefTensor ids(ExampleRng& rng, std::vector<int64_t> shape, int64_t n);

// The concrete shape of output `k` of `op` called on `e` (InternalError when the call does
// not type-check: the generators make valid calls).
std::vector<int64_t> out_shape(OpKind op, const OpExample& e, size_t k = 0);

// The default calls of an elementwise op: random shapes of rank 0 to 3 (for several inputs,
// shapes that broadcast together), f32 values from its domains, and the same in i32 (and
// bool) when the op's shape rule accepts them; an op with float attributes is also called
// with random values of them in [0.05, 0.5].
std::vector<OpExample> default_examples(const OpInfo& op, ExampleRng& rng);

// `n` calls, call `rep` filled by fill(rep, call): the loop of a record's generator.
std::vector<OpExample> calls(int n, const std::function<void(int rep, OpExample& call)>& fill);

// The calls of `op`: its generator's, else default_examples for an op with domains; none
// for sources.
std::vector<OpExample> of(const OpInfo& op, ExampleRng& rng);

}  // namespace modelc::examples
