// The compiled-code cache (compiler/codegen/code_cache.h): entries are `<key>.o` files with a
// checked header, written through a temporary file and a rename, pruned least recently used
// first (a hit refreshes the entry's modification time).
#include "compiler/codegen/code_cache.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <random>

#include <fmt/format.h>
#include <array>
#include <string>

#include <llvm/ADT/ArrayRef.h>
#include <llvm/Support/SHA256.h>

namespace modelc {
namespace {

namespace fs = std::filesystem;

constexpr char kMagic[8] = {'M', 'D', 'L', 'C', 'O', 'B', 'J', '1'};
constexpr size_t kHeader = sizeof(kMagic) + 8 + 32;  // magic, payload size, payload SHA-256

std::atomic<uint64_t> g_hits{0}, g_misses{0}, g_rejected{0}, g_stored{0};

std::array<uint8_t, 32> sha256(std::string_view bytes) {
  return llvm::SHA256::hash(
      llvm::ArrayRef<uint8_t>(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()));
}

std::string hex(const std::array<uint8_t, 32>& digest) {
  std::string s;
  for (uint8_t b : digest) s += fmt::format("{:02x}", b);
  return s;
}

void put_u64(std::string& s, uint64_t v) {
  for (int i = 0; i < 8; ++i) s += static_cast<char>((v >> (8 * i)) & 0xff);
}

uint64_t get_u64(const char* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= uint64_t{static_cast<unsigned char>(p[i])} << (8 * i);
  return v;
}

bool read_whole(const std::string& path, std::string& out) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  out.clear();
  char buf[1 << 16];
  for (;;) {
    const ssize_t n = read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      close(fd);
      return n == 0;
    }
    out.append(buf, static_cast<size_t>(n));
  }
}

bool write_whole(int fd, std::string_view bytes) {
  for (size_t done = 0; done < bytes.size();) {
    const ssize_t n = write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += static_cast<size_t>(n);
  }
  return true;
}

// Keeps the entries under max_bytes, removing the least recently used first, and removes
// temporary files a killed writer left behind (older than ten minutes).
void prune(const std::string& dir, uint64_t max_bytes) {
  struct Entry {
    fs::path path;
    fs::file_time_type time;
    uintmax_t size;
  };
  std::vector<Entry> entries;
  uint64_t total = 0;
  std::error_code ec;
  const auto now = fs::file_time_type::clock::now();
  for (const fs::directory_entry& e : fs::directory_iterator(dir, ec)) {
    std::error_code ec2;
    const std::string name = e.path().filename().string();
    const fs::file_time_type t = e.last_write_time(ec2);
    if (ec2) continue;
    if (name.find(".tmp.") != std::string::npos) {
      if (now - t > std::chrono::minutes(10)) fs::remove(e.path(), ec2);
      continue;
    }
    if (e.path().extension() != ".o") continue;
    const uintmax_t size = e.file_size(ec2);
    if (ec2) continue;
    entries.push_back({e.path(), t, size});
    total += size;
  }
  if (total <= max_bytes) return;
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) { return a.time < b.time; });
  for (const Entry& e : entries) {
    if (total <= max_bytes) break;
    std::error_code ec2;
    if (fs::remove(e.path, ec2)) total -= e.size;
  }
}

}  // namespace

std::string code_key(const CodeKey& k) {
  std::string bytes;
  const std::pair<const char*, const std::string*> fields[] = {
      {"ir", &k.ir},         {"triple", &k.triple},
      {"cpu", &k.cpu},       {"features", &k.features},
      {"options", &k.options}, {"llvm", &k.llvm_version},
      {"modelc", &k.modelc_version}, {"build", &k.build_id}};
  for (const auto& [label, value] : fields) {
    bytes += label;
    bytes += '\0';
    put_u64(bytes, value->size());
    bytes += *value;
  }
  return hex(sha256(bytes));
}

CodeCache CodeCache::from_environment() {
  const char* dir = std::getenv("MODELC_CACHE_DIR");
  if (dir && *dir) return CodeCache(std::string_view(dir) == "off" ? "" : dir);
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  if (xdg && *xdg == '/') return CodeCache((fs::path(xdg) / "modelc" / "kernels").string());
  const char* home = std::getenv("HOME");
  if (home && *home == '/') return CodeCache((fs::path(home) / ".cache" / "modelc" / "kernels").string());
  return CodeCache("");
}

CodeCache::CodeCache(std::string dir, uint64_t max_bytes) : dir_(std::move(dir)), max_bytes_(max_bytes) {}

std::string CodeCache::entry_path(const std::string& key) const { return (fs::path(dir_) / (key + ".o")).string(); }

std::optional<std::string> CodeCache::load(const std::string& key) const {
  if (!enabled()) return std::nullopt;
  const std::string path = entry_path(key);
  std::string bytes;
  if (!read_whole(path, bytes)) {
    ++g_misses;
    return std::nullopt;
  }
  const bool sound = bytes.size() >= kHeader && std::memcmp(bytes.data(), kMagic, sizeof kMagic) == 0 &&
                     get_u64(bytes.data() + sizeof kMagic) == bytes.size() - kHeader &&
                     std::memcmp(bytes.data() + sizeof kMagic + 8, sha256(std::string_view(bytes).substr(kHeader)).data(),
                                 32) == 0;
  if (!sound) {
    ++g_rejected;
    std::error_code ec;
    fs::remove(path, ec);
    return std::nullopt;
  }
  ++g_hits;
  utimensat(AT_FDCWD, path.c_str(), nullptr, 0);  // recently used
  return bytes.substr(kHeader);
}

void CodeCache::store(const std::string& key, std::string_view payload) const {
  if (!enabled()) return;
  std::error_code ec;
  fs::create_directories(dir_, ec);
  if (ec) return;
  std::string bytes(kMagic, sizeof kMagic);
  put_u64(bytes, payload.size());
  const std::array<uint8_t, 32> digest = sha256(payload);
  bytes.append(reinterpret_cast<const char*>(digest.data()), digest.size());
  bytes += payload;
  const std::string path = entry_path(key);
  const std::string tmp = fmt::format("{}.tmp.{}.{:x}", path, getpid(), std::random_device{}());
  const int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) return;
  const bool written = write_whole(fd, bytes);
  if (close(fd) != 0 || !written || rename(tmp.c_str(), path.c_str()) != 0) {
    unlink(tmp.c_str());
    return;
  }
  ++g_stored;
  prune(dir_, max_bytes_);
}

CodeCacheStats CodeCache::stats() {
  return CodeCacheStats{g_hits.load(), g_misses.load(), g_rejected.load(), g_stored.load()};
}

}  // namespace modelc
