// Data movement (transpose, permute, reshape, broadcast_to, slice, concat, split, copy)
// and fill against naive index loops on random shapes, f32 and i32; every error.
#include <algorithm>
#include <cstring>
#include <numeric>

#include "tests/runtime/rt_harness.h"

namespace modelc::rt::test {

namespace {

std::vector<int64_t> strides(const std::vector<int64_t>& s) {
  std::vector<int64_t> r(s.size(), 1);
  for (size_t k = s.size(); k-- > 1;) r[k - 1] = r[k] * s[k];
  return r;
}

std::vector<int64_t> unravel(int64_t flat, const std::vector<int64_t>& shape) {
  std::vector<int64_t> idx(shape.size(), 0);
  for (size_t k = shape.size(); k-- > 0;) idx[k] = flat % shape[k], flat /= shape[k];
  return idx;
}

HostTensor random_i32(std::vector<int64_t> shape) {
  HostTensor t(ElemType::I32, std::move(shape));
  for (int64_t i = 0; i < t.numel(); ++i) t.i32()[i] = static_cast<int32_t>(rnd(-1000, 1000));
  return t;
}

HostTensor random_any(std::vector<int64_t> shape) { return rnd(0, 1) ? random_f32(shape) : random_i32(shape); }

// Element i of a 4-byte tensor as raw bits (f32 and i32 alike).
uint32_t bits(const HostTensor& t, int64_t i) {
  uint32_t v = 0;
  std::memcpy(&v, t.bytes.data() + i * 4, 4);
  return v;
}

}  // namespace

TEST(Movement, PermuteAndTranspose) {
  for (int rep = 0; rep < 40; ++rep) {
    auto r = static_cast<size_t>(rnd(1, 5));
    HostTensor x = random_any(random_shape(static_cast<int64_t>(r), 1, 5));
    std::vector<int64_t> perm(r);
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng());
    std::vector<int64_t> oshape;
    for (int64_t p : perm) oshape.push_back(x.shape[static_cast<size_t>(p)]);
    HostTensor out(x.type, oshape);
    std::vector<int64_t> given = perm;
    if (rnd(0, 1)) given[0] -= static_cast<int64_t>(r);  // a negative spelling
    run_op("permute", {&x}, {&out}, {{"dims", given}});
    auto xs = strides(x.shape);
    for (int64_t i = 0; i < out.numel(); ++i) {
      auto idx = unravel(i, oshape);
      int64_t off = 0;
      for (size_t k = 0; k < r; ++k) off += idx[k] * xs[static_cast<size_t>(perm[k])];
      ASSERT_EQ(bits(out, i), bits(x, off)) << "permute " << x.shape_str() << " element " << i;
    }
    // transpose = permute with two axes swapped
    int64_t d0 = rnd(0, static_cast<int64_t>(r) - 1), d1 = rnd(0, static_cast<int64_t>(r) - 1);
    std::vector<int64_t> tp(r);
    std::iota(tp.begin(), tp.end(), 0);
    std::swap(tp[static_cast<size_t>(d0)], tp[static_cast<size_t>(d1)]);
    std::vector<int64_t> ts;
    for (int64_t p : tp) ts.push_back(x.shape[static_cast<size_t>(p)]);
    HostTensor t1(x.type, ts), t2(x.type, ts);
    run_op("transpose", {&x}, {&t1}, {{"dim0", {d0}}, {"dim1", {d1}}});
    run_op("permute", {&x}, {&t2}, {{"dims", tp}});
    EXPECT_EQ(t1.bytes, t2.bytes);
  }
}

