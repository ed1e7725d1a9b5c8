// Fused attention in a compiled training step: the memory it plans grows with T, not T^2
// (no [T, S] matrix is kept for the backward pass, as the same attention written out with
// matmul and softmax keeps), its dropout is on in the train step and off in eval, and the
// compiler's refusals of a bad call. (Its values and gradients: tests/conformance against
// the reference, tests/grad/test_torch_index.cc against PyTorch's.)
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>

#include "tests/train/torch_golden.h"

namespace modelc::test {
namespace {

constexpr int64_t kT = 512, kHeads = 2;

// A one-layer causal attention model on [1, T, 32] inputs, its attention fused or written out.
std::string attention_model(bool fused, double dropout) {
  const std::string att = fused
      ? fmt::format("scaled_dot_product_attention(q, k, v, causal = true, dropout = {})", dropout)
      : "softmax(causal_mask(q @ transpose(k) / 4.0)) @ v";
  return fmt::format(R"(model att(B = 1, T = {0}, C = 32, H = {1}) {{
  input x: f32[B, T, C]
  input y: f32[B, T, C]
  param wq: f32[C, C] = normal(std = 0.1)
  param wk: f32[C, C] = normal(std = 0.1)
  param wv: f32[C, C] = normal(std = 0.1)
  q = transpose(reshape(x @ wq, [B, T, H, C / H]), 1, 2)
  k = transpose(reshape(x @ wk, [B, T, H, C / H]), 1, 2)
  v = transpose(reshape(x @ wv, [B, T, H, C / H]), 1, 2)
  o = reshape(transpose({2}, 1, 2), [B, T, C])
  loss = mean((o - y) * (o - y))
  output loss
}}
train att {{
  optimizer = sgd(lr = 0.1)
  batch = 1
  steps = 1
}}
)", kT, kHeads, att);
}

// The most elements of any buffer of the train step.
int64_t largest_buffer(const rt::Program& p) {
  int64_t most = 0;
  for (const rt::BufferDesc& b : p.buffers) {
    int64_t n = 1;
    for (const rt::SizeExpr& d : b.shape) n *= d.eval({});
    most = std::max(most, n);
  }
  return most;
}

TEST(Attention, PlannedMemoryGrowsWithTNotTSquared) {
  auto fused = compile_model_text("att", attention_model(true, 0.0));
  auto unfused = compile_model_text("att", attention_model(false, 0.0));
  ASSERT_TRUE(fused && unfused);
  // Written out, the scores [1, H, T, T] are a buffer; fused, nothing is larger than a
  // [T, C] activation (or the [C, C] weights).
  EXPECT_GE(largest_buffer(*unfused), kHeads * kT * kT);
  EXPECT_LE(largest_buffer(*fused), kT * 32);
}

TEST(Attention, DropoutIsOnInTrainingAndOffInEval) {
  auto p = compile_model_text("att", attention_model(true, 0.25));
  ASSERT_TRUE(p);
  auto dropout_of = [&](const char* fn, const char* op) {
    for (const rt::Instr& in : p->function(fn)->instrs)
      if (in.op == op) {
        EXPECT_EQ(in.sizes.size(), 2u) << fn << " " << op << ": the seed and step it draws with";
        return in.floats.at("dropout");
      }
    ADD_FAILURE() << "no " << op << " in " << fn;
    return -1.0;
  };
  EXPECT_EQ(dropout_of("train_step", "sdpa"), 0.25);
  EXPECT_EQ(dropout_of("train_step", "sdpa_grad"), 0.25);
  EXPECT_EQ(dropout_of("eval", "sdpa"), 0.0);
}

}  // namespace
}  // namespace modelc::test
