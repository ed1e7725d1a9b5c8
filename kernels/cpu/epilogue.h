// Library epilogues on the CPU (runtime/base/program.h, ints["epilogue"]): the bias and
// activation a matmul or conv2d applies to its result before anyone reads it, and the
// activations themselves.
//
// The activations are written with GCC vector extensions (4 floats, the x86-64 baseline),
// so they vectorize without -ffast-math: e^x is a Cephes-style polynomial (< 2 ulp on
// [-87, 88]; below -87 it flushes to 0), tanh is the code generator's form (odd Taylor
// series below |x| = 0.5, 1 - 2 / (e^2|x| + 1) above), sigmoid its two-branch form on
// e^-|x|, and gelu's erf form calls erff per element as the generated kernels do. Against
// the compiler's definitions (compiler/ir/ops/scalar_defs.cc) in double: tanh and sigmoid
// within 2e-7 relative, the gelus within 1e-7 max(1, |x|) (their formula cancels near
// x = -4 in f32, as the generated kernels' does), NaN and +-inf as the definitions;
// tests/runtime/epilogue_test.cc checks it.
#pragma once

#include <cstdint>

#include "kernels/cpu/library.h"

namespace modelc::kernels {

using rt::EpilogueActivation;

struct Epilogue {
  const float* bias = nullptr;  // one value per channel (matmul: output column), or none
  EpilogueActivation act = EpilogueActivation::None;

  bool empty() const { return !bias && act == EpilogueActivation::None; }
};

// Reads the instruction's ints["epilogue"] (absent: an empty epilogue). Its bias is input
// `bias_input`, which must be present, f32 and hold `channels` values in a shape of [L] or
// L with dims of 1 around it; a bias flag without that input, an input without the flag, a
// malformed attribute or an unknown activation code fail naming the op and its location.
// `channel_what` names what the bias runs along in messages ("output columns").
Epilogue read_epilogue(const LibCall& c, size_t bias_input, int64_t channels, const char* channel_what);

// y[r * ld + j] = act(y[r * ld + j] + bias[col0 + j]) for r < rows, j < cols: a block of a
// matrix whose columns are the bias's channels.
void apply_epilogue_rows(const Epilogue& e, float* y, int64_t rows, int64_t cols, int64_t ld, int64_t col0);

// y[j] = act(y[j]) for j < n.
void apply_activation(EpilogueActivation a, float* y, int64_t n);

}  // namespace modelc::kernels