TEST(Movement, BroadcastTo) {
  for (int rep = 0; rep < 40; ++rep) {
    std::vector<int64_t> target = random_shape(rnd(0, 4), 1, 4);
    size_t drop = static_cast<size_t>(rnd(0, static_cast<int64_t>(target.size())));
    std::vector<int64_t> xs(target.begin() + static_cast<int64_t>(drop), target.end());
    for (auto& d : xs) if (rnd(0, 1)) d = 1;
    HostTensor x = random_any(xs), out(x.type, target);
    run_op("broadcast_to", {&x}, {&out});
    auto st = strides(xs);
    for (int64_t i = 0; i < out.numel(); ++i) {
      auto idx = unravel(i, target);
      int64_t off = 0;
      for (size_t k = 0; k < xs.size(); ++k) off += (xs[k] == 1 ? 0 : idx[drop + k]) * st[k];
      ASSERT_EQ(bits(out, i), bits(x, off)) << x.shape_str() << " -> " << out.shape_str();
    }
  }
}

TEST(Movement, SliceWithNegativeBounds) {
  for (int rep = 0; rep < 40; ++rep) {
    HostTensor x = random_any(random_shape(rnd(1, 4), 1, 6));
    auto axis = static_cast<size_t>(rnd(0, static_cast<int64_t>(x.shape.size()) - 1));
    int64_t n = x.shape[axis], s = rnd(0, n), e = rnd(s, n);
    int64_t gs = s, ge = e;
    if (rnd(0, 1) && s < n) gs = s - n;  // negative spellings count from the end
    if (rnd(0, 1) && e < n) ge = e - n;
    std::vector<int64_t> os = x.shape;
    os[axis] = e - s;
    HostTensor out(x.type, os);
    int64_t ax = static_cast<int64_t>(axis) - (rnd(0, 1) ? static_cast<int64_t>(x.shape.size()) : 0);
    run_op("slice", {&x}, {&out}, {{"axis", {ax}}, {"start", {gs}}, {"end", {ge}}});
    auto st = strides(x.shape);
    for (int64_t i = 0; i < out.numel(); ++i) {
      auto idx = unravel(i, os);
      idx[axis] += s;
      int64_t off = 0;
      for (size_t k = 0; k < idx.size(); ++k) off += idx[k] * st[k];
      ASSERT_EQ(bits(out, i), bits(x, off)) << "slice " << x.shape_str() << " axis " << axis << " [" << s << ":" << e << "]";
    }
  }
}

TEST(Movement, ConcatAndSplitRoundTrip) {
  for (int rep = 0; rep < 40; ++rep) {
    std::vector<int64_t> base = random_shape(rnd(1, 4), 1, 4);
    auto axis = static_cast<size_t>(rnd(0, static_cast<int64_t>(base.size()) - 1));
    int64_t parts = rnd(1, 4);
    ElemType type = rnd(0, 1) ? ElemType::F32 : ElemType::I32;
    std::vector<HostTensor> xs;
    std::vector<int64_t> os = base;
    os[axis] = 0;
    for (int64_t p = 0; p < parts; ++p) {
      std::vector<int64_t> s = base;
      s[axis] = rnd(0, 3);
      os[axis] += s[axis];
      xs.push_back(type == ElemType::F32 ? random_f32(s) : random_i32(s));
    }
    HostTensor out(type, os);
    std::vector<HostTensor*> ins;
    for (auto& t : xs) ins.push_back(&t);
    run_op("concat", ins, {&out}, {{"axis", {static_cast<int64_t>(axis)}}});
    // Reference: element i of out comes from the part whose axis range holds idx[axis].
    for (int64_t i = 0; i < out.numel(); ++i) {
      auto idx = unravel(i, os);
      size_t p = 0;
      while (idx[axis] >= xs[p].shape[axis]) idx[axis] -= xs[p++].shape[axis];
      auto st = strides(xs[p].shape);
      int64_t off = 0;
      for (size_t k = 0; k < idx.size(); ++k) off += idx[k] * st[k];
      ASSERT_EQ(bits(out, i), bits(xs[p], off)) << "concat element " << i;
    }
    // split into equal sections gives back contiguous pieces of the same layout
    int64_t sections = rnd(1, 3);
    std::vector<int64_t> ss = base;
    ss[axis] = sections * rnd(1, 3);
    HostTensor whole = type == ElemType::F32 ? random_f32(ss) : random_i32(ss);
    std::vector<int64_t> ps = ss;
    ps[axis] /= sections;
    std::vector<HostTensor> pieces(static_cast<size_t>(sections), HostTensor(type, ps));
    std::vector<HostTensor*> outs;
    for (auto& t : pieces) outs.push_back(&t);
    run_op("split", {&whole}, outs, {{"axis", {static_cast<int64_t>(axis)}}, {"sections", {sections}}});
    HostTensor back(type, ss);
    run_op("concat", outs, {&back}, {{"axis", {static_cast<int64_t>(axis)}}});
    EXPECT_EQ(back.bytes, whole.bytes) << "split then concat of " << whole.shape_str();
    auto st = strides(ss);
    for (int64_t i = 0; i < pieces[0].numel(); ++i) {  // the first piece by index
      auto idx = unravel(i, ps);
      int64_t off = 0;
      for (size_t k = 0; k < idx.size(); ++k) off += idx[k] * st[k];
      ASSERT_EQ(bits(pieces[0], i), bits(whole, off));
    }
  }
}

