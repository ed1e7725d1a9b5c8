// The compiled-code cache (compiler/codegen/code_cache.h): its key changes with everything
// that changes the machine code, a damaged entry is compiled again and never loaded, and a
// model compiled from the cache trains exactly as one compiled from scratch. Also: the
// kernels a transformer's identical blocks emit are compiled once (one definition each, the
// others aliases), so the host module stops growing with the block count.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <random>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "compiler/codegen/code_cache.h"
#include "compiler/compile.h"
#include "compiler/pipeline.h"
#include "runtime/session/session.h"
#include "tests/train/torch_golden.h"

namespace modelc::test {
namespace {

namespace fs = std::filesystem;

// A private cache directory for one test, named in MODELC_CACHE_DIR while it lives.
struct ScopedCacheDir {
  fs::path dir;
  std::string old;
  bool had_old = false;
  ScopedCacheDir() {
    std::random_device rd;
    dir = fs::temp_directory_path() / fmt::format("modelc_cache_test_{}_{:x}", getpid(), rd());
    if (const char* o = std::getenv("MODELC_CACHE_DIR")) {
      old = o;
      had_old = true;
    }
    setenv("MODELC_CACHE_DIR", dir.c_str(), 1);
  }
  ~ScopedCacheDir() {
    if (had_old) setenv("MODELC_CACHE_DIR", old.c_str(), 1);
    else unsetenv("MODELC_CACHE_DIR");
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
  std::vector<fs::path> entries() const {
    std::vector<fs::path> out;
    std::error_code ec;
    for (const fs::directory_entry& e : fs::directory_iterator(dir, ec))
      if (e.path().extension() == ".o") out.push_back(e.path());
    return out;
  }
};

std::string read(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

void write(const fs::path& p, const std::string& bytes) { std::ofstream(p, std::ios::binary | std::ios::trunc) << bytes; }

CodeKey base_key() {
  return CodeKey{"define void @k() { ret void }", "x86_64-unknown-linux-gnu", "znver3", "+avx2,+fma",
                 "O3 pic veclib=1", "19.1.7", "0.1.0", "0123abcd"};
}

TEST(CodeCache, EveryPartOfTheKeyChangesIt) {
  std::string CodeKey::* const parts[] = {&CodeKey::ir,      &CodeKey::triple,       &CodeKey::cpu,
                                          &CodeKey::features, &CodeKey::options,     &CodeKey::llvm_version,
                                          &CodeKey::modelc_version, &CodeKey::build_id};
  const std::string base = code_key(base_key());
  EXPECT_EQ(base.size(), 64u);
  EXPECT_EQ(code_key(base_key()), base);  // deterministic
  std::set<std::string> keys = {base};
  for (std::string CodeKey::* part : parts) {
    CodeKey k = base_key();
    (k.*part) += " ";  // one more byte anywhere
    EXPECT_TRUE(keys.insert(code_key(k)).second);
    k = base_key();
    (k.*part).clear();
    EXPECT_TRUE(keys.insert(code_key(k)).second);
  }
  // The same bytes split between two parts differently: another key.
  CodeKey a = base_key(), b = base_key();
  a.ir = "ab";
  a.triple = "c";
  b.ir = "a";
  b.triple = "bc";
  EXPECT_NE(code_key(a), code_key(b));
}

TEST(CodeCache, StoresLoadsAndRejectsDamagedEntries) {
  ScopedCacheDir scoped;
  const CodeCache cache(scoped.dir.string());
  ASSERT_TRUE(cache.enabled());
  const std::string key = code_key(base_key());
  std::mt19937 rng(std::random_device{}());
  std::string payload(4096 + rng() % 4096, '\0');
  for (char& c : payload) c = static_cast<char>(rng());
  const CodeCacheStats before = CodeCache::stats();
  EXPECT_FALSE(cache.load(key));
  EXPECT_EQ(CodeCache::stats().misses, before.misses + 1);
  cache.store(key, payload);
  ASSERT_EQ(scoped.entries().size(), 1u);  // no temporary file left behind
  EXPECT_EQ(cache.load(key).value_or(""), payload);
  EXPECT_EQ(CodeCache::stats().hits, before.hits + 1);

  const std::string good = read(cache.entry_path(key));
  const std::vector<std::pair<const char*, std::string>> damaged = {
      {"a flipped payload byte", [&] { std::string s = good; s[s.size() - 1 - rng() % payload.size()] ^= 0x10; return s; }()},
      {"a truncated payload", good.substr(0, good.size() - 1)},
      {"a payload too long", good + "x"},
      {"a bad magic", "X" + good.substr(1)},
      {"a flipped checksum byte", [&] { std::string s = good; s[20] ^= 1; return s; }()},
      {"only half a header", good.substr(0, 20)},
      {"an empty file", ""}};
  for (const auto& [what, bytes] : damaged) {
    write(cache.entry_path(key), bytes);
    const uint64_t rejected = CodeCache::stats().rejected;
    EXPECT_FALSE(cache.load(key)) << what;
    EXPECT_EQ(CodeCache::stats().rejected, rejected + 1) << what;
    EXPECT_FALSE(fs::exists(cache.entry_path(key))) << what << ": the damaged entry was not removed";
  }
}

TEST(CodeCache, IsPrunedLeastRecentlyUsedFirst) {
  ScopedCacheDir scoped;
  const CodeCache cache(scoped.dir.string(), 3 * 1000 + 3 * 48 + 10);  // room for three entries of 1000 bytes
  std::vector<std::string> keys;
  for (int k = 0; k < 4; ++k) {
    CodeKey ck = base_key();
    ck.ir += std::to_string(k);
    keys.push_back(code_key(ck));
    cache.store(keys.back(), std::string(1000, static_cast<char>('a' + k)));
    // Entry 0 is used after entry 1 was written: entry 1 is then the least recently used.
    if (k == 1) {
      fs::last_write_time(cache.entry_path(keys[0]), fs::file_time_type::clock::now() - std::chrono::hours(1));
      fs::last_write_time(cache.entry_path(keys[1]), fs::file_time_type::clock::now() - std::chrono::hours(2));
      EXPECT_TRUE(cache.load(keys[0]));
    }
  }
  EXPECT_TRUE(fs::exists(cache.entry_path(keys[0])));
  EXPECT_FALSE(fs::exists(cache.entry_path(keys[1])));
  EXPECT_TRUE(fs::exists(cache.entry_path(keys[2])));
  EXPECT_TRUE(fs::exists(cache.entry_path(keys[3])));
}

TEST(CodeCache, TheEnvironmentNamesTheDirectory) {
  ScopedCacheDir scoped;
  EXPECT_EQ(CodeCache::from_environment().dir(), scoped.dir.string());
  setenv("MODELC_CACHE_DIR", "off", 1);
  EXPECT_FALSE(CodeCache::from_environment().enabled());
  const CodeCache off = CodeCache::from_environment();
  off.store("k", "bytes");  // a disabled cache stores nothing and finds nothing
  EXPECT_FALSE(off.load("k"));
  unsetenv("MODELC_CACHE_DIR");
  const char* home = std::getenv("HOME");
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  const std::string saved_home = home ? home : "", saved_xdg = xdg ? xdg : "";
  setenv("XDG_CACHE_HOME", "/x/cache", 1);
  EXPECT_EQ(CodeCache::from_environment().dir(), "/x/cache/modelc/kernels");
  unsetenv("XDG_CACHE_HOME");
  setenv("HOME", "/home/u", 1);
  EXPECT_EQ(CodeCache::from_environment().dir(), "/home/u/.cache/modelc/kernels");
  unsetenv("HOME");
  EXPECT_FALSE(CodeCache::from_environment().enabled());
  if (home) setenv("HOME", saved_home.c_str(), 1);
  if (xdg) setenv("XDG_CACHE_HOME", saved_xdg.c_str(), 1);
}

constexpr const char* kModel = R"(model mlp(B = 16) {
  param w1: f32[8, 12] = normal(std = 0.3)
  param w2: f32[12, 3] = normal(std = 0.3)
  input x: f32[B, 8]
  input y: i32[B]
  logits = relu(x @ w1) @ w2
  loss = cross_entropy(logits, y)
  output loss, logits
}
train mlp {
  optimizer = adam(lr = 0.05)
  batch = 16
}
)";

// Five train steps on fixed random data: the losses.
std::vector<float> train(const std::shared_ptr<rt::Program>& p, uint32_t seed) {
  std::vector<float> losses;
  if (!p) return losses;
  rt::Session s(p, {.threads = 1});
  std::mt19937 rng(seed);
  std::normal_distribution<float> n;
  rt::HostTensor x(rt::ElemType::F32, {16, 8}), y(rt::ElemType::I32, {16});
  for (int64_t i = 0; i < x.numel(); ++i) x.f32()[i] = n(rng);
  for (int64_t i = 0; i < y.numel(); ++i) y.i32()[i] = static_cast<int32_t>(rng() % 3);
  for (int step = 0; step < 5; ++step) losses.push_back(s.train_step({{"x", x}, {"y", y}}));
  return losses;
}

TEST(CodeCache, AModelCompiledFromTheCacheTrainsExactlyAsCompiled) {
  ScopedCacheDir scoped;
  const uint32_t seed = std::random_device{}();
  const CodeCacheStats s0 = CodeCache::stats();
  const std::vector<float> fresh = train(compile_model_text("mlp", kModel), seed);
  ASSERT_EQ(fresh.size(), 5u);
  const CodeCacheStats s1 = CodeCache::stats();
  EXPECT_EQ(s1.stored, s0.stored + 1);
  ASSERT_EQ(scoped.entries().size(), 1u);
  const fs::path entry = scoped.entries().front();

  EXPECT_EQ(train(compile_model_text("mlp", kModel), seed), fresh);  // bit for bit
  const CodeCacheStats s2 = CodeCache::stats();
  EXPECT_EQ(s2.hits, s1.hits + 1);
  EXPECT_EQ(s2.stored, s1.stored);

  // A damaged entry is compiled again (and replaced), never loaded.
  std::string bytes = read(entry);
  bytes[bytes.size() / 2] ^= 0x5a;
  write(entry, bytes);
  EXPECT_EQ(train(compile_model_text("mlp", kModel), seed), fresh);
  const CodeCacheStats s3 = CodeCache::stats();
  EXPECT_EQ(s3.rejected, s2.rejected + 1);
  EXPECT_EQ(s3.hits, s2.hits);
  EXPECT_EQ(s3.stored, s2.stored + 1);
  EXPECT_NE(read(entry), bytes);

  // The learning rate is an input of the step, not part of its code: the same entry.
  std::string other_lr = kModel;
  other_lr.replace(other_lr.find("lr = 0.05"), 9, "lr = 0.07");
  EXPECT_NE(train(compile_model_text("mlp", other_lr), seed), fresh);
  EXPECT_EQ(CodeCache::stats().hits, s3.hits + 1);
  EXPECT_EQ(scoped.entries().size(), 1u);

  // Another computation (a constant in the forward pass) is another entry.
  std::string other = kModel;
  other.replace(other.find("relu(x @ w1)"), 12, "relu(x @ w1) * 0.5");
  EXPECT_NE(train(compile_model_text("mlp", other), seed), fresh);
  EXPECT_EQ(scoped.entries().size(), 2u);
}

TEST(CodeCache, OffCompilesAndStoresNothing) {
  ScopedCacheDir scoped;
  setenv("MODELC_CACHE_DIR", "off", 1);
  const CodeCacheStats s0 = CodeCache::stats();
  EXPECT_EQ(train(compile_model_text("mlp", kModel), 7).size(), 5u);
  const CodeCacheStats s1 = CodeCache::stats();
  EXPECT_EQ(s1.stored, s0.stored);
  EXPECT_EQ(s1.hits + s1.misses + s1.rejected, s0.hits + s0.misses + s0.rejected);
  EXPECT_FALSE(fs::exists(scoped.dir));
}

// The host module of char_gpt with `blocks` blocks: its defined functions and its aliases.
std::pair<size_t, size_t> host_functions(const std::string& blocks) {
  Compilation comp(CompileOptions{.defines = {{"T", "8"}, {"C", "24"}, {"L", blocks}}});
  std::string text;
  ProgramOptions po;
  po.llvm_text = &text;
  EXPECT_TRUE(compile_program(comp, std::string(MODELC_SOURCE_DIR) + "/models/char_gpt.model", po))
      << comp.diags().render();
  size_t defines = 0, aliases = 0;
  for (size_t at = 0; (at = text.find('\n', at)) != std::string::npos; ++at) {
    defines += text.compare(at + 1, 7, "define ") == 0;
    const size_t eol = text.find('\n', at + 1);
    const std::string line = text.substr(at + 1, eol == std::string::npos ? std::string::npos : eol - at - 1);
    aliases += line.find(" = alias ") != std::string::npos;
  }
  return {defines, aliases};
}

// Every block of char_gpt emits the same kernels, and every parameter's optimizer update the
// same segment: a block more adds aliases, not code. (Numerics: every model test runs these
// kernels, tests/train and tests/fusion.)
TEST(IdenticalKernels, AreCompiledOnce) {
  const auto [defines2, aliases2] = host_functions("2");
  const auto [defines4, aliases4] = host_functions("4");
  EXPECT_EQ(defines4, defines2);
  EXPECT_GT(aliases4, aliases2);
  EXPECT_GT(aliases2, 0u);
}

}  // namespace
}  // namespace modelc::test
