// The executor on hand-built Programs: host kernels (C++ functions with the HostCodeletFn
// ABI) chunked over their extent exactly once at several thread counts, library calls,
// symbol binding from fed shapes and its errors, buffer reuse, updates, outputs.
#include "runtime/execution/cpu/executor.h"

#include "tests/runtime/program_builder.h"
#include "tests/runtime/rt_harness.h"

namespace modelc::rt::test {

namespace {

// out[i] += 1 for i in [begin, end): run over a zeroed buffer, every element must be 1.
void k_count(void* const* b, const int64_t*, int64_t begin, int64_t end) {
  auto* out = static_cast<float*>(b[0]);
  for (int64_t i = begin; i < end; ++i) out[i] += 1.0f;
}

// out[i] = in[i] * sizes[0] + sizes[1]
void k_affine(void* const* b, const int64_t* s, int64_t begin, int64_t end) {
  auto* in = static_cast<const float*>(b[0]);
  auto* out = static_cast<float*>(b[1]);
  for (int64_t i = begin; i < end; ++i) out[i] = in[i] * static_cast<float>(s[0]) + static_cast<float>(s[1]);
}

// out = [sizes...] as floats (extent 1): shows the evaluated size table.
void k_sizes(void* const* b, const int64_t* s, int64_t begin, int64_t end) {
  auto* out = static_cast<float*>(b[0]);
  for (int64_t i = begin; i < end; ++i) out[i] = static_cast<float>(s[i]);
}

// A program: x f32[B,4] @ w f32[4,3] -> h [B,3]; y = h * 2 + 1 (kernel); count [3*B]
// ones; w_new = w * 1 + 1 updates w; `sz` gets the size table (B, 3B + 2, $step, $seed).
struct Fixture {
  ProgramBuilder b;
  uint32_t x, w, h, y, cnt, wn, sz;
  Fixture() {
    x = b.buffer("x", BufferRole::Input, {b.dim("B"), b.dim(4)});
    w = b.buffer("w", BufferRole::Param, {b.dim(4), b.dim(3)});
    h = b.buffer("h", BufferRole::Temp, {b.dim("B"), b.dim(3)});
    y = b.buffer("y", BufferRole::Output, {b.dim("B"), b.dim(3)});
    cnt = b.buffer("count", BufferRole::Output, {b.scaled(3, "B")});
    wn = b.buffer("w_new", BufferRole::Temp, {b.dim(4), b.dim(3)});
    sz = b.buffer("sizes", BufferRole::Output, {b.dim(4)});
    uint32_t kc = b.kernel("k_count", k_count), ka = b.kernel("k_affine", k_affine), ks = b.kernel("k_sizes", k_sizes);
    SizeExpr threeB2 = b.scaled(3, "B");
    threeB2.terms.push_back({2, {}});
    Function& f = b.function("train_step");
    f.feeds.push_back({"x", 0, x});
    f.instrs.push_back(ProgramBuilder::library("matmul", {x, w}, {h}));
    f.instrs.push_back(ProgramBuilder::kernel_call(ka, {h}, {y}, {b.dim(2), b.dim(1)}, b.scaled(3, "B"), 2));
    f.instrs.push_back(ProgramBuilder::library("fill", {}, {cnt}, {}, {{"value", 0.0}}));
    f.instrs.push_back(ProgramBuilder::kernel_call(kc, {}, {cnt}, {}, b.scaled(3, "B"), 3));
    f.instrs.push_back(ProgramBuilder::kernel_call(ka, {w}, {wn}, {b.dim(1), b.dim(1)}, b.dim(12), 5));
    f.instrs.push_back(ProgramBuilder::kernel_call(ks, {}, {sz}, {b.dim("B"), threeB2, b.dim("$step"), b.dim("$seed")}, b.dim(4)));
    f.outputs = {{"y", y}, {"count", cnt}, {"sizes", sz}};
    f.updates = {{wn, w}};
  }
  std::vector<HostTensor> persistent() {
    std::vector<HostTensor> p(b.p.buffers.size());
    p[w] = random_f32({4, 3});
    return p;
  }
};

}  // namespace

TEST(Executor, RunsKernelsLibraryOpsAndUpdates) {
  for (int threads : {1, 2, 3, 7}) {
    Fixture fx;
    ThreadPool pool(threads);
    auto store = fx.persistent();
    HostTensor w0 = store[fx.w];
    Executor ex(fx.b.p, fx.b.p.functions[0], pool, store);
    for (int64_t B : {rnd(1, 40), rnd(41, 300)}) {
      HostTensor x = random_f32({B, 4});
      HostTensor w_before = store[fx.w];
      const HostTensor* feeds[] = {&x};
      auto out = ex.run(feeds, {{"$step", 5}, {"$seed", 9}});
      ASSERT_EQ(out.at("y").shape, (std::vector<int64_t>{B, 3}));
      std::vector<double> ref(static_cast<size_t>(B * 3)), scale(ref.size());
      for (int64_t i = 0; i < B; ++i)
        for (int64_t j = 0; j < 3; ++j) {
          double acc = 0, s = 0;
          for (int64_t k = 0; k < 4; ++k) {
            double p = static_cast<double>(x.f32()[i * 4 + k]) * w_before.f32()[k * 3 + j];
            acc += p, s += std::abs(p);
          }
          ref[static_cast<size_t>(i * 3 + j)] = acc * 2 + 1, scale[static_cast<size_t>(i * 3 + j)] = 2 * s + 1;
        }
      expect_close(out.at("y"), ref, 1e-5, 1e-6, &scale, "y");
      // Every work item of the extent ran exactly once.
      for (int64_t i = 0; i < 3 * B; ++i) ASSERT_EQ(out.at("count").f32()[i], 1.0f) << "item " << i << " threads " << threads;
      const float* s = out.at("sizes").f32();
      EXPECT_EQ(s[0], static_cast<float>(B));
      EXPECT_EQ(s[1], static_cast<float>(3 * B + 2));
      EXPECT_EQ(s[2], 5.0f);
      EXPECT_EQ(s[3], 9.0f);
      // The update: w <- w + 1.
      for (int k = 0; k < 12; ++k) EXPECT_EQ(store[fx.w].f32()[k], w_before.f32()[k] + 1.0f);
    }
    EXPECT_EQ(ex.layouts(), 2);
  }
}

TEST(Executor, KeepsTheLayoutWhileSymbolsDoNotChange) {
  Fixture fx;
  ThreadPool pool(2);
  auto store = fx.persistent();
  Executor ex(fx.b.p, fx.b.p.functions[0], pool, store);
  HostTensor x = random_f32({8, 4}), x2 = random_f32({9, 4});
  const HostTensor* f1[] = {&x};
  const HostTensor* f2[] = {&x2};
  ex.run(f1, {{"$step", 0}, {"$seed", 1}});
  ex.run(f1, {{"$step", 0}, {"$seed", 1}});
  EXPECT_EQ(ex.layouts(), 1);
  ex.run(f2, {{"$step", 0}, {"$seed", 1}});
  EXPECT_EQ(ex.layouts(), 2);
  EXPECT_EQ(ex.symbol_values()[*fx.b.p.symbol_id("B")], 9);
  ex.run(f2, {{"$step", 1}, {"$seed", 1}});  // $step is a symbol too: a new size table
  EXPECT_EQ(ex.layouts(), 3);
}

TEST(Executor, AnEmptyBatchRuns) {
  Fixture fx;
  ThreadPool pool(2);
  auto store = fx.persistent();
  HostTensor w0 = store[fx.w];
  Executor ex(fx.b.p, fx.b.p.functions[0], pool, store);
  HostTensor x(ElemType::F32, {0, 4});
  const HostTensor* feeds[] = {&x};
  auto out = ex.run(feeds, {{"$step", 0}, {"$seed", 0}});
  EXPECT_EQ(out.at("y").shape, (std::vector<int64_t>{0, 3}));
  EXPECT_EQ(out.at("count").numel(), 0);
  EXPECT_EQ(store[fx.w].f32()[0], w0.f32()[0] + 1.0f);  // the update still ran
}

TEST(Executor, BindingErrors) {
  Fixture fx;
  ThreadPool pool(2);
  auto store = fx.persistent();
  Executor ex(fx.b.p, fx.b.p.functions[0], pool, store);
  std::map<std::string, int64_t> syms{{"$step", 0}, {"$seed", 1}};
  HostTensor bad = random_f32({64, 5});
  const HostTensor* f_bad[] = {&bad};
  expect_error([&] { ex.run(f_bad, syms); },
               {"function 'train_step'", "input 'x' has shape [64,5], expected [B,4] (B = 64)"});
  HostTensor r3 = random_f32({2, 4, 1});
  const HostTensor* f_r3[] = {&r3};
  expect_error([&] { ex.run(f_r3, syms); }, {"input 'x' has shape [2,4,1], expected [B,4] (B = unbound)"});
  HostTensor xi(ElemType::I32, {3, 4});
  const HostTensor* f_i[] = {&xi};
  expect_error([&] { ex.run(f_i, syms); }, {"input 'x' has type i32, expected f32"});
  const HostTensor* f_null[] = {nullptr};
  expect_error([&] { ex.run(f_null, syms); }, {"missing input 'x'"});
  expect_error([&] { ex.run({}, syms); }, {"expected 1 feeds, got 0"});
  HostTensor x = random_f32({3, 4});
  const HostTensor* f_ok[] = {&x};
  expect_error([&] { ex.run(f_ok, {{"$seed", 1}}); }, {"kernel 'k_sizes' at t.model:3:5 depends on symbol '$step'"});
  HostTensor truncated = random_f32({3, 4});
  truncated.bytes.resize(8);
  const HostTensor* f_tr[] = {&truncated};
  expect_error([&] { ex.run(f_tr, syms); }, {"holds 8 bytes"});
}

TEST(Executor, TwoInputsMustAgreeAndOtherDimsEvaluate) {
  ProgramBuilder b;
  uint32_t x = b.buffer("images", BufferRole::Input, {b.dim("B"), b.dim(784)});
  uint32_t l = b.buffer("labels", BufferRole::Input, {b.dim("B")}, ElemType::I32);
  uint32_t d = b.buffer("doubled", BufferRole::Input, {b.scaled(2, "B")});
  uint32_t o = b.buffer("out", BufferRole::Output, {b.dim("B"), b.dim(784)});
  Function& f = b.function("eval");
  f.feeds = {{"images", 0, x}, {"labels", 0, l}, {"doubled", 0, d}};
  f.instrs.push_back(ProgramBuilder::library("copy", {x}, {o}));
  f.outputs = {{"out", o}};
  ThreadPool pool(1);
  std::vector<HostTensor> store(b.p.buffers.size());
  Executor ex(b.p, b.p.functions[0], pool, store);
  HostTensor img = random_f32({64, 784}), lab(ElemType::I32, {64}), dbl = random_f32({128});
  const HostTensor* ok[] = {&img, &lab, &dbl};
  auto out = ex.run(ok, {});
  EXPECT_EQ(out.at("out").bytes, img.bytes);
  HostTensor lab2(ElemType::I32, {63}), dbl2 = random_f32({127});
  const HostTensor* f1[] = {&img, &lab2, &dbl};
  expect_error([&] { ex.run(f1, {}); }, {"function 'eval'", "input 'labels' has shape [63], expected [B] (B = 64)"});
  const HostTensor* f2[] = {&img, &lab, &dbl2};
  expect_error([&] { ex.run(f2, {}); }, {"input 'doubled' has shape [127], expected [2*B] (B = 64)"});
  HostTensor img2 = random_f32({64, 783});
  const HostTensor* f3[] = {&img2, &lab, &dbl};
  expect_error([&] { ex.run(f3, {}); }, {"input 'images' has shape [64,783], expected [B,784] (B = 64)"});
}

TEST(Executor, ConstructionErrors) {
  auto make = [](auto edit) {
    Fixture fx;
    edit(fx);
    ThreadPool pool(1);
    auto store = fx.persistent();
    Executor ex(fx.b.p, fx.b.p.functions[0], pool, store);
  };
  expect_error([&] { make([](Fixture& fx) { fx.b.p.functions[0].instrs[0].op = "matmull"; }); },
               {"function 'train_step'", "unknown library op 'matmull' at t.model:7:9"});
  expect_error([&] { make([](Fixture& fx) { fx.b.p.codelets[0].host = nullptr; }); }, {"kernel 'k_count'", "has no host code"});
  expect_error([&] { make([](Fixture& fx) { fx.b.p.functions[0].instrs[1].codelet = 99; }); }, {"names kernel 99"});
  expect_error([&] { make([](Fixture& fx) { fx.b.p.functions[0].instrs[1].outputs = {1000}; }); }, {"names buffer 1000"});
  expect_error([&] { make([](Fixture& fx) { fx.b.p.functions[0].feeds.clear(); }); }, {"input buffer 'x' is used but never fed"});
  expect_error([&] { make([](Fixture& fx) { fx.b.p.functions[0].updates = {{fx.wn, fx.h}}; }); },
               {"update writes buffer 'h'", "neither a parameter nor optimizer state"});
  expect_error([&] {
    Fixture fx;
    ThreadPool pool(1);
    std::vector<HostTensor> store(fx.b.p.buffers.size());  // no storage for w
    Executor ex(fx.b.p, fx.b.p.functions[0], pool, store);
  }, {"parameter 'w' has no storage"});
}

TEST(Executor, LibraryErrorsNameTheFunctionAndLocation) {
  ProgramBuilder b;
  uint32_t ids = b.buffer("ids", BufferRole::Input, {b.dim("B")}, ElemType::I32);
  uint32_t table = b.buffer("table", BufferRole::Param, {b.dim(5), b.dim(2)});
  uint32_t o = b.buffer("out", BufferRole::Output, {b.dim("B"), b.dim(2)});
  Function& f = b.function("eval");
  f.feeds = {{"ids", 0, ids}};
  f.instrs.push_back(ProgramBuilder::library("embedding", {ids, table}, {o}, {}, {}, "m.model:4:7"));
  f.outputs = {{"out", o}};
  ThreadPool pool(2);
  std::vector<HostTensor> store(b.p.buffers.size());
  store[table] = random_f32({5, 2});
  Executor ex(b.p, b.p.functions[0], pool, store);
  HostTensor in(ElemType::I32, {3});
  in.i32()[1] = 5;
  const HostTensor* feeds[] = {&in};
  expect_error([&] { ex.run(feeds, {}); }, {"function 'eval'", "embedding at m.model:4:7", "id 5 at position 1"});
}

}  // namespace modelc::rt::test