TEST(Movement, ReshapeCopyFill) {
  HostTensor x = random_f32({2, 3, 4}), r(ElemType::F32, {4, 6}), c(ElemType::F32, {2, 3, 4});
  run_op("reshape", {&x}, {&r});
  EXPECT_EQ(r.bytes, x.bytes);
  run_op("copy", {&x}, {&c});
  EXPECT_EQ(c.bytes, x.bytes);
  HostTensor f(ElemType::F32, {3, 5}), i(ElemType::I32, {7}), b(ElemType::Bool, {4}), h(ElemType::BF16, {2}), g(ElemType::F16, {2});
  HostTensor big(ElemType::F32, {200000});
  run_op("fill", {}, {&f}, {}, {{"value", 2.5}});
  run_op("fill", {}, {&big}, {}, {{"value", -1.0}});
  run_op("fill", {}, {&i}, {}, {{"value", 41.6}});
  run_op("fill", {}, {&b}, {}, {{"value", 1.0}});
  run_op("fill", {}, {&h}, {}, {{"value", 1.0}});
  run_op("fill", {}, {&g}, {}, {{"value", 1.0}});
  for (int64_t k = 0; k < f.numel(); ++k) EXPECT_EQ(f.f32()[k], 2.5f);
  for (int64_t k = 0; k < big.numel(); ++k) ASSERT_EQ(big.f32()[k], -1.0f);
  for (int64_t k = 0; k < i.numel(); ++k) EXPECT_EQ(i.i32()[k], 42);
  for (uint8_t v : b.bytes) EXPECT_EQ(v, 1);
  HostTensor from_int(ElemType::F32, {3});
  run_op("fill", {}, {&from_int}, {{"value", {3}}});
  for (int64_t k = 0; k < 3; ++k) EXPECT_EQ(from_int.f32()[k], 3.0f);
  EXPECT_EQ(h.bytes[1], 0x3f);  // bf16 1.0 = 0x3f80
  EXPECT_EQ(h.bytes[0], 0x80);
  EXPECT_EQ(g.bytes[1], 0x3c);  // f16 1.0 = 0x3c00
  EXPECT_EQ(g.bytes[0], 0x00);
}

