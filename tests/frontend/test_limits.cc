// Hostile and huge inputs: each must end in a clear diagnostic, never a crash, a hang or a
// stack overflow. The files are generated here, in a fresh temporary folder.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>

#include "compiler/compile.h"
#include "tests/common/sanitizers.h"

namespace modelc {
namespace {

namespace fs = std::filesystem;

class Limits : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("modelc-limits-" + std::to_string(std::random_device{}()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string write(const std::string& name, const std::string& text) {
    std::string p = (dir_ / name).string();
    std::ofstream(p, std::ios::binary) << text;
    return p;
  }
  // Compiles `path`; returns the rendered diagnostics (and whether a graph came out).
  std::string compile(const std::string& path, bool* ok = nullptr) {
    Compilation c(CompileOptions{});
    bool good = c.load(path) && c.elaborate().graph != nullptr;
    if (ok) *ok = good;
    return c.diags().render();
  }
  fs::path dir_;
};

std::string repeat(const std::string& s, size_t n) {
  std::string r;
  r.reserve(s.size() * n);
  for (size_t i = 0; i < n; ++i) r += s;
  return r;
}

TEST_F(Limits, DeepParenthesesStopAtTheLimit) {
  std::string p = write("deep.model", "model m {\n  x = " + repeat("(", 100000) + "1" + repeat(")", 100000) + "\n}\n");
  std::string out = compile(p);
  // The model's '{' is level 1 and "  x = " puts the first '(' at column 7, so the 200th
  // '(' (level 201) is at column 206.
  EXPECT_NE(out.find("deep.model:2:206: error: expression or block nested too deeply (the limit is 200 levels)"), std::string::npos) << out;
}

TEST_F(Limits, DeepBlocksStopAtTheLimit) {
  std::string p = write("blocks.model", "model m {\n" + repeat("for i in 0..1 {\n", 100000) + repeat("}\n", 100000) + "}\n");
  std::string out = compile(p);
  // Line 1 opens level 1; the '{' of line N opens level N, and line 201's is one too many.
  EXPECT_NE(out.find("blocks.model:201:15: error: expression or block nested too deeply"), std::string::npos) << out;
}

TEST_F(Limits, PrefixAndPowerChainsStopAtTheLimit) {
  std::string minus = write("minus.model", "model m {\n  x = " + repeat("- ", 100000) + "1\n}\n");
  EXPECT_NE(compile(minus).find("minus.model:2:405: error: expression or block nested too deeply"), std::string::npos);
  std::string pow = write("pow.model", "model m {\n  x = 1" + repeat(" ** 1", 100000) + "\n}\n");
  EXPECT_NE(compile(pow).find("pow.model:2:1004: error: expression or block nested too deeply"), std::string::npos);
}

TEST_F(Limits, LongOperatorChainIsRefusedWithoutRecursion) {
  std::string p = write("chain.model", "model m {\n  x = 1" + repeat(" + 1", 200000) + "\n}\n");
  std::string out = compile(p);
  EXPECT_NE(out.find("chain.model:2:7: error: expression nested too deeply (the limit is 1000 levels)"), std::string::npos) << out.substr(0, 300);
}

TEST_F(Limits, TenMegabytesOfStatementsEndInANodeLimitError) {
  // ~10 MB of valid statements: every one adds nodes, so elaboration must stop at its limit.
  // Under a sanitizer (tests/common/sanitizers.h) the file is 1/50 as long and a loop repeats
  // it past the same limit; TenMegabytesOfGarbage parses 10 MB there.
  const std::string stmts = repeat("  x = x * 1.5 + 0.25\n", test::full_or<size_t>(500000, 10000));
  const std::string body = test::kSanitized ? "model m(B) {\n  input x: f32[B]\n  for i in 0..100 {\n" + stmts + "  }\n  output x\n}\n"
                                            : "model m(B) {\n  input x: f32[B]\n" + stmts + "  output x\n}\n";
  if (!test::kSanitized) {
    ASSERT_GT(body.size(), 10u << 20);
  }
  std::string out = compile(write("big.model", body));
  EXPECT_NE(out.find("error: the model grows past 1000000 nodes after inlining and unrolling"), std::string::npos) << out.substr(0, 300);
}

TEST_F(Limits, TenMegabytesOfGarbageStopAtTheErrorLimit) {
  std::mt19937 gen(std::random_device{}());
  std::string junk;
  // No opening brackets: this exercises the parser's error recovery, not the nesting check.
  const char alphabet[] = "abc xyz)]}=+-*/@,.:;\n0123456789\"#$%";
  while (junk.size() < (10u << 20)) junk += alphabet[gen() % (sizeof(alphabet) - 1)];
  bool ok = true;
  std::string out = compile(write("junk.model", junk), &ok);
  EXPECT_FALSE(ok);
  // The parser reports what it cannot read and recovers; whatever it says is a located error.
  EXPECT_NE(out.find("junk.model:"), std::string::npos) << out.substr(0, 400);
  EXPECT_NE(out.find(": error: "), std::string::npos) << out.substr(0, 400);
}

TEST_F(Limits, OversizedFileIsRefusedBeforeReading) {
  std::string p = write("huge.model", std::string((16u << 20) + 1, ' '));
  EXPECT_NE(compile(p).find("is too large (16777217 bytes; a .model file may hold at most 16 MiB)"), std::string::npos);
}

TEST_F(Limits, DeepDefCallChainStops) {
  // 100 000 defs, each calling the next (2000 under a sanitizer: still far past the limit).
  const int n = test::full_or(100000, 2000);
  std::string text;
  for (int i = 0; i < n; ++i) text += "def f" + std::to_string(i) + "(x: f32[N]) { return f" + std::to_string(i + 1) + "(x) }\n";
  text += "def f" + std::to_string(n) + "(x: f32[N]) { return x }\nmodel m(B) {\n  input x: f32[B]\n  y = f0(x)\n  output y\n}\n";
  std::string out = compile(write("calls.model", text));
  EXPECT_NE(out.find("calls.model:64:29: error: def calls nested too deeply (the limit is 64)"), std::string::npos) << out.substr(0, 400);
}

TEST_F(Limits, HugeLoopIsRefused) {
  std::string p = write("loop.model", "model m(B) {\n  input x: f32[B]\n  for i in 0..1000000000 { x = x + 1.0 }\n  output x\n}\n");
  EXPECT_NE(compile(p).find("loop.model:3:12: error: loop of 1000000000 iterations is too long to unroll (the limit is 100000)"), std::string::npos);
}

TEST_F(Limits, ImportCycleAndMissingImport) {
  write("a.model", "import \"b.model\"\nmodel m(B) { input x: f32[B]\n output x }\n");
  write("b.model", "import \"a.model\"\n");
  std::string out = compile((dir_ / "a.model").string());
  EXPECT_NE(out.find("b.model:1:1: error: import cycle: a.model -> b.model -> a.model"), std::string::npos) << out;
  std::string p = write("c.model", "import \"nothere.model\"\nmodel m(B) { input x: f32[B]\n output x }\n");
  out = compile(p);
  EXPECT_NE(out.find("c.model:1:1: error: cannot open '"), std::string::npos) << out;
  EXPECT_NE(out.find("nothere.model': No such file or directory"), std::string::npos) << out;
}

TEST_F(Limits, ImportedDefsAreUsable) {
  write("lib.model", "def double(x: f32[N]) { return x * 2.0 }\nlet K = 3\n");
  std::string p = write("main.model", "import \"lib.model\"\nmodel m(B) {\n  input x: f32[B]\n  y = double(x) + K\n  output y\n}\n");
  bool ok = false;
  std::string out = compile(p, &ok);
  EXPECT_TRUE(ok) << out;
  EXPECT_EQ(out, "");
}

}  // namespace
}  // namespace modelc
