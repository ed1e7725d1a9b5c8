// safetensors checkpoints: round trips of random tensors, the file layout, every kind of
// corrupt file, atomic replacement (a failed write leaves the old file and no temporary),
// and checking a checkpoint against what the model expects.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <sys/resource.h>

#include <csignal>
#include <nlohmann/json.hpp>

#include "runtime/session/checkpoint.h"
#include "tests/data/data_test_util.h"

namespace modelc::rt {
namespace {

using testing::expect_error;
using testing::TempDir;

HostTensor random_tensor(std::mt19937_64& rng, ElemType t, std::vector<int64_t> shape) {
  HostTensor x(t, std::move(shape));
  for (auto& b : x.bytes) b = static_cast<uint8_t>(rng());
  if (t == ElemType::Bool)
    for (auto& b : x.bytes) b &= 1;
  return x;
}

NamedTensors random_tensors(std::mt19937_64& rng) {
  NamedTensors ts;
  const ElemType types[] = {ElemType::F32, ElemType::F16, ElemType::BF16, ElemType::I32, ElemType::Bool};
  const int n = static_cast<int>(rng() % 6) + 3;
  for (int i = 0; i < n; ++i) {
    std::vector<int64_t> shape;
    const int rank = static_cast<int>(rng() % 4);
    for (int d = 0; d < rank; ++d) shape.push_back(static_cast<int64_t>(rng() % 6) + 1);
    ts.emplace_back(fmt::format("block.{}.linear.w", i), random_tensor(rng, types[rng() % 5], shape));
  }
  ts.emplace_back("empty", HostTensor(ElemType::F32, {0, 3}));
  ts.emplace_back("scalar", random_tensor(rng, ElemType::F32, {}));
  return ts;
}

std::vector<std::string> dir_entries(const TempDir& dir) {
  std::vector<std::string> out;
  for (const auto& e : std::filesystem::directory_iterator(dir.path())) out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

// A file with a hand-written header (and its true length) followed by `data`.
void craft(const std::string& path, const std::string& header, const std::vector<uint8_t>& data, int64_t len = -1) {
  std::vector<uint8_t> b(8);
  const uint64_t n = len < 0 ? header.size() : static_cast<uint64_t>(len);
  for (int i = 0; i < 8; ++i) b[static_cast<size_t>(i)] = static_cast<uint8_t>(n >> (8 * i));
  b.insert(b.end(), header.begin(), header.end());
  b.insert(b.end(), data.begin(), data.end());
  testing::write_file(path, b);
}

TEST(Checkpoint, RoundTripsRandomTensorsAndMetadata) {
  auto rng = testing::test_rng(11);
  TempDir dir;
  for (int trial = 0; trial < 5; ++trial) {
    NamedTensors ts = random_tensors(rng);
    std::map<std::string, std::string> meta = {{"model", "fashion_mlp"}, {"step", std::to_string(rng() % 100000)},
                                               {"quote\"and\\slash", "caf\xc3\xa9 \n tab\t"}};
    const std::string path = dir / "ck.safetensors";
    save_checkpoint(path, ts, trial == 0 ? std::map<std::string, std::string>{} : meta);
    Checkpoint ck = load_checkpoint(path);
    EXPECT_EQ(ck.path, path);
    ASSERT_EQ(ck.tensors.size(), ts.size());
    for (size_t i = 0; i < ts.size(); ++i) {
      EXPECT_EQ(ck.tensors[i].first, ts[i].first);
      EXPECT_EQ(ck.tensors[i].second.type, ts[i].second.type);
      EXPECT_EQ(ck.tensors[i].second.shape, ts[i].second.shape);
      EXPECT_EQ(ck.tensors[i].second.bytes, ts[i].second.bytes) << ts[i].first;
    }
    EXPECT_EQ(ck.metadata, (trial == 0 ? std::map<std::string, std::string>{} : meta));
    ASSERT_NE(ck.find("scalar"), nullptr);
    EXPECT_EQ(ck.find("nope"), nullptr);
    EXPECT_EQ(dir_entries(dir), std::vector<std::string>{"ck.safetensors"});
  }
}

TEST(Checkpoint, WritesTheSafetensorsLayout) {
  TempDir dir;
  HostTensor w(ElemType::F32, {2, 3}), b(ElemType::I32, {3});
  for (int i = 0; i < 6; ++i) w.f32()[i] = static_cast<float>(i) * 0.5f;
  for (int i = 0; i < 3; ++i) b.i32()[i] = -i;
  save_checkpoint(dir / "x.safetensors", {{"fc1.w", w}, {"fc1.b", b}}, {{"format", "pt"}});
  auto bytes = testing::read_file(dir / "x.safetensors");
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= uint64_t{bytes[static_cast<size_t>(i)]} << (8 * i);
  EXPECT_EQ(n % 8, 0u);
  ASSERT_EQ(bytes.size(), 8 + n + 24 + 12);
  auto h = nlohmann::json::parse(bytes.begin() + 8, bytes.begin() + 8 + static_cast<std::ptrdiff_t>(n));
  EXPECT_EQ(h["fc1.w"]["dtype"], "F32");
  EXPECT_EQ(h["fc1.w"]["shape"], nlohmann::json({2, 3}));
  EXPECT_EQ(h["fc1.w"]["data_offsets"], nlohmann::json({0, 24}));
  EXPECT_EQ(h["fc1.b"]["dtype"], "I32");
  EXPECT_EQ(h["fc1.b"]["data_offsets"], nlohmann::json({24, 36}));
  EXPECT_EQ(h["__metadata__"]["format"], "pt");
  EXPECT_EQ(std::memcmp(bytes.data() + 8 + n, w.bytes.data(), 24), 0);
  EXPECT_EQ(std::memcmp(bytes.data() + 8 + n + 24, b.bytes.data(), 12), 0);
}

TEST(Checkpoint, RejectsEveryTruncation) {
  auto rng = testing::test_rng(12);
  TempDir dir;
  const std::string good = dir / "good.safetensors", cut = dir / "cut.safetensors";
  save_checkpoint(good, random_tensors(rng), {{"k", "v"}});
  const auto bytes = testing::read_file(good);
  for (int trial = 0; trial < 40; ++trial) {
    const size_t at = trial == 0 ? 0 : trial == 1 ? 7 : rng() % bytes.size();
    testing::write_file(cut, std::vector<uint8_t>(bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(at)));
    expect_error<CheckpointError>([&] { load_checkpoint(cut); }, {cut});
  }
  auto longer = bytes;
  longer.push_back(0);
  testing::write_file(cut, longer);
  expect_error<CheckpointError>([&] { load_checkpoint(cut); }, {cut, "1 trailing bytes after the last tensor's data"});
}

TEST(Checkpoint, RejectsFlippedHeaderBytes) {
  auto rng = testing::test_rng(13);
  TempDir dir;
  const std::string good = dir / "good.safetensors", bad = dir / "bad.safetensors";
  save_checkpoint(good, random_tensors(rng), {{"step", "12"}});
  const auto bytes = testing::read_file(good);
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= uint64_t{bytes[static_cast<size_t>(i)]} << (8 * i);
  for (int trial = 0; trial < 60; ++trial) {
    auto b = bytes;
    const size_t at = trial < 8 ? static_cast<size_t>(trial) : 8 + rng() % n;  // the length, then the JSON
    b[at] ^= 0xFF;  // ASCII becomes a byte >= 0x80: never valid UTF-8 on its own
    testing::write_file(bad, b);
    expect_error<CheckpointError>([&] { load_checkpoint(bad); }, {bad});
  }
}

TEST(Checkpoint, RejectsMalformedHeaders) {
  TempDir dir;
  const std::string p = dir / "m.safetensors";
  const std::vector<uint8_t> d8(8, 0);
  auto check = [&](const std::string& header, const std::vector<uint8_t>& data, const std::vector<std::string>& parts, int64_t len = -1) {
    craft(p, header, data, len);
    std::vector<std::string> all = parts;
    all.push_back(p);
    expect_error<CheckpointError>([&] { load_checkpoint(p); }, all);
  };
  testing::write_file(p, std::vector<uint8_t>{1, 2, 3});
  expect_error<CheckpointError>([&] { load_checkpoint(p); }, {p, "file too short (3 bytes)"});
  check("{}", {}, {"header length 1152921504606846976 is absurd"}, int64_t{1} << 60);
  check("{}", {}, {"header length 50 runs past the end of the file (10 bytes)"}, 50);
  check("{not json", {}, {"invalid JSON header"});
  check("[1,2]", {}, {"the JSON header is not an object"});
  check(R"({"a":{"dtype":"F64","shape":[1],"data_offsets":[0,8]}})", d8, {"tensor 'a'", "unknown or unsupported dtype 'F64'"});
  check(R"({"a":{"dtype":"Q7","shape":[1],"data_offsets":[0,8]}})", d8, {"tensor 'a'", "dtype 'Q7'"});
  check(R"({"a":{"shape":[1],"data_offsets":[0,8]}})", d8, {"tensor 'a'", "missing or non-string dtype"});
  check(R"({"a":{"dtype":"F32","data_offsets":[0,8]}})", d8, {"tensor 'a'", "missing shape"});
  check(R"({"a":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", d8, {"tensor 'a'", "not a list of non-negative integers"});
  check(R"({"a":{"dtype":"F32","shape":[1.5],"data_offsets":[0,8]}})", d8, {"tensor 'a'", "not a list of non-negative integers"});
  check(R"({"a":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,8]}})", d8, {"tensor 'a'", "absurdly large"});
  // 2^62 elements pass the element-count limit, but 2^62 F32s are 2^64 bytes: 0 once wrapped,
  // which empty data_offsets would have matched (tests/fuzz/checkpoint_regressions).
  check(R"({"a":{"dtype":"F32","shape":[4611686018427387904],"data_offsets":[0,0]}})", {}, {"tensor 'a'", "byte count overflows"});
  check(R"({"a":{"dtype":"I32","shape":[2147483648,2147483648],"data_offsets":[0,0]}})", {}, {"tensor 'a'", "byte count overflows"});
  check(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", d8, {"tensor 'a'", "shape [3] of F32 needs 12 bytes, data_offsets [0,8] give 8"});
  check(R"({"a":{"dtype":"F32","shape":[2]}})", d8, {"tensor 'a'", "data_offsets must be [begin, end]"});
  check(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8,9]}})", d8, {"tensor 'a'", "data_offsets must be"});
  check(R"({"a":{"dtype":"F32","shape":[0],"data_offsets":[8,0]}})", d8, {"tensor 'a'", "end before they begin"});
  check(R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", d8, {"tensor 'a'", "run past the end of the data (8 bytes)"});
  check(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", d8,
        {"tensor 'b'", "data_offsets [4,8] overlap tensor 'a' (which ends at 8)"});
  check(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", d8, {"tensor 'a'", "leaving a gap of 4 bytes after the header"});
  check(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"b":{"dtype":"BOOL","shape":[2],"data_offsets":[6,8]}})", d8,
        {"tensor 'b'", "gap of 2 bytes after tensor 'a'"});
  check(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", d8, {"4 trailing bytes"});
  check(R"({"a":{"dtype":"BOOL","shape":[2],"data_offsets":[0,2]}})", {0, 2}, {"tensor 'a'", "BOOL element 1 is 2, not 0 or 1"});
  check(R"({"a":7})", {}, {"tensor 'a'", "the header entry is not an object"});
  check(R"({"__metadata__":{"k":1}})", {}, {"__metadata__ entry 'k' is not a string"});
  check(R"({"__metadata__":[1]})", {}, {"__metadata__ is not an object"});
  expect_error<CheckpointError>([&] { load_checkpoint(dir / "none.safetensors"); }, {"none.safetensors", "cannot open"});
  expect_error<CheckpointError>([&] { load_checkpoint(dir.path().string()); }, {"is a directory"});
  // Offsets listed out of order are fine when they tile the data.
  craft(p, R"({"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]},"a":{"dtype":"I32","shape":[1],"data_offsets":[0,4]}})", d8);
  Checkpoint ck = load_checkpoint(p);
  ASSERT_EQ(ck.tensors.size(), 2u);
  EXPECT_EQ(ck.tensors[0].first, "b");
}

