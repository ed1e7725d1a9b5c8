// The stream schedule pass (compiler/lowered/schedule.h): dependencies from buffer accesses
// on a hand-made function, minimal events on a diamond, and on the compiled example models
// a valid, minimal schedule whose train steps and evals are bit-identical to one stream.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <random>

#include "tests/common/random_batch.h"
#include "compiler/pipeline.h"
#include "compiler/lowered/schedule.h"
#include "runtime/execution/memory_plan.h"
#include "runtime/session/session.h"
#include "runtime/execution/streams.h"

namespace modelc {
namespace {

const std::string kModels = std::string(MODELC_SOURCE_DIR) + "/models/";

rt::Instr op(std::vector<uint32_t> in, std::vector<uint32_t> out) {
  rt::Instr i;
  i.kind = rt::Instr::Kind::Library;
  i.op = "fill";
  i.inputs = std::move(in);
  i.outputs = std::move(out);
  return i;
}

rt::Program buffers(const std::vector<rt::BufferRole>& roles) {
  rt::Program p;
  for (size_t i = 0; i < roles.size(); ++i) {
    rt::BufferDesc d;
    d.name = "b" + std::to_string(i);
    d.role = roles[i];
    p.buffers.push_back(d);
  }
  return p;
}

TEST(StreamSchedule, DependenciesFromBufferAccesses) {
  using R = rt::BufferRole;
  // 0 x (input), 1 p (param), 2 t, 3 u, 4 y (output)
  rt::Program p = buffers({R::Input, R::Param, R::Temp, R::Temp, R::Output});
  rt::Function f;
  f.instrs = {
      op({0, 1}, {2}),     // 0: t = f(x, p)          reads p
      op({0}, {3}),        // 1: u = g(x)             independent
      op({1, 3}, {1}),     // 2: p = p - u in place   after 1 (u), after 0 (reads p before)
      op({2, rt::kNoBuffer}, {4}),  // 3: y = h(t)    after 0
      op({0}, {2}),        // 4: t = k(x)             overwrites t: after 0 (write), 3 (read)
      op({1, 2}, {4}),     // 5: y = m(p, t)          after 2 (p), 4 (t), 3 (y written)
  };
  const std::vector<std::vector<uint32_t>> want = {{}, {}, {0, 1}, {0}, {0, 3}, {2, 3, 4}};
  EXPECT_EQ(instruction_deps(p, f), want);
}

TEST(StreamSchedule, ADiamondWaitsOnce) {
  using R = rt::BufferRole;
  // a = f(x); b = g(a); c = h(a); d = b + c, twice over: each join needs one event.
  rt::Program p = buffers({R::Input, R::Temp, R::Temp, R::Temp, R::Temp, R::Temp, R::Temp, R::Output});
  rt::Function f;
  f.instrs = {op({0}, {1}), op({1}, {2}), op({1}, {3}), op({2, 3}, {4}),
              op({4}, {5}), op({4}, {6}), op({5, 6}, {7})};
  ScheduleStats st = schedule_streams(p, f, 2);
  EXPECT_EQ(st.streams, 2u);
  EXPECT_EQ(verify_schedule(p, f), "");
  // b and c on different streams, each join waits for exactly the other branch.
  EXPECT_NE(f.instrs[1].stream, f.instrs[2].stream);
  EXPECT_NE(f.instrs[4].stream, f.instrs[5].stream);
  size_t waits = 0;
  for (const rt::Instr& in : f.instrs) waits += in.waits.size();
  // the fork of each diamond (stream 1 waits for a) and its join (waits for the other branch)
  EXPECT_EQ(waits, 4u);
  EXPECT_EQ(st.events, 4u);
  // One stream: no events, everything on stream 0.
  st = schedule_streams(p, f, 1);
  EXPECT_EQ(f.streams, 1u);
  EXPECT_EQ(f.events, 0u);
  for (const rt::Instr& in : f.instrs) EXPECT_TRUE(in.stream == 0 && in.waits.empty() && in.records.empty());
  // A redundant wait is found by the minimality check, a missing one by the order check.
  schedule_streams(p, f, 2);
  rt::Function extra = f;
  ASSERT_EQ(extra.instrs[0].records.size(), 1u);
  const uint32_t e0 = extra.instrs[0].records[0];
  extra.instrs[6].waits.push_back(e0);  // a is long done: stream 0 ran it before d
  EXPECT_EQ(verify_schedule(p, extra, false), "");
  EXPECT_EQ(verify_schedule(p, extra),
            fmt::format("instruction 6 waits for event {}, but every dependency is ordered without it", e0));
  rt::Function missing = f;
  for (rt::Instr& in : missing.instrs) in.waits.clear();
  EXPECT_NE(verify_schedule(p, missing).find("but the schedule does not order them"), std::string::npos);
}

// Random batches of a program's inputs: f32 in [-1, 1), i32 in [0, classes).
std::map<std::string, rt::HostTensor> batch(const rt::Program& p, const std::map<std::string, int64_t>& dims,
                                            int64_t classes, std::mt19937_64& rng) {
  std::vector<int64_t> sym(p.symbols.size(), 0);
  for (const auto& [name, v] : dims) sym.at(*p.symbol_id(name)) = v;
  return test::random_train_batch(p, sym, classes, rng);
}

struct ModelCase {
  const char* file;
  std::vector<std::pair<std::string, std::string>> defines;
  int64_t batch, classes;
};

TEST(StreamSchedule, ExampleModelsAreValidMinimalAndBitIdentical) {
  const ModelCase cases[] = {
      {"fashion_mlp.model", {}, 64, 10},
      {"char_gpt.model", {{"T", "8"}, {"C", "24"}, {"L", "2"}}, 2, 96},
  };
  std::mt19937_64 rng(std::random_device{}());
  for (const ModelCase& mc : cases) {
    CompileOptions o;
    o.defines = mc.defines;
    Compilation c(o);
    std::shared_ptr<rt::Program> one = compile_program(c, kModels + mc.file);
    ASSERT_TRUE(one) << c.diags().render();
    // The pass on a copy (the same code) gives the 3-stream program.
    auto three = std::make_shared<rt::Program>(*one);
    for (rt::Function& f : three->functions) {
      ScheduleStats st = schedule_streams(*three, f, 3);
      EXPECT_EQ(verify_schedule(*three, f), "") << mc.file << " " << f.name;
      EXPECT_LE(f.streams, 3u);
      if (f.name == "train_step") {
        EXPECT_GT(f.streams, 1u) << mc.file << ": the backward pass has independent work";
      }
      EXPECT_LE(st.events, st.cross);
      fmt::print("{} {}: {} instructions, {} dependencies ({} across streams), {} streams, {} events\n", mc.file,
                 f.name, f.instrs.size(), st.dependencies, st.cross, st.streams, st.events);
      const rt::Function& g = *one->function(f.name);
      ASSERT_EQ(f.instrs.size(), g.instrs.size());
      for (size_t i = 0; i < f.instrs.size(); ++i)
        ASSERT_TRUE(f.instrs[i].inputs == g.instrs[i].inputs && f.instrs[i].outputs == g.instrs[i].outputs) << i;
      rt::StreamOrder order(f);
      EXPECT_EQ(rt::check_stream_races(*three, f, order), "");
      // The waits arena reuse adds at this batch (the runs below need them to be bit-identical).
      std::vector<int64_t> sym(three->symbols.size(), 0);
      sym.at(*three->symbol_id("B")) = mc.batch;
      const auto hazards = rt::arena_hazards(f, rt::plan_function_memory(*three, f, sym), order);
      fmt::print("{} {}: {} waits added for arena reuse\n", mc.file, f.name, hazards.size());
    }
    rt::SessionOptions so;
    so.threads = 2;
    so.seed = 11;
    rt::Session s1(one, so), s3(three, so);
    const std::map<std::string, int64_t> dims{{"B", mc.batch}};
    for (int step = 0; step < 2; ++step) {
      auto b = batch(*one, dims, mc.classes, rng);
      const float l1 = s1.train_step(b), l3 = s3.train_step(b);
      EXPECT_EQ(l1, l3) << mc.file << " step " << step;
    }
    for (const rt::BufferDesc& d : one->buffers)
      if (d.role == rt::BufferRole::Param) {
        EXPECT_EQ(s1.param(d.name).bytes, s3.param(d.name).bytes) << mc.file << " " << d.name;
      }
    auto b = batch(*one, dims, mc.classes, rng);
    auto e1 = s1.eval(b), e3 = s3.eval(b);
    for (const auto& [name, t] : e1) EXPECT_EQ(t.bytes, e3.at(name).bytes) << mc.file << " eval " << name;
  }
}

}  // namespace
}  // namespace modelc
