// Helpers of the data and checkpoint tests: the seed (printed; MODELC_TEST_SEED overrides),
// a temporary directory removed afterwards, and writers of small plain and gzip'd files.
#pragma once

#include <gtest/gtest.h>
#include <zlib.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

namespace modelc::rt::testing {

// The tests' random seed: MODELC_TEST_SEED when set, else fresh; printed once per process
// so that a failure can be replayed.
inline uint64_t test_seed() {
  static const uint64_t seed = [] {
    const char* e = std::getenv("MODELC_TEST_SEED");
    uint64_t s = e ? std::strtoull(e, nullptr, 0) : (uint64_t{std::random_device{}()} << 32 | std::random_device{}());
    std::fprintf(stderr, "data tests: MODELC_TEST_SEED=%llu\n", static_cast<unsigned long long>(s));
    return s;
  }();
  return seed;
}

// A generator seeded from the test seed and `salt` (so that tests draw independent data).
inline std::mt19937_64 test_rng(uint64_t salt = 0) { return std::mt19937_64(test_seed() * 0x9E3779B97F4A7C15ull + salt); }

class TempDir {
 public:
  TempDir() {
    std::string t = (std::filesystem::temp_directory_path() / "modelc-data-XXXXXX").string();
    if (!::mkdtemp(t.data())) throw std::runtime_error("mkdtemp failed");
    path_ = t;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::permissions(path_, std::filesystem::perms::owner_all, std::filesystem::perm_options::add, ec);
    std::filesystem::remove_all(path_, ec);
  }
  std::string operator/(const std::string& name) const { return (path_ / name).string(); }
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

inline void write_file(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream f(path, std::ios::binary);
  f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  if (!f) throw std::runtime_error("cannot write " + path);
}

inline void write_file(const std::string& path, const std::string& text) {
  write_file(path, std::vector<uint8_t>(text.begin(), text.end()));
}

inline void write_gzip(const std::string& path, const std::vector<uint8_t>& bytes) {
  gzFile f = gzopen(path.c_str(), "wb");
  if (!f) throw std::runtime_error("cannot write " + path);
  if (!bytes.empty() && gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size())) != static_cast<int>(bytes.size()))
    throw std::runtime_error("gzwrite failed");
  gzclose(f);
}

inline std::vector<uint8_t> read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(f), {});
}

// An IDX file of unsigned bytes: magic 0x0000 08 ndim, big-endian dims, then the data.
inline std::vector<uint8_t> idx_bytes(const std::vector<uint32_t>& dims, const std::vector<uint8_t>& data) {
  std::vector<uint8_t> b = {0, 0, 0x08, static_cast<uint8_t>(dims.size())};
  for (uint32_t d : dims)
    for (int s = 24; s >= 0; s -= 8) b.push_back(static_cast<uint8_t>(d >> s));
  b.insert(b.end(), data.begin(), data.end());
  return b;
}

// Expects `f` to throw E whose message contains every one of `parts`.
template <typename E, typename F>
void expect_error(F&& f, const std::vector<std::string>& parts) {
  try {
    f();
    ADD_FAILURE() << "no exception; expected one mentioning '" << (parts.empty() ? "" : parts[0]) << "'";
  } catch (const E& e) {
    std::string msg = e.what();
    for (const std::string& p : parts) EXPECT_NE(msg.find(p), std::string::npos) << "message: " << msg << "\nmissing: " << p;
  }
}

}  // namespace modelc::rt::testing