TEST(Checkpoint, ReplacesAtomicallyAndCleansUpOnFailure) {
  auto rng = testing::test_rng(14);
  TempDir dir;
  const std::string path = dir / "ck.safetensors";
  save_checkpoint(path, {{"w", random_tensor(rng, ElemType::F32, {4})}}, {{"v", "1"}});
  save_checkpoint(path, {{"w", random_tensor(rng, ElemType::F32, {5})}}, {{"v", "2"}});
  EXPECT_EQ(load_checkpoint(path).metadata.at("v"), "2");
  const auto before = testing::read_file(path);
  auto intact = [&] {
    EXPECT_EQ(testing::read_file(path), before);
    EXPECT_EQ(dir_entries(dir), std::vector<std::string>{"ck.safetensors"});
  };
  // A write that fails half-way: the file-size limit stops it after 64 KiB.
  {
    rlimit old{};
    ASSERT_EQ(getrlimit(RLIMIT_FSIZE, &old), 0);
    auto old_handler = std::signal(SIGXFSZ, SIG_IGN);
    rlimit small = old;
    small.rlim_cur = 64 << 10;
    ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &small), 0);
    bool threw = false;
    try {
      save_checkpoint(path, {{"w", random_tensor(rng, ElemType::F32, {1 << 18})}});
    } catch (const CheckpointError& e) {
      threw = true;
      EXPECT_NE(std::string(e.what()).find(path + ": cannot write"), std::string::npos) << e.what();
    }
    setrlimit(RLIMIT_FSIZE, &old);
    std::signal(SIGXFSZ, old_handler);
    EXPECT_TRUE(threw);
    intact();
  }
  // Bad tensors are refused before anything is written.
  expect_error<CheckpointError>([&] { save_checkpoint(path, {{"a", HostTensor(ElemType::F32, {1})}, {"a", HostTensor(ElemType::F32, {1})}}); },
                                {path, "tensor 'a' appears twice"});
  expect_error<CheckpointError>([&] { save_checkpoint(path, {{"", HostTensor(ElemType::F32, {1})}}); }, {"invalid tensor name ''"});
  expect_error<CheckpointError>([&] { save_checkpoint(path, {{"__metadata__", HostTensor(ElemType::F32, {1})}}); }, {"invalid tensor name"});
  expect_error<CheckpointError>([&] { save_checkpoint(path, {{"w\xff", HostTensor(ElemType::F32, {1})}}); }, {path, "not valid UTF-8"});
  expect_error<CheckpointError>([&] { save_checkpoint(path, {}, {{"k", "\xc3"}}); }, {path, "not valid UTF-8"});
  HostTensor wrong(ElemType::F32, {3});
  wrong.bytes.pop_back();
  expect_error<CheckpointError>([&] { save_checkpoint(path, {{"w", wrong}}); }, {"tensor 'w' of shape [3] holds 11 bytes, its shape needs 12"});
  HostTensor neg;
  neg.shape = {-1};
  expect_error<CheckpointError>([&] { save_checkpoint(path, {{"w", neg}}); }, {"tensor 'w' has a negative dimension"});
  intact();
  // The rename fails when the target is a non-empty directory: the temporary is removed.
  std::filesystem::create_directories(dir / "sub/x");
  expect_error<CheckpointError>([&] { save_checkpoint(dir / "sub", {{"w", HostTensor(ElemType::F32, {2})}}); }, {"sub", "cannot replace"});
  EXPECT_EQ(dir_entries(dir), (std::vector<std::string>{"ck.safetensors", "sub"}));
  std::filesystem::remove_all(dir / "sub");
  expect_error<CheckpointError>([&] { save_checkpoint(dir / "no/ck", {}); }, {"no/ck", "cannot create a temporary file"});
  // An unwritable directory (root writes anyway, so only checked for other users).
  if (::geteuid() != 0) {
    std::filesystem::permissions(dir.path(), std::filesystem::perms::owner_read | std::filesystem::perms::owner_exec);
    expect_error<CheckpointError>([&] { save_checkpoint(path, {{"w", HostTensor(ElemType::F32, {2})}}); }, {path, "cannot create"});
    std::filesystem::permissions(dir.path(), std::filesystem::perms::owner_all);
    intact();
  } else {
    std::fprintf(stderr, "running as root: the read-only directory case is covered by the file-size limit case\n");
  }
}

