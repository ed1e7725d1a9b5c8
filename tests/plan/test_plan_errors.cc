// Damaged, foreign and inconsistent .plan files: each gives a RuntimeError that names the
// file and what is wrong, never a crash (these tests also run under ASan + UBSan). And the
// writer: atomic, refuses inconsistent Programs, leaves nothing behind on failure.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>

#include "compiler/codegen/object.h"
#include "compiler/pipeline.h"
#include "runtime/base/error.h"
#include "runtime/session/plan.h"
#include "runtime/session/plan_codec.h"
#include "tests/plan/plan_harness.h"

namespace fs = std::filesystem;
using namespace modelc;
using plantest::Envelope;
using plantest::Section;

namespace {

struct Base {
  std::shared_ptr<rt::Program> program;
  std::string so, bytes;
  rt::PlanTarget target;
};

const Base& base() {
  static const Base b = [] {
    Base r;
    Compilation c(CompileOptions{});
    ProgramOptions po;
    po.shared_object = &r.so;
    r.program = compile_program(c, std::string(MODELC_SOURCE_DIR) + "/models/fashion_mlp.model", po);
    if (!r.program) throw std::runtime_error(c.diags().render());
    r.target = host_target();
    r.program->ptx = "// some PTX text for the ptx section\n";
    r.program->ptx_target = "sm_80";
    r.bytes = rt::encode_plan(*r.program, r.so, r.target);
    return r;
  }();
  return b;
}

class PlanErrors : public testing::Test {
 protected:
  void SetUp() override {
    std::string t = (fs::temp_directory_path() / "modelc-plan-errors-XXXXXX").string();
    dir_ = mkdtemp(t.data());
    path_ = (dir_ / "x.plan").string();
  }
  void TearDown() override { fs::remove_all(dir_); }

  void put(const std::string& bytes) const {
    std::ofstream out(path_, std::ios::binary | std::ios::trunc);
    out << bytes;
  }
  // read_plan of `bytes` fails with a RuntimeError that names the file and contains `want`.
  void expect_error(const std::string& bytes, const std::string& want, const std::string& context = "") const {
    put(bytes);
    expect_read_error(path_, want, context);
  }
  static void expect_read_error(const std::string& path, const std::string& want, const std::string& context = "") {
    try {
      rt::read_plan(path);
      ADD_FAILURE() << context << ": read_plan accepted it (expected '" << want << "')";
    } catch (const rt::RuntimeError& e) {
      const std::string what = e.what();
      EXPECT_EQ(what.rfind(path + ": ", 0), 0u) << context << ": " << what;
      EXPECT_NE(what.find(want), std::string::npos) << context << ": '" << what << "' lacks '" << want << "'";
    }
  }
  // A plan around `program` (not checked) with the base plan's code.
  std::string plan_of(const rt::Program& program, const rt::PlanTarget& target = {}) const {
    return rt::encode_plan(program, base().so, target);
  }
  Envelope envelope() const { return Envelope{rt::kPlanVersion, 0, 0, plantest::sections_of(base().bytes), ""}; }

