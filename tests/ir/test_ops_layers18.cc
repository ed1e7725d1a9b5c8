// Shape rules of conv1d, conv_transpose2d, bilinear upsample, gather, scatter_add, topk,
// arange, rand_like and randn_like: the types they give on symbolic shapes, and every
// refusal word for word. (Their values: tests/conformance against the references, and
// tests/grad/test_torch_index.cc against PyTorch's numbers.)
#include <fmt/format.h>

#include "tests/ir/op_harness.h"

namespace modelc::test {
namespace {

const Dim N = Dim::symbol("N"), L = Dim::symbol("L");

TEST(Layers18, Conv1d) {
  expect_type(build_op(OpKind::Conv1d, {f32({N, 4, L}), f32({6, 4, 3}), f32({6})}, attrs({{"padding", int64_t{1}}})),
              f32({N, 6, L}));
  expect_type(build_op(OpKind::Conv1d, {f32({N, 4, 9}), f32({6, 2, 3})}, attrs({{"stride", int64_t{2}}, {"groups", int64_t{2}}})),
              f32({N, 6, 4}));
  expect_error(build_op(OpKind::Conv1d, {f32({N, 4}), f32({6, 4, 3})}), "conv1d needs a float input [N, C, L], got f32[N,4]", 0);
  expect_error(build_op(OpKind::Conv1d, {f32({N, 4, L}), f32({6, 4})}),
               "conv1d: the weight must be a f32 tensor of rank 3, got f32[6,4]", 1);
  expect_error(build_op(OpKind::Conv1d, {f32({N, 4, L}), f32({6, 3, 3})}),
               "conv1d: weight f32[6,3,3] with groups 1 does not fit input f32[N,4,L] (weights are [C_out, C_in/groups, k])", 1);
  expect_error(build_op(OpKind::Conv1d, {f32({N, 4, L}), f32({6, 4, 3}), f32({4})}),
               "conv1d: bias must be f32[6] for weight f32[6,4,3], got f32[4]", 2);
  expect_error(build_op(OpKind::Conv1d, {f32({N, 4, L}), f32({6, 4, 3})}, attrs({{"groups", int64_t{0}}})),
               "conv1d: groups must be >= 1, got 0", -1, "groups");
  expect_error(build_op(OpKind::Conv1d, {f32({N, 4, L}), f32({6, 4, 3})}, attrs({{"stride", int64_t{0}}})),
               "conv1d: stride and dilation must be positive and padding non-negative, got 0, 1 and 0", -1, "stride");
  expect_error(build_op(OpKind::Conv1d, {f32({N, 4, L}), f32({6, 4, 3})}, attrs({{"stride", int64_t{2}}})),
               "conv1d with stride 2 needs a known length, got f32[N,4,L]", 0);
  expect_error(build_op(OpKind::Conv1d, {f32({N, 4, 2}), f32({6, 4, 3})}),
               "conv1d output length 0 is not positive: input f32[N,4,2], kernel 3", 0);
}

TEST(Layers18, ConvTranspose2d) {
  // (in - 1) stride - 2 padding + dilation (k - 1) + output_padding + 1
  expect_type(build_op(OpKind::ConvTranspose2d, {f32({N, 4, H, 5}), f32({4, 3, 3, 3}), f32({3})},
                       attrs({{"padding", Ints{1}}})),
              f32({N, 3, H, 5}));
  expect_type(build_op(OpKind::ConvTranspose2d, {f32({N, 4, 3, 5}), f32({4, 3, 3, 3})},
                       attrs({{"stride", Ints{2}}, {"padding", Ints{1}}, {"output_padding", Ints{1}}, {"groups", int64_t{2}}})),
              f32({N, 6, 6, 10}));
  expect_error(build_op(OpKind::ConvTranspose2d, {f32({N, 4, 3, 5}), f32({3, 3, 3, 3})}),
               "conv_transpose2d: weight f32[3,3,3,3] with groups 1 does not fit input f32[N,4,3,5] (weights are "
               "[C_in, C_out/groups, kh, kw])", 1);
  expect_error(build_op(OpKind::ConvTranspose2d, {f32({N, 4, 3, 5}), f32({4, 3, 3, 3})},
                       attrs({{"stride", Ints{2}}, {"output_padding", Ints{2}}})),
               "conv_transpose2d: output_padding 2 must be smaller than the stride 2 or the dilation 1", -1,
               "output_padding");
  expect_error(build_op(OpKind::ConvTranspose2d, {f32({N, 4, H, 5}), f32({4, 3, 3, 3})},
                        attrs({{"stride", Ints{2}}, {"output_padding", Ints{1}}})),
               "conv_transpose2d with stride 2 needs a known input height, got f32[N,4,H,5]", 0);
  expect_error(build_op(OpKind::ConvTranspose2d, {f32({N, 4, 1, 1}), f32({4, 3, 1, 1})}, attrs({{"padding", Ints{1}}})),
               "conv_transpose2d output size -1 is not positive: input f32[N,4,1,1], weight f32[4,3,1,1]", 0);
  expect_error(build_op(OpKind::ConvTranspose2d, {f32({N, 4, 3}), f32({4, 3, 3, 3})}),
               "conv_transpose2d needs a float input [N, C, H, W], got f32[N,4,3]", 0);
}

TEST(Layers18, UpsampleModes) {
  expect_type(build_op(OpKind::Upsample, {f32({N, 3, 4, 5})}, attrs({{"scale", int64_t{2}}, {"mode", std::string("bilinear")}})),
              f32({N, 3, 8, 10}));
  expect_error(build_op(OpKind::Upsample, {f32({N, 3, 4, 5})}, attrs({{"scale", int64_t{2}}, {"mode", std::string("bicubic")}})),
               "upsample: mode \"bicubic\" is not one of \"nearest\" and \"bilinear\"", -1, "mode");
  expect_error(build_op(OpKind::Upsample, {f32({N, 3, 4, 5})}, attrs({{"scale", int64_t{2}}, {"align_corners", true}})),
               "upsample: align_corners is for mode \"bilinear\" only (as in PyTorch)", -1, "align_corners");
}

TEST(Layers18, GatherAndScatterAdd) {
  const TensorType idx = tt(DType::I32, {N, 2});
  expect_type(build_op(OpKind::Gather, {f32({N, 5}), idx}, attrs({{"axis", int64_t{-1}}})), f32({N, 2}));
  expect_error(build_op(OpKind::Gather, {f32({N, 5}), tt(DType::I32, {N})}, attrs({{"axis", int64_t{1}}})),
               "gather: the index must be an i32 tensor of the rank of f32[N,5] (2), got i32[N]", 1);
  expect_error(build_op(OpKind::Gather, {f32({4, 5}), tt(DType::I32, {6, 2})}, attrs({{"axis", int64_t{1}}})),
               "gather: index i32[6,2] is larger than the input f32[4,5] along axis 0", 1);
  expect_error(build_op(OpKind::Gather, {f32({N, 5}), idx}, attrs({{"axis", int64_t{0}}})),
               "gather: the extent of axis 0 of f32[N,5] must be known when the model is compiled", -1, "axis");
  expect_error(build_op(OpKind::Gather, {f32({N, 5}), idx}, attrs({{"axis", int64_t{2}}})),
               "gather: axis 2 is out of range for f32[N,5] (rank 2)", -1, "axis");
  expect_error(build_op(OpKind::Gather, {tt(DType::I32, {N, 5}), idx}, attrs({{"axis", int64_t{1}}})),
               "gather expects a float tensor with an axis, got i32[N,5]", 0);
  expect_type(build_op(OpKind::ScatterAdd, {f32({N, 5}), idx, f32({N, 3})}, attrs({{"axis", int64_t{1}}})), f32({N, 5}));
  expect_error(build_op(OpKind::ScatterAdd, {f32({N, 5}), idx, f32({N, 1})}, attrs({{"axis", int64_t{1}}})),
               "scatter_add: index i32[N,2] is larger than src f32[N,1] along axis 1", 1);
  expect_error(build_op(OpKind::ScatterAdd, {f32({N, 5}), idx, tt(DType::BF16, {N, 2})}, attrs({{"axis", int64_t{1}}})),
               "scatter_add: src must be a f32 tensor of rank 2, got bf16[N,2]", 2);
}

TEST(Layers18, TopkHasTwoResults) {
  const OneOp o = build_op(OpKind::Topk, {f32({N, 10})}, attrs({{"k", int64_t{3}}}));
  ASSERT_FALSE(o.error) << o.error->message;
  ASSERT_EQ(o.g.outputs.size(), 2u);
  EXPECT_EQ(o.g.type(o.g.outputs[0].value), f32({N, 3}));
  EXPECT_EQ(o.g.type(o.g.outputs[1].value), tt(DType::I32, {N, 3}));
  expect_error(build_op(OpKind::Topk, {f32({N, 10})}, attrs({{"k", int64_t{11}}})),
               "topk: k must be in [1, 10] (the axis's extent, at most 64), got 11", -1, "k");
  expect_error(build_op(OpKind::Topk, {f32({N, 100})}, attrs({{"k", int64_t{65}}})),
               "topk: k must be in [1, 64] (the axis's extent, at most 64), got 65", -1, "k");
  expect_error(build_op(OpKind::Topk, {f32({N, 10})}, attrs({{"k", int64_t{2}}, {"axis", int64_t{0}}})),
               "topk: the extent of axis 0 of f32[N,10] must be known when the model is compiled", -1, "axis");
  expect_error(build_op(OpKind::Topk, {f32({})}, attrs({{"k", int64_t{1}}})),
               "topk expects a float tensor with an axis, got f32[]", 0);
}

TEST(Layers18, Arange) {
  expect_type(build_op(OpKind::Arange, {}, attrs({{"end", 5.0}})), f32({5}));
  expect_type(build_op(OpKind::Arange, {}, attrs({{"end", 8.0}, {"step", 2.0}, {"dtype", DType::I32}})), tt(DType::I32, {4}));
  expect_error(build_op(OpKind::Arange, {}, attrs({{"end", 0.0}, {"start", 4.0}})),
               "arange: no values from start 4 up to end 0 with step 1 (the first argument is the end: arange(end, "
               "start = 0, step = 1))", -1, "end");
  expect_error(build_op(OpKind::Arange, {}, attrs({{"end", 4.0}, {"step", 0.0}})),
               "arange: start 0, end 4 and step 0 must be finite and step non-zero", -1, "step");
  expect_error(build_op(OpKind::Arange, {}, attrs({{"end", 4.0}, {"step", 0.5}, {"dtype", DType::I32}})),
               "arange: an i32 range needs an integer start and step, got 0 and 0.5", -1, "dtype");
  expect_error(build_op(OpKind::Arange, {}, attrs({{"end", 4.0}, {"dtype", DType::BF16}})),
               "arange: dtype must be f32 or i32, got bf16", -1, "dtype");
  expect_error(build_op(OpKind::Arange, {}, attrs({{"end", 1e9}})),
               "arange: 1000000000 values are more than the 2^24 it counts exactly", -1, "end");
}

TEST(Layers18, RandomOps) {
  for (OpKind op : {OpKind::RandLike, OpKind::RandnLike}) {
    expect_type(build_op(op, {f32({N, 3})}), f32({N, 3}));
    EXPECT_TRUE(op_info(op).keyed) << op_name(op);
    expect_error(build_op(op, {tt(DType::I32, {N})}),
                 fmt::format("{} needs a float tensor (for its shape and dtype), got i32[N]", op_name(op)), 0);
  }
  EXPECT_TRUE(op_info(OpKind::Dropout).keyed);
}

}  // namespace
}  // namespace modelc::test