TEST(Movement, Errors) {
  HostTensor x = random_f32({2, 3}), o = random_f32({3, 2}), wrong = random_f32({2, 2});
  expect_error([&] { run_op("permute", {&x}, {&o}, {{"dims", {0, 0}}}); }, {"permute", "test.model:1:1", "not a permutation"});
  expect_error([&] { run_op("permute", {&x}, {&o}, {{"dims", {0}}}); }, {"needs 2 dims"});
  expect_error([&] { run_op("permute", {&x}, {&o}, {{"dims", {0, 2}}}); }, {"dim 2 is out of range"});
  expect_error([&] { run_op("permute", {&x}, {&o}); }, {"missing attribute 'dims'"});
  expect_error([&] { run_op("transpose", {&x}, {&wrong}, {{"dim0", {0}}, {"dim1", {1}}}); }, {"output has shape [2,2]", "expected [3,2]"});
  expect_error([&] { run_op("reshape", {&x}, {&wrong}); }, {"reshape", "cannot copy 6 elements"});
  expect_error([&] { run_op("copy", {&x}, {&o}); }, {"copy", "input has shape [2,3] but output has [3,2]"});
  HostTensor xi(ElemType::I32, {2, 3});
  expect_error([&] { run_op("copy", {&x}, {&xi}); }, {"input is f32 but output is i32"});
  HostTensor b(ElemType::F32, {4, 3});
  expect_error([&] { run_op("broadcast_to", {&x}, {&b}); }, {"broadcast_to", "cannot broadcast [2,3] to [4,3]"});
  HostTensor s = random_f32({2, 2});
  expect_error([&] { run_op("slice", {&x}, {&s}, {{"axis", {1}}, {"start", {2}}, {"end", {4}}}); },
               {"slice", "slice [2:4] is out of range for axis 1 of [2,3]"});
  expect_error([&] { run_op("slice", {&x}, {&s}, {{"axis", {2}}, {"start", {0}}, {"end", {1}}}); }, {"axis 2 is out of range"});
  HostTensor c1 = random_f32({2, 1}), c2 = random_f32({3, 1}), cat = random_f32({2, 2});
  expect_error([&] { run_op("concat", {&c1, &c2}, {&cat}, {{"axis", {1}}}); }, {"concat", "operand 1 has shape [3,1]"});
  HostTensor cat3 = random_f32({2, 3});
  expect_error([&] { run_op("concat", {&c1, &c1}, {&cat3}, {{"axis", {1}}}); }, {"the parts sum to 2 along axis 1"});
  expect_error([&] { run_op("concat", {}, {&cat3}, {{"axis", {1}}}); }, {"needs at least one input"});
  HostTensor p1 = random_f32({2, 1}), p2 = random_f32({2, 1});
  expect_error([&] { run_op("split", {&x}, {&p1, &p2}, {{"axis", {1}}, {"sections", {2}}}); }, {"split", "sum to 2"});
  expect_error([&] { run_op("split", {&x}, {&p1, &p2}, {{"axis", {1}}, {"sections", {3}}}); }, {"sections is 3 but the instruction has 2 outputs"});
  expect_error([&] { run_op("fill", {}, {&x}); }, {"fill", "missing attribute 'value'"});
  expect_error([&] { run_op("fill", {&x}, {&x}, {}, {{"value", 1.0}}); }, {"expects 0 inputs"});
}

// The table holds exactly the ops of kernels/library_ops.def, each once, each with a CPU
// kernel; names outside it are unknown.
TEST(Library, TableIsTheDefFile) {
  const std::vector<std::string> def = {
#define MODELC_LIBRARY_OP(name, cpu, cuda) #name,
#include "kernels/library_ops.def"
  };
  std::vector<std::string> sorted = def;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(std::adjacent_find(sorted.begin(), sorted.end()), sorted.end()) << "an op is listed twice";
  EXPECT_EQ(kernels::library_op_names(), sorted);
  for (const std::string& op : def) EXPECT_NE(kernels::find_library_op(op), nullptr) << op;
  for (const std::string& op : def) EXPECT_EQ(kernels::find_library_op(op + "_"), nullptr) << op;
  EXPECT_EQ(kernels::find_library_op(""), nullptr);
}

// Every op's CPU kernel checks its operands before it touches them: called with none, it
// fails naming itself and the location, whatever the op.
TEST(Library, EveryOpRefusesAMissingOperand) {
  for (const std::string& op : kernels::library_op_names()) {
    std::string msg;
    try {
      run_op(op, {}, {});
    } catch (const RuntimeError& e) {
      msg = e.what();
    }
    EXPECT_EQ(msg.rfind(op + " at test.model:1:1: ", 0), 0u) << op << ": '" << msg << "'";
  }
}

}  // namespace modelc::rt::test
