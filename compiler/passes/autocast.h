// Mixed precision: the op registry's autocast policy (OpInfo::autocast) applied to a graph.
//
// Reads: a graph (a model's forward graph; any graph works) and a low type, bf16 or f16.
// Produces a copy in which
//   - every op of policy Lower (matmul, conv2d and its gradients) gets each float input
//     that is not of the low type through a `cast` to it (one cast per value, shared by
//     its consumers), runs in the low type (kernels widen and accumulate in f32), and its
//     float results are cast back to the type they had (f32), so its consumers see the
//     types they saw before;
//   - every op of policy F32 (sum, mean, softmax, log_softmax, layer_norm, cross_entropy,
//     exp, log, pow) gets its f16/bf16 inputs cast up to f32 and its results cast back to
//     the types they had;
//   - everything else (policy Follow) is copied unchanged, as are sources (params stay
//     f32: master weights), names, scopes, locations and @checkpoint marks (a cast takes
//     its consumer's, or its producer's for a result cast back).
// The result therefore has the same inputs, params, outputs and output types. The pass is
// idempotent (a node already in its policy's types is copied as it is).
//
// It runs on the forward graph before autodiff (compiler/pipeline.cc, train_step.cc): the
// gradient of a cast is the cast back, so autodiff builds the backward matmuls and
// convolutions in the low type too (from the low-precision activations the forward
// saved, half the bytes of f32), and the gradients of f32 params come out f32 (the last
// op of each is the cast back to the param's type). Casts are elementwise ops: fusion
// puts them in the kernels that produce or consume their values.
#pragma once

#include <string>
#include <string_view>

#include "compiler/ir/graph.h"

namespace modelc {

// "fp32" -> f32, "bf16" -> bf16, "fp16" -> f16; UserError naming the choices otherwise.
DType precision_dtype(std::string_view precision);

// `low` must be bf16 or f16 (InternalError otherwise).
Graph autocast(const Graph& g, DType low);

}  // namespace modelc
