// The geometry every 2-D convolution kernel shares (the im2col and oneDNN backends): read
// from the attributes and the operands' shapes, checked once.
#pragma once

#include <cstdint>

#include "kernels/cpu/library.h"

namespace modelc::kernels {

struct ConvGeom {
  int64_t N, C, H, W;     // input image
  int64_t O, Cg, KH, KW;  // weight [O, C/groups, KH, KW]
  int64_t HO, WO;         // output image
  int64_t groups, Og;     // Og = O / groups
  int64_t sh, sw, ph, pw, dh, dw;
};

// Checks x [N,C,H,W], w [O,C/groups,KH,KW] and y [N,O,HO,WO] (all f32; with `low_float`
// all of one type, f32, f16 or bf16: a backend that takes low precision natively) against
// the attributes stride/padding/dilation/groups; `names` says which operand is which in
// messages ("input", "weight", "output" or the gradients' roles).
ConvGeom conv_geometry(const LibCall& c, const TensorArg& x, const TensorArg& w, const TensorArg& y,
                       const char* x_role, const char* w_role, const char* y_role, bool low_float = false);
// The optional bias (input 2) of a forward convolution: nullptr when absent; fails unless
// it is f32[O].
const TensorArg* conv_bias(const LibCall& c, const ConvGeom& g);

// What a forward convolution adds and applies to its result: its own bias (input 2) or an
// epilogue bias (input 3; runtime/base/program.h, ints["epilogue"]), never both, and the
// epilogue's activation. Fails naming the op and location on a malformed epilogue.
struct ConvEpilogue {
  const float* bias = nullptr;  // f32[O] or none
  rt::EpilogueActivation act = rt::EpilogueActivation::None;
};
ConvEpilogue conv_epilogue(const LibCall& c, const ConvGeom& g);

// The table's convolutions (kernels/library_ops.def): the chosen backend (conv_backend()),
// f16/bf16 operands widened to f32 around it (run_widened).
void conv2d_cpu(const LibCall& c);
void conv2d_grad_input_cpu(const LibCall& c);
void conv2d_grad_weight_cpu(const LibCall& c);

}  // namespace modelc::kernels
