// Helpers shared by the gradient rules (compiler/ir/grads/*.cc), and the rules the op
// records name.
#pragma once

#include <vector>

#include "compiler/ir/grad.h"

namespace modelc::grads {

// The output gradient `i`, or a zero tensor of the output's type when none reached it.
Value out_grad(GradCtx& c, int i = 0);
// Sums `g` over the axes numpy broadcasting added or stretched to reach it from `shape`,
// then reshapes to `shape`: the gradient of an input that was broadcast.
Value reduce_to(GradCtx& c, Value g, const Shape& shape);
// reduce_to the shape of input i, cast to its dtype.
Value to_input(GradCtx& c, Value g, int i);
// The number of elements of `dims` as a rank-0 tensor of `dtype` (a constant when the dims
// are known; a sum of ones when some are symbolic).
Value count(GradCtx& c, const Shape& dims, DType dtype);
// `x` reshaped so that the `axes` a reduction removed are back as extents of 1 (keepdims).
Value keepdims(GradCtx& c, Value x, const Shape& in_shape, const Ints& axes, bool kept);
// sum / mean over axes, keeping them (keepdims = true).
Value sum_keep(GradCtx& c, Value x, Ints axes);
Value mean_keep(GradCtx& c, Value x, Ints axes);
// The value of a dim a rule must know (one_hot classes, embedding rows, concat offsets);
// throws UserError naming the op, `what` and the node's place when it is symbolic.
int64_t known(const GradCtx& c, const Dim& d, const char* what);

// Binary op shorthands: c.emit(op, {a, b}).
Value add(GradCtx& c, Value a, Value b);
Value sub(GradCtx& c, Value a, Value b);
Value mul(GradCtx& c, Value a, Value b);
Value div(GradCtx& c, Value a, Value b);
Value neg(GradCtx& c, Value a);
// A scalar constant of the dtype of `like`.
Value scalar(GradCtx& c, double v, Value like);

// The rules the records name (OpRegistry::Builder::grad), by op family.
// elementwise.cc
void gelu(GradCtx& c);
void cast(GradCtx& c);
// reduce.cc
void sum(GradCtx& c);
void mean(GradCtx& c);
void max(GradCtx& c);
void prod(GradCtx& c);
// shape.cc
void matmul(GradCtx& c);
void transpose(GradCtx& c);
void permute(GradCtx& c);
void reshape(GradCtx& c);
void broadcast_to(GradCtx& c);
void slice(GradCtx& c);
void concat(GradCtx& c);
void split(GradCtx& c);
// nn.cc
void softmax(GradCtx& c);
void log_softmax(GradCtx& c);
void layer_norm(GradCtx& c);
void embedding(GradCtx& c);
void cross_entropy(GradCtx& c);
void dropout(GradCtx& c);
void causal_mask(GradCtx& c);
// conv.cc
void conv2d(GradCtx& c);
void conv2d_grad_input(GradCtx& c);  // conv_transpose2d's kernel
void max_pool2d(GradCtx& c);
void avg_pool2d(GradCtx& c);

}  // namespace modelc::grads
