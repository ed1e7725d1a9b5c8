// The CUDA movement and fill kernels, run on the host through their own launches and bodies
// (kernels/cuda/launches.h), against the CPU twins: every op, every element size (f32, f16,
// bf16, i32, bool), random odd shapes, byte-identical results; and the shared checks.
#include <algorithm>
#include <numeric>

#include "kernels/cuda/launches.h"
#include "tests/cuda_kernels/harness.h"

namespace modelc::kernels::cuda::test {

namespace {

ElemType any_type() { return kAllTypes[rnd(0, 4)]; }

std::vector<int64_t> iota(size_t n) {
  std::vector<int64_t> v(n);
  std::iota(v.begin(), v.end(), 0);
  return v;
}

}  // namespace

TEST(HandMovement, PermuteTransposeEveryType) {
  for (int rep = 0; rep < 60; ++rep) {
    const ElemType t = kAllTypes[rep % 5];
    const auto r = static_cast<size_t>(rnd(1, 6));
    HostTensor x = random_tensor(t, random_shape(static_cast<int64_t>(r), 1, 6));
    std::vector<int64_t> perm = iota(r);
    std::shuffle(perm.begin(), perm.end(), rng());
    std::vector<int64_t> oshape;
    for (int64_t p : perm) oshape.push_back(x.shape[static_cast<size_t>(p)]);
    expect_same("permute", {&x}, {like(t, oshape)}, {{"dims", perm}}, {}, x.shape_str());
    const int64_t d0 = rnd(0, static_cast<int64_t>(r) - 1), d1 = rnd(0, static_cast<int64_t>(r) - 1);
    std::vector<int64_t> ts = x.shape;
    std::swap(ts[static_cast<size_t>(d0)], ts[static_cast<size_t>(d1)]);
    expect_same("transpose", {&x}, {like(t, ts)}, {{"dim0", {d0}}, {"dim1", {d1 - static_cast<int64_t>(r)}}}, {}, x.shape_str());
  }
}

TEST(HandMovement, BroadcastSliceReshapeCopy) {
  for (int rep = 0; rep < 60; ++rep) {
    const ElemType t = any_type();
    // broadcast: some dims of 1 in the input, and leading dims it lacks.
    std::vector<int64_t> out_shape = random_shape(rnd(1, 5), 1, 6);
    std::vector<int64_t> in_shape(out_shape.begin() + rnd(0, static_cast<int64_t>(out_shape.size()) - 1), out_shape.end());
    for (int64_t& d : in_shape)
      if (rnd(0, 2) == 0) d = 1;
    HostTensor x = random_tensor(t, in_shape);
    expect_same("broadcast_to", {&x}, {like(t, out_shape)}, {}, {}, x.shape_str() + " to " + rt::shape_str(out_shape));
    // slice along a random axis, with negative bounds now and then.
    HostTensor y = random_tensor(t, random_shape(rnd(1, 5), 1, 7));
    const int64_t axis = rnd(0, y.shape.size() - 1), n = y.shape[static_cast<size_t>(axis)];
    const int64_t s = rnd(0, n), e = rnd(s, n);
    std::vector<int64_t> ss = y.shape;
    ss[static_cast<size_t>(axis)] = e - s;
    expect_same("slice", {&y}, {like(t, ss)}, {{"axis", {axis}}, {"start", {rnd(0, 1) ? s - n : s}}, {"end", {e}}}, {},
                y.shape_str());
    // reshape and copy: rank-1 copies of the whole buffer.
    HostTensor z = random_tensor(t, random_shape(rnd(0, 4), 1, 9));
    expect_same("reshape", {&z}, {like(t, {z.numel()})}, {}, {}, z.shape_str());
    expect_same("copy", {&z}, {like(t, z.shape)}, {}, {}, z.shape_str());
  }
}

TEST(HandMovement, ConcatSplitEveryType) {
  for (int rep = 0; rep < 50; ++rep) {
    const ElemType t = kAllTypes[rep % 5];
    std::vector<int64_t> whole = random_shape(rnd(1, 4), 1, 5);
    const auto axis = static_cast<size_t>(rnd(0, static_cast<int64_t>(whole.size()) - 1));
    const int parts = static_cast<int>(rnd(1, 4));
    std::vector<HostTensor> ins;
    int64_t total = 0;
    for (int p = 0; p < parts; ++p) {
      std::vector<int64_t> s = whole;
      s[axis] = rnd(0, 4);  // empty parts too
      total += s[axis];
      ins.push_back(random_tensor(t, s));
    }
    whole[axis] = total;
    std::vector<const HostTensor*> in_ptrs;
    std::vector<HostTensor> split_outs;
    for (const HostTensor& h : ins) in_ptrs.push_back(&h), split_outs.push_back(like(t, h.shape));
    expect_same("concat", in_ptrs, {like(t, whole)}, {{"axis", {static_cast<int64_t>(axis)}}}, {}, rt::shape_str(whole));
    HostTensor w = random_tensor(t, whole);
    expect_same("split", {&w}, split_outs, {{"axis", {static_cast<int64_t>(axis)}}}, {}, rt::shape_str(whole));
  }
}

TEST(HandMovement, FillEveryType) {
  for (ElemType t : kAllTypes)
    for (double v : {0.0, 1.0, -2.5, 3.14159, 65504.0, 1e30, -7.0, 1.0 / 3}) {
      if (v == 1e30 && (t == ElemType::I32 || t == ElemType::Bool)) continue;  // no i32 holds it
      expect_same("fill", {}, {like(t, random_shape(rnd(0, 3), 1, 7))}, {}, {{"value", v}}, std::string(dtype_name(t)));
      if (v != 1e30)
        expect_same("fill", {}, {like(t, {rnd(1, 9)})}, {{"value", {static_cast<int64_t>(v)}}}, {}, std::string(dtype_name(t)));
    }
}

// Narrow copies become 4-byte copies when the layout allows, and stay narrow when it does
// not; both give the CPU twin's bytes (checked above), here the choice itself.
TEST(HandMovement, NarrowCopiesWidenWhenAligned) {
  HostTensor x = random_tensor(ElemType::Bool, {3, 8});
  std::vector<HostTensor> outs{like(ElemType::Bool, {3, 8})};
  OpInts none;
  LibCall c;
  c.op = "copy";
  c.ints = &none;
  c.inputs.push_back({x.bytes.data(), x.type, x.shape});
  c.outputs.push_back({outs[0].bytes.data(), outs[0].type, outs[0].shape});
  const bool aligned = reinterpret_cast<uintptr_t>(x.bytes.data()) % 4 == 0 && reinterpret_cast<uintptr_t>(outs[0].bytes.data()) % 4 == 0;
  OpLaunches l = plan_launches(c, nullptr);
  ASSERT_EQ(l.launches.size(), 1u);
  EXPECT_EQ(l.launches[0].kernel, aligned ? HandKernel::CopyU32 : HandKernel::CopyU8);
  if (aligned) {
    EXPECT_EQ(l.launches[0].n(), 6);
  }
  // A transpose of bytes cannot widen: its inner dim is strided.
  c.op = "transpose";
  c.outputs[0].shape = {8, 3};
  l = plan_launches(c, nullptr);
  ASSERT_EQ(l.launches.size(), 1u);
  EXPECT_EQ(l.launches[0].kernel, HandKernel::CopyU8);
  EXPECT_EQ(l.launches[0].n(), 24);
  // An in-place reshape launches nothing.
  c.op = "reshape";
  c.outputs[0] = {x.bytes.data(), x.type, {24}};
  EXPECT_TRUE(plan_launches(c, nullptr).launches.empty());
}

// Contiguous dims merge, so a rank-9 copy that is mostly contiguous runs; one that cannot
// merge below 8 dims is refused with a clear message (the CPU twin has no such limit).
TEST(HandMovement, RankLimit) {
  std::vector<int64_t> shape(9, 2);
  HostTensor x = random_tensor(ElemType::F32, shape);
  std::vector<int64_t> swap_last = iota(9);
  std::swap(swap_last[7], swap_last[8]);
  expect_same("permute", {&x}, {like(ElemType::F32, shape)}, {{"dims", swap_last}});
  std::vector<int64_t> reverse = iota(9);
  std::reverse(reverse.begin(), reverse.end());
  std::vector<HostTensor> outs{like(ElemType::F32, shape)};
  EXPECT_EQ(error_of([&] { run_emulated_op("permute", {&x}, outs, {{"dims", reverse}}); }),
            "permute at test.model:1:1: copies 9 dims that cannot be merged; the CUDA copy takes at most 8");
}

// The checks are shared: bad operands give the CPU twin's messages, word for word.
TEST(HandMovement, ErrorsAreTheCpuTwins) {
  HostTensor x = random_tensor(ElemType::F32, {2, 3});
  expect_same_error("transpose", {&x}, {like(ElemType::I32, {3, 2})}, {}, {}, "input is f32 but output is i32");
  expect_same_error("permute", {&x}, {like(ElemType::F32, {3, 2})}, {{"dims", {0, 0}}}, {}, "are not a permutation");
  expect_same_error("permute", {&x}, {like(ElemType::F32, {3, 2})}, {}, {}, "missing attribute 'dims'");
  expect_same_error("slice", {&x}, {like(ElemType::F32, {2, 1})}, {{"axis", {1}}, {"start", {2}}, {"end", {9}}}, {},
                    "slice [2:9] is out of range");
  expect_same_error("broadcast_to", {&x}, {like(ElemType::F32, {2, 4})}, {}, {}, "cannot broadcast [2,3] to [2,4]");
  expect_same_error("reshape", {&x}, {like(ElemType::F32, {7})}, {}, {}, "cannot copy 6 elements");
  expect_same_error("concat", {&x, &x}, {like(ElemType::F32, {2, 7})}, {{"axis", {1}}}, {}, "the parts sum to 6");
  expect_same_error("split", {&x}, {like(ElemType::F32, {2, 1}), like(ElemType::F32, {2, 1})}, {{"axis", {1}}}, {},
                    "the parts sum to 2");
  expect_same_error("copy", {&x, &x}, {like(ElemType::F32, {2, 3})}, {}, {}, "expects 1 input, got 2");
  expect_same_error("fill", {}, {like(ElemType::F32, {2})}, {}, {}, "missing attribute 'value'");
  EXPECT_NE(error_of([&] {
              std::vector<HostTensor> o{like(ElemType::F32, {3, 2})};
              run_emulated_op("transpose", {&x}, o, {{"dim0", {5}}});
            }).find("dim0 5 is out of range for rank 2"),
            std::string::npos);
}

}  // namespace modelc::kernels::cuda::test
