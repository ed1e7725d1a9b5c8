// safetensors writing (atomic: temporary file, fsync, rename, directory fsync) and reading
// (every field validated before a byte of tensor data is trusted).
#include "runtime/base/error.h"
#include "runtime/base/tensor.h"
#include "runtime/session/checkpoint.h"
#include "runtime/session/temp_files.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <climits>
#include <cstdint>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>

namespace modelc::rt {

namespace {

using json = nlohmann::ordered_json;

constexpr uint64_t kMaxHeader = 100u << 20;  // safetensors' own limit: 100 MB


bool parse_dtype(const std::string& s, ElemType& t) {
  static const std::pair<const char*, ElemType> kTypes[] = {
      {"F32", ElemType::F32}, {"F16", ElemType::F16}, {"BF16", ElemType::BF16}, {"I32", ElemType::I32}, {"BOOL", ElemType::Bool}};
  for (const auto& [name, type] : kTypes)
    if (s == name) {
      t = type;
      return true;
    }
  return false;
}

// Closes the descriptor and removes the temporary file unless released.
struct TempFile {
  std::string path;
  int fd = -1;
  ~TempFile() {
    if (fd >= 0) ::close(fd);
    if (!path.empty()) ::unlink(path.c_str());
  }
};

void write_all(int fd, const uint8_t* p, size_t n, const std::string& path) {
  while (n > 0) {
    ssize_t w = ::write(fd, p, std::min<size_t>(n, size_t{1} << 30));
    if (w < 0) {
      if (errno == EINTR) continue;
      throw CheckpointError(fmt::format("{}: cannot write: {}", path, std::strerror(errno)));
    }
    p += w;
    n -= static_cast<size_t>(w);
  }
}

}  // namespace

const char* safetensors_dtype(ElemType t) {
  switch (t) {
    case ElemType::F32: return "F32";
    case ElemType::F16: return "F16";
    case ElemType::BF16: return "BF16";
    case ElemType::I32: return "I32";
    case ElemType::Bool: return "BOOL";
  }
  return "?";
}

const HostTensor* Checkpoint::find(const std::string& name) const {
  for (const auto& [n, t] : tensors)
    if (n == name) return &t;
  return nullptr;
}

const std::string& Checkpoint::text(const std::string& key) const {
  auto it = metadata.find(key);
  if (it == metadata.end()) throw CheckpointError(fmt::format("{}: metadata has no '{}'", path, key));
  return it->second;
}

namespace {

// The digits of `s` as an unsigned number no larger than `max`, or a CheckpointError naming
// the file, the field, the text and what it should be.
uint64_t metadata_number(const Checkpoint& c, const std::string& key, uint64_t max, const char* what) {
  const std::string& s = c.text(key);
  uint64_t v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  const bool digits = !s.empty() && std::all_of(s.begin(), s.end(), [](char ch) { return ch >= '0' && ch <= '9'; });
  if (!digits || ec != std::errc() || end != s.data() + s.size() || v > max) {
    std::string shown = s.size() > 40 ? s.substr(0, 40) + "..." : s;
    for (char& ch : shown)
      if (static_cast<unsigned char>(ch) < 0x20) ch = '?';
    throw CheckpointError(fmt::format("{}: metadata '{}' is \"{}\", not {}", c.path, key, shown, what));
  }
  return v;
}

}  // namespace

int64_t Checkpoint::count(const std::string& key) const {
  return static_cast<int64_t>(metadata_number(*this, key, static_cast<uint64_t>(INT64_MAX),
                                              "a whole number from 0 to 9223372036854775807"));
}

uint64_t Checkpoint::seed(const std::string& key) const {
  return metadata_number(*this, key, UINT64_MAX, "a whole number from 0 to 18446744073709551615");
}

void save_checkpoint(const std::string& path, const NamedTensors& tensors, const std::map<std::string, std::string>& metadata) {
  json header = json::object();
  if (!metadata.empty()) {
    json m = json::object();
    for (const auto& [k, v] : metadata) m[k] = v;
    header["__metadata__"] = std::move(m);
  }
  std::set<std::string> seen;
  uint64_t offset = 0;
  for (const auto& [name, t] : tensors) {
    if (name.empty() || name == "__metadata__")
      throw CheckpointError(fmt::format("{}: invalid tensor name '{}'", path, name));
    if (!seen.insert(name).second) throw CheckpointError(fmt::format("{}: tensor '{}' appears twice", path, name));
    for (int64_t d : t.shape)
      if (d < 0) throw CheckpointError(fmt::format("{}: tensor '{}' has a negative dimension in {}", path, name, t.shape_str()));
    const uint64_t want = static_cast<uint64_t>(t.numel()) * dtype_bytes(t.type);
    if (t.bytes.size() != want)
      throw CheckpointError(fmt::format("{}: tensor '{}' of shape {} holds {} bytes, its shape needs {}", path, name,
                                        t.shape_str(), t.bytes.size(), want));
    header[name] = {{"dtype", safetensors_dtype(t.type)}, {"shape", t.shape}, {"data_offsets", {offset, offset + want}}};
    offset += want;
  }
  std::string text;
  try {
    text = header.dump();
  } catch (const json::exception&) {
    throw CheckpointError(fmt::format("{}: a tensor name or metadata string is not valid UTF-8", path));
  }
  text.append((8 - text.size() % 8) % 8, ' ');
  uint8_t len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<uint8_t>(static_cast<uint64_t>(text.size()) >> (8 * i));

  namespace fs = std::filesystem;
  const fs::path target(path);
  const fs::path dir = target.has_parent_path() ? target.parent_path() : fs::path(".");
  // What killed writers left beside the target first (runtime/session/temp_files.h).
  const std::string prefix = "." + target.filename().string() + ".tmp.";
  remove_stale_temporaries(dir, prefix);
  TempFile tmp;
  std::string templ = (dir / (temp_prefix(prefix) + "XXXXXX")).string();
  tmp.fd = ::mkstemp(templ.data());
  if (tmp.fd < 0) throw CheckpointError(fmt::format("{}: cannot create a temporary file in {}: {}", path, dir.string(), std::strerror(errno)));
  tmp.path = templ;
  ::fchmod(tmp.fd, 0644);
  write_all(tmp.fd, len, 8, path);
  write_all(tmp.fd, reinterpret_cast<const uint8_t*>(text.data()), text.size(), path);
  for (const auto& [name, t] : tensors) write_all(tmp.fd, t.bytes.data(), t.bytes.size(), path);
  if (::fsync(tmp.fd) != 0) throw CheckpointError(fmt::format("{}: fsync failed: {}", path, std::strerror(errno)));
  int fd = tmp.fd;
  tmp.fd = -1;
  if (::close(fd) != 0) throw CheckpointError(fmt::format("{}: cannot write: {}", path, std::strerror(errno)));
  if (::rename(tmp.path.c_str(), path.c_str()) != 0)
    throw CheckpointError(fmt::format("{}: cannot replace the file: {}", path, std::strerror(errno)));
  tmp.path.clear();  // renamed: nothing to remove
  int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (dfd >= 0) {
    int rc = ::fsync(dfd);
    int err = errno;
    ::close(dfd);
    if (rc != 0 && err != EINVAL)
      throw CheckpointError(fmt::format("{}: fsync of the directory failed: {}", path, std::strerror(err)));
  }
}

// Long by design: the checks of a safetensors file in the order its bytes come.
Checkpoint load_checkpoint(const std::string& path) {
  Checkpoint ck;
  ck.path = path;
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) throw CheckpointError(path + ": is a directory, not a checkpoint");
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) throw CheckpointError(fmt::format("{}: cannot open: {}", path, std::strerror(errno)));
  std::vector<uint8_t> bytes;
  uint8_t buf[1 << 16];
  for (size_t n; (n = std::fread(buf, 1, sizeof buf, f)) > 0;) bytes.insert(bytes.end(), buf, buf + n);
  const bool bad = std::ferror(f);
  std::fclose(f);
  if (bad) throw CheckpointError(path + ": read error");

  if (bytes.size() < 8)
    throw CheckpointError(fmt::format("{}: file too short ({} bytes): not a safetensors checkpoint", path, bytes.size()));
  uint64_t hlen = 0;
  for (int i = 0; i < 8; ++i) hlen |= static_cast<uint64_t>(bytes[static_cast<size_t>(i)]) << (8 * i);
  if (hlen > kMaxHeader)
    throw CheckpointError(fmt::format("{}: header length {} is absurd (limit {}): not a safetensors checkpoint", path, hlen, kMaxHeader));
  if (hlen > bytes.size() - 8)
    throw CheckpointError(fmt::format("{}: header length {} runs past the end of the file ({} bytes): truncated?", path, hlen, bytes.size()));
  const char* hp = reinterpret_cast<const char*>(bytes.data() + 8);
  json header;
  try {
    header = json::parse(hp, hp + hlen);
  } catch (const json::exception& e) {
    throw CheckpointError(fmt::format("{}: invalid JSON header: {}", path, json_error_text(e)));
  }
  if (!header.is_object()) throw CheckpointError(path + ": the JSON header is not an object");
  const uint64_t data_start = 8 + hlen, data_size = bytes.size() - data_start;

  struct Entry {
    std::string name;
    uint64_t begin, end;
  };
  std::vector<Entry> entries;
  for (auto it = header.begin(); it != header.end(); ++it) {
    const std::string& name = it.key();
    const json& v = it.value();
    if (name == "__metadata__") {
      if (!v.is_object()) throw CheckpointError(path + ": __metadata__ is not an object of strings");
      for (auto m = v.begin(); m != v.end(); ++m) {
        if (!m.value().is_string())
          throw CheckpointError(fmt::format("{}: __metadata__ entry '{}' is not a string", path, m.key()));
        ck.metadata[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    auto fail = [&](const std::string& what) { return CheckpointError(fmt::format("{}: tensor '{}': {}", path, name, what)); };
    if (!v.is_object()) throw fail("the header entry is not an object");
    if (!v.contains("dtype") || !v["dtype"].is_string()) throw fail("missing or non-string dtype");
    HostTensor t;
    const std::string dtype = v["dtype"].get<std::string>();
    if (!parse_dtype(dtype, t.type)) throw fail(fmt::format("unknown or unsupported dtype '{}' (modelc reads F32, F16, BF16, I32, BOOL)", dtype));
    if (!v.contains("shape") || !v["shape"].is_array()) throw fail("missing shape");
    uint64_t count = 1;
    for (const json& d : v["shape"]) {
      if (!d.is_number_unsigned()) throw fail(fmt::format("shape {} is not a list of non-negative integers", v["shape"].dump()));
      uint64_t dim = d.get<uint64_t>();
      if (dim > (uint64_t{1} << 62) || __builtin_mul_overflow(count, dim, &count) || count > (uint64_t{1} << 62))
        throw fail(fmt::format("shape {} is absurdly large", v["shape"].dump()));
      t.shape.push_back(static_cast<int64_t>(dim));
    }
    const json* off = v.contains("data_offsets") ? &v["data_offsets"] : nullptr;
    if (!off || !off->is_array() || off->size() != 2 || !(*off)[0].is_number_unsigned() || !(*off)[1].is_number_unsigned())
      throw fail("data_offsets must be [begin, end] with non-negative integers");
    const uint64_t b = (*off)[0].get<uint64_t>(), e = (*off)[1].get<uint64_t>();
    if (b > e) throw fail(fmt::format("data_offsets [{},{}] end before they begin", b, e));
    if (e > data_size) throw fail(fmt::format("data_offsets [{},{}] run past the end of the data ({} bytes): truncated?", b, e, data_size));
    uint64_t need = 0;  // count is at most 2^62, but 2^62 F32s would overflow a byte count
    if (__builtin_mul_overflow(count, uint64_t{dtype_bytes(t.type)}, &need))
      throw fail(fmt::format("shape {} of {} is absurdly large: its byte count overflows 64 bits", v["shape"].dump(), dtype));
    if (e - b != need)
      throw fail(fmt::format("shape {} of {} needs {} bytes, data_offsets [{},{}] give {}", shape_str(t.shape), dtype, need, b, e, e - b));
    t.bytes.assign(bytes.begin() + static_cast<std::ptrdiff_t>(data_start + b), bytes.begin() + static_cast<std::ptrdiff_t>(data_start + e));
    if (t.type == ElemType::Bool)
      for (size_t i = 0; i < t.bytes.size(); ++i)
        if (t.bytes[i] > 1) throw fail(fmt::format("BOOL element {} is {}, not 0 or 1", i, t.bytes[i]));
    entries.push_back({name, b, e});
    ck.tensors.emplace_back(name, std::move(t));
  }
  std::vector<Entry> sorted = entries;
  std::stable_sort(sorted.begin(), sorted.end(), [](const Entry& x, const Entry& y) { return x.begin < y.begin; });
  uint64_t at = 0;
  std::string prev;
  for (const Entry& en : sorted) {
    if (en.begin < at)
      throw CheckpointError(fmt::format("{}: tensor '{}': data_offsets [{},{}] overlap tensor '{}' (which ends at {})", path,
                                        en.name, en.begin, en.end, prev, at));
    if (en.begin > at)
      throw CheckpointError(fmt::format("{}: tensor '{}': data_offsets begin at {}, leaving a gap of {} bytes after {}", path,
                                        en.name, en.begin, en.begin - at, prev.empty() ? "the header" : "tensor '" + prev + "'"));
    at = en.end;
    prev = en.name;
  }
  if (at != data_size)
    throw CheckpointError(fmt::format("{}: {} trailing bytes after the last tensor's data", path, data_size - at));
  return ck;
}

void check_against(const Checkpoint& ckpt, const std::vector<TensorSpec>& expected, bool allow_extra) {
  std::vector<std::string> errs;
  std::set<std::string> want;
  for (const TensorSpec& s : expected) {
    want.insert(s.name);
    const HostTensor* t = ckpt.find(s.name);
    if (!t) {
      errs.push_back(fmt::format("{}: missing tensor '{}'", ckpt.path, s.name));
      continue;
    }
    if (t->type != s.type)
      errs.push_back(fmt::format("{}: tensor '{}' is {}, the model expects {}", ckpt.path, s.name, safetensors_dtype(t->type),
                                 safetensors_dtype(s.type)));
    if (t->shape != s.shape)
      errs.push_back(fmt::format("{}: tensor '{}' has shape {}, the model expects {}", ckpt.path, s.name, t->shape_str(),
                                 shape_str(s.shape)));
  }
  if (!allow_extra)
    for (const auto& [name, t] : ckpt.tensors)
      if (!want.count(name)) errs.push_back(fmt::format("{}: unexpected tensor '{}': the model has no such parameter or state", ckpt.path, name));
  if (!errs.empty()) throw CheckpointError(fmt::format("{}", fmt::join(errs, "\n")));
}

}  // namespace modelc::rt