  fs::path dir_;
  std::string path_;
};

TEST_F(PlanErrors, TheBasePlanLoads) {
  put(base().bytes);
  EXPECT_NO_THROW(rt::read_plan(path_));
}

// The envelope writer of the tests follows docs/plan-format.md byte for byte.
TEST_F(PlanErrors, FormatMatchesTheDocumentation) {
  Envelope e = envelope();
  for (Section& s : e.sections) s.offset = -1;
  EXPECT_TRUE(plantest::make_plan(e) == base().bytes);
  EXPECT_EQ(base().bytes.substr(0, 8), "MODELCPL");
  EXPECT_EQ(plantest::get32(base().bytes, 8), rt::kPlanVersion);
}

TEST_F(PlanErrors, FileProblems) {
  expect_read_error((dir_ / "missing.plan").string(), "cannot open: No such file or directory");
  expect_read_error(dir_.string(), "is a directory");
  expect_read_error("/dev/null", "not a regular file");
  const std::string fifo = (dir_ / "fifo.plan").string();
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  expect_read_error(fifo, "not a regular file");  // and does not block
  EXPECT_FALSE(rt::is_plan_file(fifo));
  expect_error("", "empty file (not a modelc plan)");
  expect_error("MODELC", "truncated");
  expect_error("hello", "not a modelc plan (bad magic)");
  std::string bad = base().bytes;
  bad[3] = 'x';
  expect_error(bad, "not a modelc plan (bad magic)");
  expect_error("\x7f" "ELF\x02\x01\x01", "not a modelc plan (bad magic)");
  EXPECT_FALSE(rt::is_plan_file(path_));
  EXPECT_FALSE(rt::is_plan_file((dir_ / "missing.plan").string()));
}

TEST_F(PlanErrors, OtherVersions) {
  std::string v = base().bytes;
  plantest::put32(v, 8, 7);
  expect_error(v, "plan format version 7, this runtime reads version 5 (a newer modelc wrote it");
  plantest::put32(v, 8, 0);
  // Every other version gets a remedy, an older (or damaged) one too.
  expect_error(v, "plan format version 0, this runtime reads version 5 (an older modelc wrote it, or the header is "
                  "damaged; recompile the .model with this one)");
  Envelope e = envelope();
  e.version = 1;  // before the kernels' contracts
  expect_error(plantest::make_plan(e), "plan format version 1, this runtime reads version 5");
  e.version = 2;  // before the schedules' numbers of version 3
  expect_error(plantest::make_plan(e), "plan format version 2, this runtime reads version 5 (an older modelc wrote it");
  e.version = 3;  // before buffers (the role of a model's non-trained state) of version 4
  expect_error(plantest::make_plan(e), "plan format version 3, this runtime reads version 5 (an older modelc wrote it");
  e.version = 4;  // before the plateau schedule and early stopping of version 5
  expect_error(plantest::make_plan(e), "plan format version 4, this runtime reads version 5 (an older modelc wrote it");
}

// Cut after every byte of the header and the section table, and at a sample of offsets
// after that (both sides of every section boundary among them).
TEST_F(PlanErrors, TruncatedAnywhere) {
  const std::string& full = base().bytes;
  std::vector<size_t> cuts;
  const size_t table_end = 48 + 32 * plantest::get32(full, 16);
  for (size_t n = 1; n <= table_end + 1; ++n) cuts.push_back(n);
  for (size_t n = table_end; n < full.size(); n += 4093) cuts.push_back(n);
  for (const Section& s : plantest::sections_of(full))
    for (int64_t d : {-1, 0, 1}) {
      int64_t at = s.offset + static_cast<int64_t>(s.bytes.size()) + d;
      if (at > 0 && static_cast<size_t>(at) < full.size()) cuts.push_back(static_cast<size_t>(at));
    }
  cuts.push_back(full.size() - 1);
  for (size_t n : cuts) expect_error(full.substr(0, n), "truncated", "cut at " + std::to_string(n));
  expect_error(full.substr(0, 1000), "truncated: section 'program' ends at byte");
  expect_error(full.substr(0, full.size() - 1), "truncated: section 'code' ends at byte");
}

// One flipped byte anywhere: the header, the table or a section.
TEST_F(PlanErrors, FlippedBytes) {
  const std::string& full = base().bytes;
  for (size_t i = 0; i < 48; ++i) {
    std::string b = full;
    b[i] = static_cast<char>(b[i] ^ 0x20);
    const char* want = i < 8 ? "bad magic" : i < 12 ? "plan format version" : "the header is corrupted (CRC mismatch)";
    expect_error(b, want, "header byte " + std::to_string(i));
  }
  const size_t table_end = 48 + 32 * plantest::get32(full, 16);
  for (size_t i = 48; i < table_end; ++i) {
    std::string b = full;
    b[i] = static_cast<char>(b[i] ^ 0x01);
    expect_error(b, "the section table is corrupted (CRC mismatch)", "table byte " + std::to_string(i));
  }
  std::mt19937_64 rng(42);
  const char* names[] = {"", "program", "ptx", "code"};
  for (const Section& s : plantest::sections_of(full)) {
    ASSERT_FALSE(s.bytes.empty()) << names[s.kind];
    std::vector<size_t> at = {0, s.bytes.size() / 2, s.bytes.size() - 1};
    for (int k = 0; k < 20; ++k) at.push_back(rng() % s.bytes.size());
    for (size_t i : at) {
      std::string b = full;
      b[static_cast<size_t>(s.offset) + i] = static_cast<char>(b[static_cast<size_t>(s.offset) + i] ^ (1 << (rng() % 8)));
      expect_error(b, std::string("section '") + names[s.kind] + "' is corrupted (CRC mismatch)",
                   std::string(names[s.kind]) + " byte " + std::to_string(i));
    }
  }
}

// Envelopes with consistent CRCs but an impossible structure.
TEST_F(PlanErrors, BadEnvelopes) {
  Envelope e = envelope();
  e.flags = 4;
  expect_error(plantest::make_plan(e), "unknown header flags 0x4");
  e = envelope();
  e.reserved = 1;
  expect_error(plantest::make_plan(e), "reserved field");
  e = envelope();
  e.sections.clear();
  expect_error(plantest::make_plan(e), "invalid section count 0");
  e = envelope();
  const Section first = e.sections[0];
  e.sections.resize(17, first);
  for (Section& s : e.sections) s.offset = -1;
  expect_error(plantest::make_plan(e), "invalid section count 17");
  e = envelope();
  e.sections[1].kind = 9;
  expect_error(plantest::make_plan(e), "section 1 has the unknown kind 9");
  e = envelope();
  e.sections[1].kind = 1;
  expect_error(plantest::make_plan(e), "section 'program' appears twice");
  e = envelope();
  e.sections.pop_back();
  expect_error(plantest::make_plan(e), "the plan has no 'code' section");
  e = envelope();
  e.sections.erase(e.sections.begin());
  for (Section& s : e.sections) s.offset = -1;
  expect_error(plantest::make_plan(e), "the plan has no 'program' section");
  e = envelope();
  e.sections[1].offset = e.sections[0].offset + 8;  // inside 'program'
  e.sections[2].offset = -1;
  expect_error(plantest::make_plan(e), "section 'ptx' overlaps section 'program'");
  e = envelope();
  e.sections[1].bytes.clear();
  e.sections[1].offset = 60;  // inside the table
  expect_error(plantest::make_plan(e), "section 'ptx' has an invalid offset 60");
  e = envelope();
  e.trailing = "junk";
  expect_error(plantest::make_plan(e), "4 bytes of unexpected data after the plan's");
  // Without a 'ptx' section a plan is fine: no PTX.
  e = envelope();
  e.sections.erase(e.sections.begin() + 1);
  for (Section& s : e.sections) s.offset = -1;
  put(plantest::make_plan(e));
  EXPECT_TRUE(rt::read_plan(path_)->ptx.empty());
}

// Header and table fields patched with their CRCs recomputed: each impossible value is named.
TEST_F(PlanErrors, PatchedHeaderAndTable) {
  auto header = [](std::string b) {
    plantest::put32(b, 44, plantest::crc(b.substr(0, 44)));
    return b;
  };
  auto table = [&](std::string b) {
    const uint32_t n = plantest::get32(b, 16);
    plantest::put32(b, 20, plantest::crc(b.substr(48, 32 * size_t{n})));
    return header(b);
  };
  std::string b = base().bytes;
  plantest::put64(b, 24, 40);
  expect_error(header(b), "invalid section table offset 40");
  b = base().bytes;
  plantest::put64(b, 32, base().bytes.size() + 100);
  expect_error(header(b), "truncated: the plan has " + std::to_string(base().bytes.size() + 100) + " bytes but the file has");
  b = base().bytes;
  plantest::put32(b, 48 + 32 + 4, 1);
  expect_error(table(b), "section 'ptx' has nonzero reserved fields");
  b = base().bytes;
  plantest::put64(b, 48 + 64 + 16, uint64_t{1} << 40);
  expect_error(table(b), "section 'code' has an invalid offset");
  b = base().bytes;
  plantest::put64(b, 48 + 64 + 8, ~uint64_t{0});
  expect_error(table(b), "section 'code' has an invalid offset 18446744073709551615");
}

// A file too large to be a plan is refused before it is read (a sparse file).
TEST_F(PlanErrors, HugeFile) {
  put(base().bytes);
  std::error_code ec;
  fs::resize_file(path_, (uint64_t{1} << 32) + 1, ec);
  if (ec) GTEST_SKIP() << "cannot make a sparse 4 GiB file here: " << ec.message();
  expect_read_error(path_, "is too large for a plan");
}

// A 'program' section with a valid CRC but bytes that do not decode.
TEST_F(PlanErrors, MalformedProgramSection) {
  const std::string program = plantest::sections_of(base().bytes)[0].bytes;
  auto with_program = [&](const std::string& bytes) {
    Envelope e = envelope();
    e.sections[0].bytes = bytes;
    for (Section& s : e.sections) s.offset = -1;
    return plantest::make_plan(e);
  };
  for (size_t n = 0; n < program.size(); n += (n < 400 ? 1 : 211))
    expect_error(with_program(program.substr(0, n)), "section 'program' is malformed", "program cut at " + std::to_string(n));
  expect_error(with_program(program + "xy"), "section 'program' is malformed: 2 unexpected bytes after the program");
  std::string huge = program;
  plantest::put32(huge, 0, 0xffffffffu);  // the model name's length
  expect_error(with_program(huge), "entries cannot fit in the");
  // Random damage (CRC recomputed): an error or a valid plan, never a crash.
  std::mt19937_64 rng(7);
  int accepted = 0;
  for (int k = 0; k < 300; ++k) {
    std::string b = program;
    for (int j = 0; j < 1 + k % 3; ++j) b[rng() % b.size()] = static_cast<char>(rng());
    put(with_program(b));
    try {
      rt::read_plan(path_);
      ++accepted;
    } catch (const rt::RuntimeError& e) {
      EXPECT_EQ(std::string(e.what()).rfind(path_, 0), 0u) << e.what();
    }
  }
  std::cerr << accepted << " of 300 randomly damaged 'program' sections still decode to a consistent program\n";
}

// Programs that decode but make no sense: read_plan refuses each, and write_plan will not
// write one (and leaves no file behind).
TEST_F(PlanErrors, InconsistentPrograms) {
  struct Case {
    const char* want;
    std::function<void(rt::Program&)> mutate;
    bool decoder = false;  // an invalid enum value: the decoder already refuses it
  };
  const uint32_t nbuf = static_cast<uint32_t>(base().program->buffers.size());
  auto first_kernel_instr = [](rt::Program& p) -> rt::Instr& {
    for (rt::Instr& in : p.functions[0].instrs)
      if (in.kind == rt::Instr::Kind::Codelet) return in;
    throw std::runtime_error("no kernel instruction");
  };
  const Case cases[] = {
      {"has no model name", [](rt::Program& p) { p.model.clear(); }},
      {"appears twice", [](rt::Program& p) { p.symbols.push_back(p.symbols[0]); }},
      {"invalid element type", [](rt::Program& p) { p.buffers[0].type = static_cast<rt::ElemType>(9); }, true},
      {"invalid role", [](rt::Program& p) { p.buffers[0].role = static_cast<rt::BufferRole>(6); }, true},
      {"invalid initializer", [](rt::Program& p) { p.buffers[0].init.kind = static_cast<rt::Init::Kind>(5); }, true},
      {"has index limit 5, but only an i32 input may have one", [](rt::Program& p) { p.buffers[0].index_limit = 5; }},
      {"has index limit -3, but only an i32 input may have one, and it must be positive", [](rt::Program& p) {
         for (rt::BufferDesc& b : p.buffers)
           if (b.index_limit > 0) b.index_limit = -3;
       }},
      {"ignores index -100, but an ignored index goes with an index limit (0)", [](rt::Program& p) {
         p.buffers[0].index_ignore = -100;
       }},
      {"ignores index 2, but an ignored index goes with an index limit (", [](rt::Program& p) {
         for (rt::BufferDesc& b : p.buffers)
           if (b.index_limit > 2) b.index_ignore = 2;
       }},
      {"dim 0 names symbol 99, but the program has", [](rt::Program& p) { p.buffers[0].shape[0] = rt::SizeExpr::symbol(99); }},
      {"has no valid name", [](rt::Program& p) { p.codelets[0].name.clear(); }},
      {"kernel 0 ('k\\x00x') has no valid name", [](rt::Program& p) { p.codelets[0].name = std::string("k\0x", 3); }},
      {"the name appears twice", [](rt::Program& p) { p.codelets[1].name = p.codelets[0].name; }},
      {"invalid GPU mapping", [](rt::Program& p) { p.codelets[0].gpu_mapping = static_cast<rt::GpuMapping>(2); }, true},
      {"GPU block of 100 threads", [](rt::Program& p) { p.codelets[0].gpu_block = 100; }},
      {"GPU block of 0 threads", [](rt::Program& p) { p.codelets[0].gpu_block = 0; }},
      {"GPU block of 2048 threads", [](rt::Program& p) { p.codelets[0].gpu_block = 2048; }},
      {"fuses no nodes", [](rt::Program& p) { p.codelets[0].nodes = 0; }},
      {"is unnamed or appears twice", [](rt::Program& p) { p.functions[1].name = p.functions[0].name; }},
      {"has 0 micro-batches", [](rt::Program& p) { p.functions[0].micro_batches = 0; }},
      {"invalid kind", [&](rt::Program& p) { first_kernel_instr(p).kind = static_cast<rt::Instr::Kind>(3); }, true},
      {"names kernel 9999, but the program has", [&](rt::Program& p) { first_kernel_instr(p).codelet = 9999; }},
      {"has grain 0", [&](rt::Program& p) { first_kernel_instr(p).grain = 0; }},
      {"names no library op", [&](rt::Program& p) { first_kernel_instr(p).kind = rt::Instr::Kind::Library; }},
      {"names buffer", [&](rt::Program& p) { first_kernel_instr(p).inputs.push_back(nbuf); }},
      {"names buffer 4294967295", [&](rt::Program& p) { first_kernel_instr(p).outputs[0] = rt::kNoBuffer; }},
      {"size 0 names symbol", [&](rt::Program& p) { 
         auto& sizes = first_kernel_instr(p).sizes;
         sizes.insert(sizes.begin(), rt::SizeExpr::symbol(77));
       }},
      {"the extent names symbol", [&](rt::Program& p) { first_kernel_instr(p).extent = rt::SizeExpr::symbol(77); }},
      {"feed 'images' names buffer", [&](rt::Program& p) { p.functions[0].feeds[0].buffer = nbuf + 3; }},
      {"is micro-batch 1 of 1", [](rt::Program& p) { p.functions[0].feeds[0].micro = 1; }},
      {"output 'loss' names buffer", [&](rt::Program& p) {
         for (auto& [name, b] : p.functions[0].outputs)
           if (name == "loss") b = nbuf;
       }},
      {"an update names buffer", [&](rt::Program& p) { p.functions[0].updates[0].second = nbuf; }},
      // Kernels get what they were compiled for (CodeletDesc's contract).
      {"the extent is 16384, but the kernel was compiled for", [&](rt::Program& p) {
         first_kernel_instr(p).extent = rt::SizeExpr::constant(16384);
       }},
      {"the size table differs from the one the kernel was compiled for", [&](rt::Program& p) {
         first_kernel_instr(p).sizes.push_back(rt::SizeExpr::constant(1));
       }},
      {"operand 0 is buffer 1 ('labels') i32[B], but the kernel was compiled for f32[", [&](rt::Program& p) {
         first_kernel_instr(p).inputs[0] = 1;
       }},
      {"operand 0 is absent, but the kernel was compiled for", [&](rt::Program& p) { first_kernel_instr(p).inputs[0] = rt::kNoBuffer; }},
      {"inputs and 1 outputs, but the kernel was compiled for", [&](rt::Program& p) { first_kernel_instr(p).inputs.pop_back(); }},
      // Data flow.
      {"before any instruction writes it", [](rt::Program& p) {
         rt::Function& f = p.functions[0];
         f.instrs[0].inputs[0] = f.instrs[1].outputs[0];
       }},
      {"a persistent buffer, other than in place", [](rt::Program& p) {
         rt::Function& f = p.functions[0];
         f.instrs[0].outputs[0] = f.updates[0].second;
       }},
      {"is updated twice", [](rt::Program& p) { p.functions[0].updates.push_back(p.functions[0].updates[0]); }},
      {"which is not a parameter, buffer or optimizer state", [](rt::Program& p) {
         p.functions[0].updates[0].second = p.functions[0].feeds[0].buffer;
       }},
      {"is optimizer state, which starts at zero, but has an initializer", [](rt::Program& p) {
         for (rt::BufferDesc& b : p.buffers)
           if (b.role == rt::BufferRole::State) b.init = {rt::Init::Kind::Normal, 0, 1};
       }},
      {"which is not that output or is never written", [](rt::Program& p) {
         auto& outs = p.functions[1].outputs;
         std::swap(outs[0].second, outs[1].second);
       }},
      {"an input the function is not fed", [](rt::Program& p) { p.functions[0].feeds.erase(p.functions[0].feeds.begin()); }},
      {"which is not an input", [](rt::Program& p) { p.functions[0].feeds[0].buffer = p.functions[0].updates[0].second; }},
      {"is used by function 'train_step' and by function 'eval'", [](rt::Program& p) {
         // eval reads and is fed train_step's images buffer in place of its own.
         const uint32_t mine = p.functions[1].feeds[0].buffer, theirs = p.functions[0].feeds[0].buffer;
         p.functions[1].feeds[0].buffer = theirs;
         for (rt::Instr& in : p.functions[1].instrs)
           for (uint32_t& b : in.inputs)
             if (b == mine) b = theirs;
       }},
      {"unknown schedule 'cyclic'", [](rt::Program& p) { p.train.schedule.kind = "cyclic"; }},
      // The train section's rules (runtime/base/train_rules.h), in its words.
      {"the train settings: 'batch' must be a positive integer, got 0", [](rt::Program& p) { p.train.batch = 0; }},
      {"'lr' must be a finite number greater than 0, got nan", [](rt::Program& p) { p.train.schedule.lr = NAN; }},
      {"'clip_grad_norm' must be a finite number greater than 0, got -1", [](rt::Program& p) { p.train.clip_grad_norm = -1; }},
      {"'warmup' must be a non-negative integer, got -2", [](rt::Program& p) { p.train.schedule.warmup = -2; }},
      // The numbers of the schedules of plan format 3, whatever the kind.
      {"'end_factor' must be a number from 0 to 1, got 1.5", [](rt::Program& p) { p.train.schedule.end_factor = 1.5; }},
      {"'power' must be a finite number, 0 or greater, got -1", [](rt::Program& p) { p.train.schedule.power = -1; }},
      {"'pct_start' must be a number from 0 to 1, got nan", [](rt::Program& p) {
         p.train.schedule.kind = "onecycle";
         p.train.schedule.pct_start = NAN;
       }},
      {"'div_factor' must be a finite number greater than 0, got 0", [](rt::Program& p) { p.train.schedule.div_factor = 0; }},
      {"'final_div_factor' must be a finite number greater than 0, got inf", [](rt::Program& p) {
         p.train.schedule.final_div_factor = INFINITY;
       }},
      {"'validation' must be a number between 0 and 1, got -0.5", [](rt::Program& p) { p.train.validation = -0.5; }},
      // The plateau schedule and early stopping of plan format 5.
      {"'factor' must be a number between 0 and 1 (both excluded), got 1", [](rt::Program& p) { p.train.schedule.factor = 1; }},
      {"'patience' must be a non-negative integer, got -1", [](rt::Program& p) { p.train.early_stopping.patience = -1; }},
      {"'min_delta' must be a finite number, 0 or greater, got nan", [](rt::Program& p) {
         p.train.early_stopping.threshold = NAN;
       }},
      {"the plateau schedule watches no metric", [](rt::Program& p) { p.train.schedule.kind = "plateau"; }},
      {"a schedule other than plateau watches a metric", [](rt::Program& p) { p.train.schedule.watch.metric = "loss"; }},
      {"'seed' must be a non-negative integer, got -1", [](rt::Program& p) { p.train.seed = -1; }},
      {"has PTX but no PTX target", [](rt::Program& p) { p.ptx_target.clear(); }},
  };
  for (const Case& c : cases) {
    rt::Program p = *base().program;
    c.mutate(p);
    if (c.decoder) {
      expect_error(plan_of(p), "section 'program' is malformed: ", c.want);
      expect_error(plan_of(p), "has the invalid value", c.want);
    } else {
      expect_error(plan_of(p), "inconsistent program: ", c.want);
      expect_error(plan_of(p), c.want, c.want);
    }
    const std::string out = (dir_ / "w.plan").string();
    try {
      rt::write_plan(p, base().so, out);
      ADD_FAILURE() << c.want << ": write_plan wrote an inconsistent program";
    } catch (const rt::RuntimeError& e) {
      EXPECT_NE(std::string(e.what()).find("will not write an inconsistent program"), std::string::npos) << e.what();
    }
    EXPECT_FALSE(fs::exists(out)) << c.want;
  }
  EXPECT_EQ(std::distance(fs::directory_iterator(dir_), fs::directory_iterator()), 1);  // x.plan only
}

TEST_F(PlanErrors, HostCodeProblems) {
  rt::Program p = *base().program;
  p.codelets[2].name = "no_such_kernel";
  expect_error(plan_of(p), "kernel 2 'no_such_kernel' is missing from the plan's host code (section 'code')");
  put(rt::encode_plan(*base().program, "this is not an ELF file"));
  expect_read_error(path_, "section 'code' cannot be loaded: ");
  put(rt::encode_plan(*base().program, ""));
  expect_read_error(path_, "section 'code' cannot be loaded: ");
}

TEST_F(PlanErrors, ForeignTargets) {
  const rt::Program& p = *base().program;
  expect_error(plan_of(p, {"aarch64", "neoverse-v2", {"sve2"}}),
               "compiled for aarch64 (cpu 'neoverse-v2'), but this machine is x86_64");
  // Features the loader cannot check are ignored.
  put(plan_of(p, {"x86_64", "future-cpu", {"avx10.9", "not-a-feature"}}));
  EXPECT_NO_THROW(rt::read_plan(path_));
  std::vector<std::string> lacking = rt::missing_cpu_features(rt::checkable_cpu_features());
  if (lacking.empty()) GTEST_SKIP() << "this CPU has every feature the loader checks";
  std::vector<std::string> features = base().target.features;
  features.push_back(lacking[0]);
  expect_error(plan_of(p, {"x86_64", "imaginary", features}),
               "compiled for cpu 'imaginary', whose features " + lacking[0] + " this CPU lacks; recompile");
  if (lacking.size() > 1) {
    features.push_back(lacking[1]);
    expect_error(plan_of(p, {"x86_64", "imaginary", features}), "features " + lacking[0] + ", " + lacking[1] + " this CPU lacks");
  }
}

TEST_F(PlanErrors, WriteFailures) {
  const rt::Program& p = *base().program;
  try {
    rt::write_plan(p, base().so, (dir_ / "no" / "such" / "x.plan").string());
    ADD_FAILURE() << "wrote into a missing directory";
  } catch (const rt::RuntimeError& e) {
    EXPECT_NE(std::string(e.what()).find("no/such/x.plan: cannot write: No such file or directory"), std::string::npos)
        << e.what();
  }
  fs::create_directory(dir_ / "d.plan");
  try {
    rt::write_plan(p, base().so, (dir_ / "d.plan").string());
    ADD_FAILURE() << "wrote over a directory";
  } catch (const rt::RuntimeError& e) {
    EXPECT_NE(std::string(e.what()).find("d.plan: cannot write: Is a directory"), std::string::npos) << e.what();
  }
  try {
    rt::write_plan(p, "", path_);
    ADD_FAILURE() << "wrote a plan without code";
  } catch (const rt::RuntimeError& e) {
    EXPECT_NE(std::string(e.what()).find("without host code"), std::string::npos) << e.what();
  }
  // A failed write leaves the previous plan in place and no temporary file behind.
  rt::write_plan(p, base().so, path_);
  rt::Program bad = p;
  bad.model.clear();
  EXPECT_THROW(rt::write_plan(bad, base().so, path_), rt::RuntimeError);
  EXPECT_EQ(rt::read_plan(path_)->model, p.model);
  size_t files = 0;
  for (const auto& entry : fs::directory_iterator(dir_)) files += entry.is_regular_file();
  EXPECT_EQ(files, 1u);
}

}  // namespace
