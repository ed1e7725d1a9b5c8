// Shape rules of scaled_dot_product_attention and its kernels' ops (sdpa, sdpa_grad): the
// types they give on symbolic shapes, the default scale, and every refusal word for word.
#include <fmt/format.h>

#include "tests/ir/op_harness.h"

namespace modelc::test {
namespace {

const Dim S = Dim::symbol("S"), D = Dim::symbol("D");
using Op = OpKind;

// The call's result: output 0 of its node (sdpa's node also holds the softmax statistics).
void expect_result(const OneOp& o, const TensorType& want) {
  ASSERT_FALSE(o.error) << o.error->message;
  EXPECT_EQ(o.outputs().at(0), want);
}

TEST(AttentionShapes, Types) {
  OneOp o = build_op(Op::ScaledDotProductAttention, {f32({B, H, T, 16}), f32({B, H, S, 16}), f32({B, H, S, 8})});
  expect_result(o, f32({B, H, T, 8}));
  EXPECT_DOUBLE_EQ(o.attrs().f("scale"), 0.25);  // 1 / sqrt(16)
  expect_type(build_op(Op::ScaledDotProductAttention, {tt(DType::BF16, {T, 4}), tt(DType::BF16, {S, 4}), tt(DType::BF16, {S, 2})}),
              tt(DType::BF16, {T, 2}));
  // A symbolic head size needs an explicit scale.
  expect_result(build_op(Op::ScaledDotProductAttention, {f32({T, D}), f32({S, D}), f32({S, D})}, attrs({{"scale", 0.5}})),
                f32({T, D}));
  OneOp k = build_op(Op::Sdpa, {f32({B, T, 4}), f32({B, S, 4}), f32({B, S, 3})}, attrs({{"scale", 0.5}}));
  ASSERT_FALSE(k.error) << k.error->message;
  ASSERT_EQ(k.outputs().size(), 2u);
  EXPECT_EQ(k.outputs()[0], f32({B, T, 3}));
  EXPECT_EQ(k.outputs()[1], f32({B, T, 2}));
}

TEST(AttentionShapes, Refusals) {
  const char* op = "scaled_dot_product_attention";
  auto call = [](std::vector<std::optional<TensorType>> in, Attrs a = {}) {
    return build_op(Op::ScaledDotProductAttention, in, std::move(a));
  };
  expect_error(call({f32({T}), f32({S, 4}), f32({S, 4})}),
               fmt::format("{}: q must be a float tensor [..., T, D], got f32[T]", op), 0);
  expect_error(call({f32({T, 4}), tt(DType::I32, {S, 4}), f32({S, 4})}),
               fmt::format("{}: k must be a float tensor [..., S, D], got i32[S,4]", op), 1);
  expect_error(call({f32({B, T, 4}), f32({H, S, 4}), f32({H, S, 4})}),
               fmt::format("{}: q, k and v must have one dtype and the same leading dims, got q f32[B,T,4], k f32[H,S,4], "
                           "v f32[H,S,4]", op), 1);
  expect_error(call({f32({T, 4}), f32({S, 3}), f32({S, 4})}),
               fmt::format("{}: q f32[T,4] and k f32[S,3] must have the same head size (last dim)", op), 1);
  expect_error(call({f32({T, 4}), f32({S, 4}), f32({T, 4})}),
               fmt::format("{}: k f32[S,4] and v f32[T,4] must have the same number of keys (dim -2)", op), 2);
  expect_error(call({f32({T, 300}), f32({S, 300}), f32({S, 4})}),
               fmt::format("{}: head size 300 of f32[T,300] is over the kernels' 256", op), 0);
  expect_error(call({f32({T, 4}), f32({S, 4}), f32({S, 4})}, attrs({{"dropout", 1.0}})),
               fmt::format("{}: dropout must be in [0, 1), got 1", op), -1, "dropout");
  expect_error(call({f32({T, D}), f32({S, D}), f32({S, 4})}),
               fmt::format("{}: the head size of q f32[T,D] is not known when the model is compiled: give scale", op), -1,
               "scale");
  expect_error(build_op(Op::Sdpa, {tt(DType::F16, {T, 4}), tt(DType::F16, {S, 4}), tt(DType::F16, {S, 4})}),
               "sdpa: q must be a f32 tensor [..., T, D], got f16[T,4]", 0);
  expect_error(build_op(Op::SdpaGrad, {f32({T, 4}), f32({S, 4}), f32({S, 3}), f32({T, 4}), f32({T, 2}), f32({T})}),
               "sdpa_grad: dout must be f32[T,3] for q f32[T,4], got f32[T,4]", 3);
  expect_error(build_op(Op::SdpaGrad, {f32({T, 4}), f32({S, 4}), f32({S, 3}), f32({T, 3}), f32({T, 1}), f32({T})}),
               "sdpa_grad: stats must be f32[T,2] for q f32[T,4], got f32[T,1]", 4);
}

}  // namespace
}  // namespace modelc::test
