// The CUDA pooling and embedding kernels, run on the host through their own launches and
// bodies, against the CPU twins: random geometry (odd sizes, strides, padding), ties, -inf
// and NaN for the first-maximum rule, repeated ids; byte-identical results (the gathered
// gradients sum in the twins' order). Ids out of range: the CPU twin's message, word for word.
#include <cmath>
#include <limits>

#include "tests/cuda_kernels/harness.h"

namespace modelc::kernels::cuda::test {

namespace {

// Values from a few levels, so that windows hold ties; now and then -inf or NaN.
HostTensor pool_input(std::vector<int64_t> shape, bool specials) {
  HostTensor x(ElemType::F32, std::move(shape));
  for (int64_t i = 0; i < x.numel(); ++i) {
    float v = static_cast<float>(rnd(-3, 3)) * 0.25f;
    if (specials && rnd(0, 19) == 0) v = -std::numeric_limits<float>::infinity();
    if (specials && rnd(0, 29) == 0) v = std::nanf("");
    x.f32()[i] = v;
  }
  return x;
}

HostTensor random_f32(std::vector<int64_t> shape) { return random_tensor(ElemType::F32, std::move(shape)); }

HostTensor ids_tensor(std::vector<int64_t> shape, int64_t rows) {
  HostTensor ids(ElemType::I32, std::move(shape));
  for (int64_t i = 0; i < ids.numel(); ++i) ids.i32()[i] = static_cast<int32_t>(rnd(0, rows - 1));
  return ids;
}

}  // namespace

TEST(HandPool, EveryOpRandomGeometry) {
  for (int rep = 0; rep < 60; ++rep) {
    const int64_t kh = rnd(1, 4), kw = rnd(1, 4), sh = rnd(1, 3), sw = rnd(1, 3), ph = rnd(0, kh / 2), pw = rnd(0, kw / 2);
    const int64_t N = rnd(1, 2), C = rnd(1, 3), H = rnd(kh, 9), W = rnd(kw, 9);
    const int64_t HO = (H + 2 * ph - kh) / sh + 1, WO = (W + 2 * pw - kw) / sw + 1;
    const OpInts attrs{{"kernel", {kh, kw}}, {"stride", {sh, sw}}, {"padding", {ph, pw}}};
    const std::string what = rt::shape_str({N, C, H, W}) + " kernel " + std::to_string(kh) + "x" + std::to_string(kw) + " stride " +
                             std::to_string(sh) + "x" + std::to_string(sw) + " padding " + std::to_string(ph) + "x" +
                             std::to_string(pw);
    HostTensor x = pool_input({N, C, H, W}, rep % 2 == 1);
    HostTensor g = random_f32({N, C, HO, WO});
    expect_same("max_pool2d", {&x}, {like(ElemType::F32, {N, C, HO, WO})}, attrs, {}, what);
    expect_same("avg_pool2d", {&x}, {like(ElemType::F32, {N, C, HO, WO})}, attrs, {}, what);
    expect_same("max_pool2d_grad", {&x, &g}, {like(ElemType::F32, {N, C, H, W})}, attrs, {}, what);
    expect_same("avg_pool2d_grad", {&g}, {like(ElemType::F32, {N, C, H, W})}, attrs, {}, what);
  }
}

TEST(HandPool, ErrorsAreTheCpuTwins) {
  HostTensor x = random_f32({1, 1, 4, 4});
  HostTensor xi(ElemType::I32, {1, 1, 4, 4});
  const std::vector<HostTensor> y{like(ElemType::F32, {1, 1, 2, 2})};
  expect_same_error("max_pool2d", {&x}, {like(ElemType::F32, {1, 1, 3, 3})}, {{"kernel", {2}}}, {}, "pooled tensor has shape [1,1,3,3]");
  expect_same_error("max_pool2d", {&x}, y, {}, {}, "kernel must be positive");
  expect_same_error("avg_pool2d", {&x}, y, {{"kernel", {2}}, {"padding", {2}}}, {}, "at most half the kernel");
  expect_same_error("avg_pool2d", {&x}, y, {{"kernel", {2}}, {"stride", {0}}}, {}, "stride must be positive");
  expect_same_error("max_pool2d", {&xi}, y, {{"kernel", {2}}}, {}, "image must be f32");
  expect_same_error("max_pool2d", {&x, &x}, y, {{"kernel", {2}}}, {}, "expects 1 input, got 2");
  HostTensor gy = random_f32({1, 1, 2, 2});
  expect_same_error("max_pool2d_grad", {&x, &gy}, {like(ElemType::F32, {1, 1, 4, 5})}, {{"kernel", {2}}}, {},
                    "expected the input's [1,1,4,4]");
  expect_same_error("avg_pool2d_grad", {&gy}, {like(ElemType::F32, {1, 1, 4, 4})}, {{"kernel", {2}}, {"input_shape", {1, 1, 4, 5}}},
                    {}, "disagrees with the output's shape");
}

TEST(HandEmbedding, ForwardAndGradientRandom) {
  for (int rep = 0; rep < 40; ++rep) {
    const int64_t rows = rnd(1, 40), width = rnd(1, 19);
    std::vector<int64_t> ids_shape = random_shape(rnd(1, 3), 1, 7);
    HostTensor ids = ids_tensor(ids_shape, rep % 3 == 0 ? std::min<int64_t>(rows, 3) : rows);  // many repeats now and then
    HostTensor table = random_f32({rows, width});
    std::vector<int64_t> out_shape = ids_shape;
    out_shape.push_back(width);
    HostTensor g = random_f32(out_shape);
    const std::string what = ids.shape_str() + " rows " + std::to_string(rows) + " width " + std::to_string(width);
    expect_same("embedding", {&ids, &table}, {like(ElemType::F32, out_shape)}, {}, {}, what);
    expect_same("embedding_grad", {&ids, &g}, {like(ElemType::F32, {rows, width})}, {{"rows", {rows}}}, {}, what);
  }
}

// A wide table and many rows: the gradient is split into several row ranges per column.
TEST(HandEmbedding, GradientSplitIntoRowRanges) {
  const int64_t rows = 300, width = 16;  // 300 ranges of one row per column
  HostTensor ids = ids_tensor({5, 41}, rows);
  for (int64_t i = 0; i < 30; ++i) ids.i32()[i * 3] = static_cast<int32_t>(rows - 1 - i % 2);  // repeats at the end
  HostTensor g = random_f32({5, 41, width});
  expect_same("embedding_grad", {&ids, &g}, {like(ElemType::F32, {rows, width})});
}

// The first bad id by position, reported as the CPU twin reports it, whatever comes after.
TEST(HandEmbedding, IdsOutOfRange) {
  for (int rep = 0; rep < 20; ++rep) {
    const int64_t rows = rnd(1, 9), width = rnd(1, 5);
    HostTensor ids = ids_tensor({3, 4}, rows);
    const int64_t at = rnd(0, 11);
    const int32_t bad = rnd(0, 1) ? static_cast<int32_t>(rows + rnd(0, 5)) : static_cast<int32_t>(-rnd(1, 5));
    ids.i32()[at] = bad;
    if (at < 11 && rnd(0, 1)) ids.i32()[rnd(at + 1, 11)] = -1;  // a later bad id must not win
    HostTensor table = random_f32({rows, width});
    HostTensor g = random_f32({3, 4, width});
    const std::string part = "embedding at test.model:1:1: id " + std::to_string(bad) + " at position " + std::to_string(at) +
                             " of the ids [3,4] is out of range for a table of " + std::to_string(rows) + " rows";
    expect_same_error("embedding", {&ids, &table}, {like(ElemType::F32, {3, 4, width})}, {}, {}, part);
    expect_same_error("embedding_grad", {&ids, &g}, {like(ElemType::F32, {rows, width})}, {}, {},
                      "embedding_grad at test.model:1:1: id " + std::to_string(bad) + " at position " + std::to_string(at));
  }
}

TEST(HandEmbedding, ErrorsAreTheCpuTwins) {
  HostTensor ids = ids_tensor({2, 3}, 4);
  HostTensor table = random_f32({4, 5});
  HostTensor fids = random_f32({2, 3});
  HostTensor g = random_f32({2, 3, 5});
  expect_same_error("embedding", {&fids, &table}, {like(ElemType::F32, {2, 3, 5})}, {}, {}, "ids must be i32, got f32[2,3]");
  expect_same_error("embedding", {&ids, &table}, {like(ElemType::F32, {2, 3, 4})}, {}, {}, "expected f32[2,3,5]");
  expect_same_error("embedding", {&ids}, {like(ElemType::F32, {2, 3, 5})}, {}, {}, "expects 2 inputs, got 1");
  expect_same_error("embedding_grad", {&ids, &g}, {like(ElemType::F32, {4, 5})}, {{"rows", {7}}}, {}, "rows is 7");
  expect_same_error("embedding_grad", {&ids, &table}, {like(ElemType::F32, {4, 5})}, {}, {}, "gradient has shape [4,5]");
}

}  // namespace modelc::kernels::cuda::test
