// The CPU executor on several streams (runtime/execution/cpu/streams.h): random DAGs on 2-4 streams
// compute bit-identically to the sequential run; events order work across streams; arena
// reuse between buffers on different streams gets the waits it needs; an exception on any
// stream reaches the caller after every stream stopped, and the executor runs again.
#include "tests/streams/streams_harness.h"

#include <fmt/format.h>

#include "runtime/execution/memory_plan.h"
#include "runtime/execution/streams.h"

namespace modelc::rt::test {
namespace {

RunResult run(const Program& p, const Function& fn, int threads, ExecutorOptions o, const HostTensor& x,
              const std::vector<HostTensor>& params0, const std::vector<uint32_t>& param_ids, int runs = 2) {
  ThreadPool pool(threads);
  std::vector<HostTensor> store(p.buffers.size());
  for (size_t k = 0; k < param_ids.size(); ++k) store[param_ids[k]] = params0[k];
  Executor ex(p, fn, pool, store, o);
  RunResult r;
  const HostTensor* feeds[] = {&x};
  for (int i = 0; i < runs; ++i) r.outputs = ex.run(feeds, {});
  for (uint32_t id : param_ids) r.params.push_back(store[id]);
  return r;
}

void expect_same(const RunResult& a, const RunResult& b, const std::string& what) {
  ASSERT_EQ(a.outputs.size(), b.outputs.size()) << what;
  for (const auto& [name, t] : a.outputs) EXPECT_TRUE(same_bytes(t, b.outputs.at(name))) << what << ": output " << name;
  for (size_t k = 0; k < a.params.size(); ++k) EXPECT_TRUE(same_bytes(a.params[k], b.params[k])) << what << ": param " << k;
}

TEST(Streams, RandomDagsMatchTheSequentialRunBitForBit) {
  int hazards = 0;
  for (int trial = 0; trial < 10; ++trial) {
    RandomDag d = random_dag(static_cast<int>(rnd(6, 40)));
    const int64_t n = rnd(64, 4000);
    const auto streams = static_cast<uint32_t>(rnd(2, 4));
    const int threads = static_cast<int>(rnd(1, 3));
    HostTensor x = random_f32({n});
    std::vector<HostTensor> params;
    for (size_t k = 0; k < d.params.size(); ++k) params.push_back(random_f32({n}));
    const Function sequential = d.b.p.functions[0];
    Function& f = d.b.p.functions[0];
    random_schedule(f, d.b.p.buffers.size(), streams);
    const std::string what = fmt::format("trial {}: {} instructions, N = {}, {} streams, {} events, {} threads", trial,
                                         f.instrs.size(), n, streams, f.events, threads);
    RunResult ref = run(d.b.p, sequential, threads, {}, x, params, d.params);
    ExecutorOptions in_order;
    in_order.streams = false;
    expect_same(ref, run(d.b.p, f, threads, in_order, x, params, d.params), what + " (in list order)");
    expect_same(ref, run(d.b.p, f, threads, {}, x, params, d.params), what + " (streams, arena)");
    ExecutorOptions no_arena;
    no_arena.arena = false;
    expect_same(ref, run(d.b.p, f, threads, no_arena, x, params, d.params), what + " (streams, no arena)");
    ThreadPool pool(threads);
    std::vector<HostTensor> store(d.b.p.buffers.size());
    for (size_t k = 0; k < d.params.size(); ++k) store[d.params[k]] = params[k];
    Executor ex(d.b.p, f, pool, store);
    const HostTensor* feeds[] = {&x};
    ex.run(feeds, {});
    hazards += static_cast<int>(ex.arena_hazards().size());
  }
  // Random DAGs reuse arena bytes across streams often; the waits above were exercised.
  EXPECT_GT(hazards, 0);
}

// Records when kernels start and finish: sizes[1] is the instruction's tag.
std::atomic<int> g_clock{0};
std::atomic<int> g_start[8], g_end[8];

// out[j] = in[j] + 1, after sleeping sizes[2] ms (once per call, at its first chunk).
void k_slow(void* const* b, const int64_t* s, int64_t begin, int64_t end) {
  const int64_t tag = s[1];
  if (begin == 0) {
    g_start[tag] = g_clock.fetch_add(1);
    std::this_thread::sleep_for(std::chrono::milliseconds(s[2]));
  }
  auto* x = static_cast<const float*>(b[0]);
  auto* out = static_cast<float*>(b[1]);
  for (int64_t j = begin; j < end; ++j) out[j] = x[(j + 1) % s[0]] + 1.0f;
  if (end == s[0]) g_end[tag] = g_clock.fetch_add(1);
}

TEST(Streams, AnEventOrdersAWaiterAfterItsRecorder) {
  ProgramBuilder b;
  const uint32_t x = b.buffer("x", BufferRole::Input, {b.dim(256)});
  const uint32_t t = b.buffer("t", BufferRole::Temp, {b.dim(256)});
  const uint32_t y = b.buffer("y", BufferRole::Output, {b.dim(256)});
  const uint32_t k = b.kernel("slow", k_slow);
  Function& f = b.function("f");
  f.feeds.push_back({"x", 0, x});
  f.instrs.push_back(ProgramBuilder::kernel_call(k, {x}, {t}, {b.dim(256), b.dim(0), b.dim(30)}, b.dim(256), 256));
  f.instrs.push_back(ProgramBuilder::kernel_call(k, {t}, {y}, {b.dim(256), b.dim(1), b.dim(0)}, b.dim(256), 256));
  f.outputs = {{"y", y}};
  f.streams = 2;
  f.events = 1;
  f.instrs[0].stream = 1;
  f.instrs[0].records = {0};
  f.instrs[1].waits = {0};
  HostTensor in = random_f32({256});
  ThreadPool pool(2);
  std::vector<HostTensor> store(b.p.buffers.size());
  Executor ex(b.p, f, pool, store);
  const HostTensor* feeds[] = {&in};
  for (int r = 0; r < 3; ++r) {
    auto out = ex.run(feeds, {});
    EXPECT_GT(g_start[1].load(), g_end[0].load()) << "the waiter started before its recorder finished";
    for (int64_t j = 0; j < 256; ++j) EXPECT_EQ(out.at("y").f32()[j], in.f32()[(j + 2) % 256] + 2.0f) << j;
  }
  // Without the event the two instructions race on t: the executor refuses the schedule.
  f.instrs[1].waits.clear();
  try {
    Executor bad(b.p, f, pool, store);
    FAIL() << "a racy schedule was accepted";
  } catch (const RuntimeError& e) {
    EXPECT_EQ(std::string(e.what()),
              "function 'f': instructions 0 and 1 are not ordered, but the first writes what the second reads, buffer "
              "1 ('t'): one may run while the other does");
  }
}

// Two buffers that share arena bytes in turn, on different streams, with no dependency
// between them: a = slow(x); y0 = slow(a) on stream 0, b = slow(x); y1 = slow(b) on stream
// 1. Without a wait, b's writer would overwrite a while y0's kernel still reads it.
TEST(Streams, ArenaReuseAcrossStreamsWaits) {
  ProgramBuilder b;
  const int64_t n = rnd(300, 3000);
  const uint32_t x = b.buffer("x", BufferRole::Input, {b.dim("N")});
  const uint32_t ta = b.buffer("a", BufferRole::Temp, {b.dim("N")});
  const uint32_t y0 = b.buffer("y0", BufferRole::Output, {b.dim("N")});
  const uint32_t tb = b.buffer("b", BufferRole::Temp, {b.dim("N")});
  const uint32_t y1 = b.buffer("y1", BufferRole::Output, {b.dim("N")});
  const uint32_t k = b.kernel("slow", k_slow);
  Function& f = b.function("f");
  f.feeds.push_back({"x", 0, x});
  auto call = [&](uint32_t in, uint32_t out, int tag, int ms) {
    return ProgramBuilder::kernel_call(k, {in}, {out}, {b.dim("N"), b.dim(tag), b.dim(ms)}, b.dim("N"), 64);
  };
  f.instrs = {call(x, ta, 0, 0), call(ta, y0, 1, 20), call(x, tb, 2, 0), call(tb, y1, 3, 0)};
  f.instrs[2].stream = f.instrs[3].stream = 1;
  f.streams = 2;
  f.outputs = {{"y0", y0}, {"y1", y1}};

  const std::vector<int64_t> syms{n};
  ArenaPlan plan = plan_function_memory(b.p, f, syms);
  ASSERT_EQ(plan.offset[ta], plan.offset[tb]) << "the case needs a and b to share bytes";
  StreamOrder order(f);
  EXPECT_FALSE(order.before(1, 2)) << "the schedule alone does not order them: the hazard is real";
  using Pairs = std::vector<std::pair<uint32_t, uint32_t>>;
  EXPECT_EQ(arena_hazards(f, plan, order), (Pairs{{1, 2}}));  // the last reader of a, not its writer too

  HostTensor in = random_f32({n});
  ThreadPool pool(2);
  std::vector<HostTensor> store(b.p.buffers.size());
  Executor ex(b.p, f, pool, store);
  const HostTensor* feeds[] = {&in};
  for (int r = 0; r < 3; ++r) {
    auto out = ex.run(feeds, {});
    EXPECT_EQ(ex.arena_hazards(), (Pairs{{1, 2}}));
    EXPECT_GT(g_start[2].load(), g_end[1].load()) << "b was written while a was still read";
    for (int64_t j = 0; j < n; ++j) {
      ASSERT_EQ(out.at("y0").f32()[j], in.f32()[(j + 2) % n] + 2.0f) << j;
      ASSERT_EQ(out.at("y1").f32()[j], in.f32()[(j + 2) % n] + 2.0f) << j;
    }
  }
  // An event that already orders them: no extra wait.
  f.events = 1;
  f.instrs[1].records = {0};
  f.instrs[2].waits = {0};
  EXPECT_TRUE(arena_hazards(f, plan, StreamOrder(f)).empty());
  // Without an arena nothing is shared: no waits.
  ExecutorOptions o;
  o.arena = false;
  Executor separate(b.p, f, pool, store, o);
  separate.run(feeds, {});
  EXPECT_TRUE(separate.arena_hazards().empty());
}

std::atomic<bool> g_fail{false};

// out[j] = in[j] * 2 + sizes[0]
void k_double(void* const* b, const int64_t* s, int64_t begin, int64_t end) {
  auto* x = static_cast<const float*>(b[0]);
  auto* out = static_cast<float*>(b[1]);
  for (int64_t j = begin; j < end; ++j) out[j] = x[j] * 2.0f + static_cast<float>(s[0]);
}

// k_double, but throws while g_fail is set.
void k_fail(void* const* b, const int64_t* s, int64_t begin, int64_t end) {
  if (g_fail) throw RuntimeError("injected failure");
  k_double(b, s, begin, end);
}

TEST(Streams, AnExceptionOnAnyStreamReachesTheCallerAndTheExecutorRunsAgain) {
  // A chain of 6 instructions alternating between 3 streams (each waits for the previous
  // one's event): a failure anywhere leaves later waiters with an event that never comes.
  for (uint32_t failing : {0u, 1u, 4u}) {
    ProgramBuilder b;
    const uint32_t x = b.buffer("x", BufferRole::Input, {b.dim(100)});
    const uint32_t ok = b.kernel("ok", k_double), bad = b.kernel("bad", k_fail);
    Function& f = b.function("f");
    f.feeds.push_back({"x", 0, x});
    f.streams = 3;
    uint32_t prev = x;
    for (uint32_t i = 0; i < 6; ++i) {
      const uint32_t out = b.buffer("t" + std::to_string(i), i == 5 ? BufferRole::Output : BufferRole::Temp, {b.dim(100)});
      Instr in = ProgramBuilder::kernel_call(i == failing ? bad : ok, {prev}, {out}, {b.dim(i)}, b.dim(100), 10);
      in.stream = i % 3;
      if (i > 0) in.waits = {i - 1};
      if (i < 5) in.records = {i};
      f.instrs.push_back(in);
      prev = out;
    }
    f.events = 5;
    f.outputs = {{"y", prev}};
    HostTensor in = random_f32({100});
    ThreadPool pool(2);
    std::vector<HostTensor> store(b.p.buffers.size());
    Executor ex(b.p, f, pool, store);
    const HostTensor* feeds[] = {&in};
    g_fail = true;
    try {
      ex.run(feeds, {});
      ADD_FAILURE() << "no exception";
    } catch (const RuntimeError& e) {
      EXPECT_EQ(std::string(e.what()), "function 'f': injected failure");
    }
    g_fail = false;
    auto out = ex.run(feeds, {});
    for (int64_t j = 0; j < 100; ++j) {
      float v = in.f32()[j];
      for (int i = 0; i < 6; ++i) v = v * 2.0f + static_cast<float>(i);
      ASSERT_EQ(out.at("y").f32()[j], v) << j;
    }
  }
}

}  // namespace
}  // namespace modelc::rt::test