TEST(Checkpoint, ChecksAgainstTheModel) {
  TempDir dir;
  const std::string path = dir / "ckpt.safetensors";
  save_checkpoint(path, {{"fc1.w", HostTensor(ElemType::F32, {784, 128})},
                         {"fc1.b", HostTensor(ElemType::BF16, {128})},
                         {"old.w", HostTensor(ElemType::F32, {1})}});
  Checkpoint ck = load_checkpoint(path);
  const std::vector<TensorSpec> model = {{"fc1.w", ElemType::F32, {784, 256}},
                                         {"fc1.b", ElemType::F32, {128}},
                                         {"fc2.b", ElemType::F32, {10}}};
  expect_error<CheckpointError>([&] { check_against(ck, model); },
                                {path + ": tensor 'fc1.w' has shape [784,128], the model expects [784,256]",
                                 path + ": tensor 'fc1.b' is BF16, the model expects F32", path + ": missing tensor 'fc2.b'",
                                 path + ": unexpected tensor 'old.w'"});
  try {
    check_against(ck, model, true);
  } catch (const CheckpointError& e) {
    EXPECT_EQ(std::string(e.what()).find("old.w"), std::string::npos);
  }
  EXPECT_NO_THROW(check_against(ck, {{"fc1.w", ElemType::F32, {784, 128}}, {"fc1.b", ElemType::BF16, {128}},
                                     {"old.w", ElemType::F32, {1}}}));
}

}  // namespace
}  // namespace modelc::rt

