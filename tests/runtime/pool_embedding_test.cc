// max_pool2d, avg_pool2d, their gradients, embedding and embedding_grad against double
// loops on random shapes and windows; ties in max windows (the first maximum wins);
// determinism of the scatter-adds across thread counts; every error.
#include <limits>

#include "tests/runtime/rt_harness.h"

namespace modelc::rt::test {

namespace {

struct Pool {
  int64_t N, C, H, W, kh, kw, sh, sw, ph, pw, HO, WO;
  Ints attrs() const { return {{"kernel", {kh, kw}}, {"stride", {sh, sw}}, {"padding", {ph, pw}}}; }
};

Pool random_pool() {
  for (;;) {
    Pool p{};
    p.N = rnd(1, 3), p.C = rnd(1, 3), p.H = rnd(1, 9), p.W = rnd(1, 9);
    p.kh = rnd(1, 4), p.kw = rnd(1, 4), p.sh = rnd(1, 3), p.sw = rnd(1, 3);
    p.ph = rnd(0, p.kh / 2), p.pw = rnd(0, p.kw / 2);
    int64_t nh = p.H + 2 * p.ph - p.kh, nw = p.W + 2 * p.pw - p.kw;
    if (nh < 0 || nw < 0) continue;
    p.HO = nh / p.sh + 1, p.WO = nw / p.sw + 1;
    return p;
  }
}

// Calls f(out_index, in_index) for every real (non-padding) element of every window, in
// row-major order within a window.
template <class F>
void each_window_elem(const Pool& p, F f) {
  for (int64_t q = 0; q < p.N * p.C; ++q)
    for (int64_t i = 0; i < p.HO; ++i)
      for (int64_t j = 0; j < p.WO; ++j)
        for (int64_t a = 0; a < p.kh; ++a)
          for (int64_t b = 0; b < p.kw; ++b) {
            int64_t h = i * p.sh - p.ph + a, v = j * p.sw - p.pw + b;
            if (h >= 0 && h < p.H && v >= 0 && v < p.W) f((q * p.HO + i) * p.WO + j, (q * p.H + h) * p.W + v);
          }
}

}  // namespace

TEST(Pool2d, RandomWindowsAndGradients) {
  for (int rep = 0; rep < 60; ++rep) {
    Pool p = random_pool();
    HostTensor x = random_f32({p.N, p.C, p.H, p.W});
    // Coarse values make ties frequent, so "first maximum" is exercised.
    if (rep % 2) for (int64_t i = 0; i < x.numel(); ++i) x.f32()[i] = static_cast<float>(rnd(0, 2));
    HostTensor g = random_f32({p.N, p.C, p.HO, p.WO});
    size_t no = static_cast<size_t>(g.numel()), ni = static_cast<size_t>(x.numel());
    std::vector<double> mx(no, -std::numeric_limits<double>::infinity()), avg(no, 0), dmax(ni, 0), davg(ni, 0);
    std::vector<int64_t> arg(no, -1);
    each_window_elem(p, [&](int64_t o, int64_t i) {
      double v = x.f32()[i];
      if (arg[static_cast<size_t>(o)] < 0 || v > mx[static_cast<size_t>(o)]) mx[static_cast<size_t>(o)] = v, arg[static_cast<size_t>(o)] = i;
      avg[static_cast<size_t>(o)] += v / static_cast<double>(p.kh * p.kw);
      davg[static_cast<size_t>(i)] += g.f32()[o] / static_cast<double>(p.kh * p.kw);
    });
    for (size_t o = 0; o < no; ++o) dmax[static_cast<size_t>(arg[o])] += g.f32()[o];
    std::string what = x.shape_str() + " " + std::to_string(p.kh) + "x" + std::to_string(p.kw) + " stride " +
                       std::to_string(p.sh) + "x" + std::to_string(p.sw) + " pad " + std::to_string(p.ph) + "x" + std::to_string(p.pw);
    HostTensor y = filled_f32(g.shape, NAN), ya = y, dx = filled_f32(x.shape, NAN), dxa = dx;
    run_op("max_pool2d", {&x}, {&y}, p.attrs());
    expect_close(y, mx, 0, 0, nullptr, "max_pool2d " + what);
    run_op("avg_pool2d", {&x}, {&ya}, p.attrs());
    expect_close(ya, avg, 1e-6, 1e-6, nullptr, "avg_pool2d " + what);
    run_op("max_pool2d_grad", {&x, &g}, {&dx}, p.attrs());
    expect_close(dx, dmax, 1e-6, 1e-6, nullptr, "max_pool2d_grad " + what);
    Ints ga = p.attrs();
    ga["input_shape"] = x.shape;
    run_op("avg_pool2d_grad", {&g}, {&dxa}, ga);
    expect_close(dxa, davg, 1e-5, 1e-6, nullptr, "avg_pool2d_grad " + what);
  }
}

TEST(Pool2d, StrideDefaultsToKernelAndOneEntryMeansBoth) {
  HostTensor x = random_f32({1, 2, 6, 6}), y = filled_f32({1, 2, 3, 3}, NAN);
  run_op("max_pool2d", {&x}, {&y}, {{"kernel", {2}}});
  for (int64_t q = 0; q < 2; ++q)
    for (int64_t i = 0; i < 3; ++i)
      for (int64_t j = 0; j < 3; ++j) {
        const float* xp = x.f32() + q * 36;
        float m = std::max(std::max(xp[2 * i * 6 + 2 * j], xp[2 * i * 6 + 2 * j + 1]),
                           std::max(xp[(2 * i + 1) * 6 + 2 * j], xp[(2 * i + 1) * 6 + 2 * j + 1]));
        EXPECT_EQ(y.f32()[(q * 3 + i) * 3 + j], m);
      }
}

TEST(Pool2d, Errors) {
  HostTensor x = random_f32({1, 1, 4, 4}), y = random_f32({1, 1, 2, 2}), bad = random_f32({1, 1, 3, 2});
  expect_error([&] { run_op("max_pool2d", {&x}, {&bad}, {{"kernel", {2}}}); },
               {"max_pool2d", "test.model:1:1", "pooled tensor has shape [1,1,3,2]", "expected [1,1,2,2]"});
  expect_error([&] { run_op("max_pool2d", {&x}, {&y}, {}); }, {"kernel must be positive"});
  expect_error([&] { run_op("avg_pool2d", {&x}, {&y}, {{"kernel", {2}}, {"padding", {2}}}); }, {"at most half the kernel"});
  expect_error([&] { run_op("avg_pool2d", {&x}, {&y}, {{"kernel", {2}}, {"stride", {0}}}); }, {"stride must be positive"});
  HostTensor dx = random_f32({1, 1, 4, 4});
  expect_error([&] { run_op("avg_pool2d_grad", {&y}, {&dx}, {{"kernel", {2}}, {"input_shape", {1, 1, 4, 5}}}); },
               {"avg_pool2d_grad", "input_shape [1,1,4,5] disagrees"});
  HostTensor dx_bad = random_f32({1, 1, 4, 5});
  expect_error([&] { run_op("max_pool2d_grad", {&x, &y}, {&dx_bad}, {{"kernel", {2}}}); }, {"expected the input's [1,1,4,4]"});
  HostTensor xi(ElemType::I32, {1, 1, 4, 4});
  expect_error([&] { run_op("max_pool2d", {&xi}, {&y}, {{"kernel", {2}}}); }, {"image must be f32"});
}

TEST(Embedding, GatherAndScatterAdd) {
  for (int rep = 0; rep < 30; ++rep) {
    int64_t rows = rnd(1, 20), width = rnd(1, 70);
    std::vector<int64_t> ishape = random_shape(rnd(0, 3), 1, 6);
    HostTensor ids(ElemType::I32, ishape), table = random_f32({rows, width});
    for (int64_t i = 0; i < ids.numel(); ++i) ids.i32()[i] = static_cast<int32_t>(rnd(0, rows - 1));
    std::vector<int64_t> oshape = ishape;
    oshape.push_back(width);
    HostTensor out = filled_f32(oshape, NAN), g = random_f32(oshape);
    std::vector<double> ref(static_cast<size_t>(out.numel())), dref(static_cast<size_t>(rows * width), 0);
    // An f32 sum of n terms is within (n - 1) * 2^-24 * sum |term| of the exact sum (Higham):
    // the scale each gradient element is compared at.
    std::vector<double> abs_sum(dref.size(), 0), terms(dref.size(), 0);
    for (int64_t i = 0; i < ids.numel(); ++i)
      for (int64_t k = 0; k < width; ++k) {
        const size_t at = static_cast<size_t>(ids.i32()[i] * width + k);
        ref[static_cast<size_t>(i * width + k)] = table.f32()[ids.i32()[i] * width + k];
        dref[at] += g.f32()[i * width + k];
        abs_sum[at] += std::abs(g.f32()[i * width + k]);
        terms[at] += 1;
      }
    std::vector<double> bound(dref.size());
    for (size_t k = 0; k < dref.size(); ++k) bound[k] = std::max(1.0, terms[k]) * abs_sum[k] + std::abs(dref[k]);
    run_op("embedding", {&ids, &table}, {&out});
    expect_close(out, ref, 0, 0, nullptr, "embedding");
    // The scatter-add is bitwise the same whatever the thread count.
    HostTensor d1 = filled_f32({rows, width}, NAN), d4 = d1;
    ThreadPool p1(1), p4(4);
    run_op("embedding_grad", {&ids, &g}, {&d1}, {{"rows", {rows}}}, {}, &p1);
    run_op("embedding_grad", {&ids, &g}, {&d4}, {{"rows", {rows}}}, {}, &p4);
    expect_close(d1, dref, 0x1p-24, 0, &bound, "embedding_grad");
    EXPECT_EQ(d1.bytes, d4.bytes) << "embedding_grad depends on the thread count";
  }
}

TEST(Embedding, Errors) {
  HostTensor ids(ElemType::I32, {2, 3}), table = random_f32({5, 4}), out = random_f32({2, 3, 4});
  ids.i32()[4] = 7;
  expect_error([&] { run_op("embedding", {&ids, &table}, {&out}); },
               {"embedding", "test.model:1:1", "id 7 at position 4", "table of 5 rows"});
  ids.i32()[4] = -1;
  expect_error([&] { run_op("embedding", {&ids, &table}, {&out}); }, {"id -1"});
  ids.i32()[4] = 0;
  HostTensor fids = random_f32({2, 3});
  expect_error([&] { run_op("embedding", {&fids, &table}, {&out}); }, {"ids must be i32"});
  HostTensor bad = random_f32({2, 4});
  expect_error([&] { run_op("embedding", {&ids, &table}, {&bad}); }, {"expected f32[2,3,4]"});
  HostTensor d = random_f32({5, 4});
  expect_error([&] { run_op("embedding_grad", {&ids, &out}, {&d}, {{"rows", {6}}}); }, {"rows is 6"});
  HostTensor g_bad = random_f32({2, 3, 5});
  expect_error([&] { run_op("embedding_grad", {&ids, &g_bad}, {&d}); }, {"gradient has shape [2,3,5]", "expected [2,3,4]"});
  ids.i32()[0] = 5;
  expect_error([&] { run_op("embedding_grad", {&ids, &out}, {&d}); }, {"embedding_grad", "id 5 at position 0"});
}

}  // namespace modelc::rt::test
