// The streams format (runtime/base/program.h, runtime/execution/streams.h): every structural error, the
// happens-before relation, the .plan encoding of a schedule (and plans without one), and
// the thread pool under concurrent callers.
#include "tests/streams/streams_harness.h"

#include "runtime/session/plan.h"
#include "runtime/session/plan_codec.h"
#include "runtime/execution/streams.h"

namespace modelc::rt::test {
namespace {

// A chain x -> t0 -> t1 -> t2 (output) of k_unary, all on stream 0.
RandomDag chain() {
  RandomDag d;
  ProgramBuilder& b = d.b;
  d.x = b.buffer("x", BufferRole::Input, {b.dim(32)});
  const uint32_t k = b.kernel("unary", k_unary);
  Function& f = b.function("f");
  f.feeds.push_back({"x", 0, d.x});
  uint32_t prev = d.x;
  for (int i = 0; i < 3; ++i) {
    uint32_t t = b.buffer("t" + std::to_string(i), i == 2 ? BufferRole::Output : BufferRole::Temp, {b.dim(32)});
    f.instrs.push_back(ProgramBuilder::kernel_call(k, {prev}, {t}, {b.dim(32)}, b.dim(32)));
    prev = t;
  }
  f.outputs = {{"y", prev}};
  return d;
}

// Instruction i on stream i % 2 waiting for the previous one's event: a valid schedule.
void alternate(Function& f) {
  f.streams = 2;
  f.events = 2;
  for (uint32_t i = 0; i < 3; ++i) {
    f.instrs[i].stream = i % 2;
    if (i > 0) f.instrs[i].waits = {i - 1};
    if (i < 2) f.instrs[i].records = {i};
  }
}

TEST(StreamFormat, StructureErrors) {
  struct Case {
    std::function<void(Function&)> damage;
    std::string message;
  };
  const Case cases[] = {
      {[](Function& f) { f.streams = 0; }, "the function has 0 streams"},
      {[](Function& f) { f.instrs[2].stream = 2; }, "instruction 2 runs on stream 2, but the function has 2 streams"},
      {[](Function& f) { f.instrs[1].records = {5}; }, "instruction 1 records event 5, but the function has 2 events"},
      {[](Function& f) { f.instrs[1].records = {0}; }, "event 0 is recorded twice (instructions 0 and 1)"},
      {[](Function& f) { f.instrs[2].waits = {7}; }, "instruction 2 waits for event 7, but the function has 2 events"},
      {[](Function& f) { f.instrs[1].records.clear(); }, "instruction 2 waits for event 1, which no instruction records"},
      {[](Function& f) { f.instrs[0].waits = {1}; }, "instruction 0 waits for event 1, which instruction 1 records after it"},
      {[](Function& f) { f.instrs[1].waits = {1}; }, "instruction 1 waits for event 1, which instruction 1 records itself"},
  };
  for (const Case& c : cases) {
    RandomDag d = chain();
    Function& f = d.b.p.functions[0];
    alternate(f);
    ASSERT_EQ(check_stream_structure(f), "");
    c.damage(f);
    EXPECT_EQ(check_stream_structure(f), c.message);
    // The executor and the plan check refuse it with the same words.
    ThreadPool pool(1);
    std::vector<HostTensor> store(d.b.p.buffers.size());
    try {
      Executor ex(d.b.p, f, pool, store);
      ADD_FAILURE() << "accepted: " << c.message;
    } catch (const RuntimeError& e) {
      EXPECT_EQ(std::string(e.what()), "function 'f': " + c.message);
    }
    d.b.p.model = "m";
    record_kernel_contracts(d.b.p);
    try {
      check_program(d.b.p);
      ADD_FAILURE() << "check_program accepted: " << c.message;
    } catch (const RuntimeError& e) {
      EXPECT_EQ(std::string(e.what()), "function 'f': " + c.message);
    }
  }
}

TEST(StreamFormat, HappensBeforeFollowsStreamsAndEventsTransitively) {
  RandomDag d = chain();
  Function& f = d.b.p.functions[0];
  alternate(f);
  StreamOrder o(f);
  EXPECT_TRUE(o.before(0, 1));
  EXPECT_TRUE(o.before(1, 2));
  EXPECT_TRUE(o.before(0, 2));
  EXPECT_FALSE(o.before(1, 0));
  EXPECT_FALSE(o.before(1, 1));
  f.instrs[1].waits.clear();  // stream 1 no longer waits: 0 -> 2 by stream order only
  StreamOrder p(f);
  EXPECT_FALSE(p.before(0, 1));
  EXPECT_TRUE(p.before(0, 2));
  EXPECT_TRUE(p.before(1, 2));
  EXPECT_NE(check_stream_races(d.b.p, f, p), "");
  // An extra edge restores it.
  StreamOrder q(f, {{0, 1}});
  EXPECT_TRUE(q.before(0, 1));
  EXPECT_EQ(check_stream_races(d.b.p, f, q), "");
}

TEST(StreamFormat, ExtraWaitsReuseTheRecordersEvent) {
  RandomDag d = chain();
  Function& f = d.b.p.functions[0];
  alternate(f);
  // Instruction 2 records nothing, 0 and 1 record events 0 and 1.
  StreamEvents ev = with_extra_waits(f, {{0, 2}, {1, 2}, {2, 2}, {2, 1}});
  EXPECT_EQ(ev.events, 2u);                               // no new event: 0 and 1 reuse theirs
  EXPECT_EQ(ev.waits[2], (std::vector<uint32_t>{1, 0}));  // its own wait, then 0's event once
  EXPECT_EQ(ev.waits[1], (std::vector<uint32_t>{0}));     // (2, 1) goes backwards: ignored
  EXPECT_TRUE(ev.records[2].empty());
  // A recorder without an event gets a new one, shared by all its waiters.
  f.instrs[1].records.clear();
  f.instrs[2].waits.clear();
  ev = with_extra_waits(f, {{1, 2}, {0, 2}});
  EXPECT_EQ(ev.events, 3u);
  EXPECT_EQ(ev.records[1], (std::vector<uint32_t>{2}));
  EXPECT_EQ(ev.waits[2], (std::vector<uint32_t>{2, 0}));
}

TEST(StreamFormat, PlanEncodingRoundTrips) {
  RandomDag d = random_dag(static_cast<int>(rnd(5, 30)));
  d.b.p.model = "m";
  Function& f = d.b.p.functions[0];
  PlanTarget target{"x86_64", "generic", {}};
  // Without a schedule: the bytes end after the target, and decode as one stream.
  const std::string plain = plan_detail::encode_program(d.b.p, target);
  random_schedule(f, d.b.p.buffers.size(), static_cast<uint32_t>(rnd(2, 4)));
  const std::string scheduled = plan_detail::encode_program(d.b.p, target);
  size_t ext = 4 + 4 + 4 + 4 + 4;
  for (const Instr& in : f.instrs) ext += 4 + 4 + 4 * in.waits.size() + 4 + 4 * in.records.size();
  EXPECT_EQ(scheduled.size(), plain.size() + ext);
  EXPECT_EQ(scheduled.substr(0, plain.size()), plain);

  Program back;
  PlanTarget t2;
  plan_detail::decode_program(plain, back, t2);
  EXPECT_EQ(back.functions[0].streams, 1u);
  EXPECT_EQ(back.functions[0].events, 0u);
  for (const Instr& in : back.functions[0].instrs) EXPECT_TRUE(in.stream == 0 && in.waits.empty() && in.records.empty());

  Program again;
  plan_detail::decode_program(scheduled, again, t2);
  const Function& g = again.functions[0];
  EXPECT_EQ(g.streams, f.streams);
  EXPECT_EQ(g.events, f.events);
  ASSERT_EQ(g.instrs.size(), f.instrs.size());
  for (size_t i = 0; i < f.instrs.size(); ++i) {
    EXPECT_EQ(g.instrs[i].stream, f.instrs[i].stream) << i;
    EXPECT_EQ(g.instrs[i].waits, f.instrs[i].waits) << i;
    EXPECT_EQ(g.instrs[i].records, f.instrs[i].records) << i;
  }
  EXPECT_EQ(plan_detail::encode_program(again, t2), scheduled);

  // A damaged extension: cut inside it, or listing the wrong number of functions.
  EXPECT_THROW(plan_detail::decode_program(scheduled.substr(0, scheduled.size() - 2), again, t2), RuntimeError);
  std::string wrong = scheduled;
  wrong[plain.size() + 4] = 2;  // the function count
  try {
    plan_detail::decode_program(wrong, again, t2);
    ADD_FAILURE() << "decoded";
  } catch (const RuntimeError& e) {
    EXPECT_NE(std::string(e.what()).find("the streams extension does not list every function once"), std::string::npos)
        << e.what();
  }
}

// Two threads (two streams) calling parallel_for on one pool at once: every item of each
// loop runs exactly once, whoever gets the pool.
TEST(StreamFormat, ThreadPoolTakesConcurrentCallers) {
  ThreadPool pool(3);
  constexpr int kLoops = 200;
  std::vector<std::vector<std::atomic<int>>> hits(2);
  for (auto& h : hits) h = std::vector<std::atomic<int>>(1000);
  auto caller = [&](int who) {
    for (int r = 0; r < kLoops; ++r)
      pool.parallel_for(1000, 7, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) hits[static_cast<size_t>(who)][static_cast<size_t>(i)].fetch_add(1);
      });
  };
  std::thread a(caller, 0), b(caller, 1);
  a.join();
  b.join();
  for (const auto& h : hits)
    for (const auto& c : h) ASSERT_EQ(c.load(), kLoops);
}

}  // namespace
}  // namespace modelc::rt::test