namespace modelc::rt {
namespace {

// Metadata numbers are read whole: every text that is not exactly a decimal number in range
// is refused naming the file and the field (a step of "5.5" was read as 5, one too large for
// int64 gave stoll's bare message).
TEST(Checkpoint, ReadsMetadataNumbersStrictly) {
  Checkpoint c;
  c.path = "run/ck.safetensors";
  c.metadata = {{"step", "42"}, {"seed", "18446744073709551615"}, {"zero", "0"}, {"padded", "007"}};
  EXPECT_EQ(c.count("step"), 42);
  EXPECT_EQ(c.count("zero"), 0);
  EXPECT_EQ(c.count("padded"), 7);
  EXPECT_EQ(c.seed("seed"), UINT64_MAX);
  EXPECT_TRUE(c.has("step"));
  EXPECT_FALSE(c.has("epoch"));
  for (const char* bad : {"5.5", "-1", "+5", " 5", "5 ", "1e3", "0x10", "", "9223372036854775808", "abc", "5\n"}) {
    c.metadata["step"] = bad;
    try {
      (void)c.count("step");
      ADD_FAILURE() << "step '" << bad << "' was accepted";
    } catch (const CheckpointError& e) {
      EXPECT_NE(std::string(e.what()).find("run/ck.safetensors: metadata 'step' is \""), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("not a whole number from 0 to"), std::string::npos) << e.what();
    }
  }
  c.metadata["seed"] = "18446744073709551616";
  EXPECT_THROW((void)c.seed("seed"), CheckpointError);
  try {
    (void)c.count("epoch");
    ADD_FAILURE() << "a missing field was accepted";
  } catch (const CheckpointError& e) {
    EXPECT_STREQ(e.what(), "run/ck.safetensors: metadata has no 'epoch'");
  }
}

}  // namespace
}  // namespace modelc::rt
