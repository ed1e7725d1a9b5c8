// .plan files (runtime/session/plan.h): the envelope (header, section table, CRCs), atomic
// writing, the checked reader, the host-target check and loading the host code with
// dlopen from a memfd.
//
// Header (48 bytes, little-endian):
//    0  char[8] magic "MODELCPL"     24  u64 section table offset
//    8  u32 format version           32  u64 total size of the plan in bytes
//   12  u32 flags (none defined: 0)  40  u32 reserved (0)
//   16  u32 section count            44  u32 CRC32 of bytes 0..43
//   20  u32 CRC32 of the section table
// Section table entry (32 bytes): u32 kind (1 program, 2 ptx, 3 code), u32 reserved (0),
// u64 offset, u64 size, u32 CRC32 of the section, u32 reserved (0). Sections start at
// 16-byte boundaries after the table, in table order, without overlapping; the plan ends
// where its last section ends.
#include "runtime/session/plan.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include <fmt/format.h>

#include "runtime/base/error.h"
#include "runtime/session/plan_codec.h"
#include "runtime/session/temp_files.h"

namespace modelc::rt {
namespace {

namespace fs = std::filesystem;

constexpr char kMagic[8] = {'M', 'O', 'D', 'E', 'L', 'C', 'P', 'L'};
constexpr size_t kHeaderSize = 48, kEntrySize = 32, kAlign = 16;
constexpr uint32_t kMaxSections = 16;
constexpr uint64_t kMaxPlanBytes = uint64_t{1} << 32;  // 4 GiB: anything larger is not a plan
enum : uint32_t { kProgram = 1, kPtx = 2, kCode = 3 };

const char* section_name(uint32_t kind) {
  switch (kind) {
    case kProgram: return "program";
    case kPtx: return "ptx";
    case kCode: return "code";
  }
  return "?";
}

uint32_t crc(const char* data, size_t n) {
  return static_cast<uint32_t>(crc32_z(crc32_z(0, nullptr, 0), reinterpret_cast<const Bytef*>(data), n));
}

void put32(std::string& s, size_t at, uint32_t v) {
  for (int i = 0; i < 4; ++i) s[at + i] = static_cast<char>((v >> (8 * i)) & 0xff);
}
void put64(std::string& s, size_t at, uint64_t v) {
  for (int i = 0; i < 8; ++i) s[at + i] = static_cast<char>((v >> (8 * i)) & 0xff);
}
uint32_t get32(const std::string& s, size_t at) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= static_cast<uint32_t>(static_cast<uint8_t>(s[at + i])) << (8 * i);
  return v;
}
uint64_t get64(const std::string& s, size_t at) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(static_cast<uint8_t>(s[at + i])) << (8 * i);
  return v;
}
size_t align_up(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

[[noreturn]] void fail(const std::string& path, const std::string& msg) {
  throw RuntimeError(fmt::format("{}: {}", path, msg));
}

std::string read_whole_file(const std::string& path) {
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);  // a FIFO must not block us
  if (fd < 0) fail(path, fmt::format("cannot open: {}", std::strerror(errno)));
  struct Closer {
    int fd;
    ~Closer() { close(fd); }
  } closer{fd};
  struct stat st {};
  if (fstat(fd, &st) != 0) fail(path, fmt::format("cannot read: {}", std::strerror(errno)));
  if (S_ISDIR(st.st_mode)) fail(path, "is a directory, not a plan");
  if (!S_ISREG(st.st_mode)) fail(path, "not a regular file, not a plan");
  if (static_cast<uint64_t>(st.st_size) > kMaxPlanBytes)
    fail(path, fmt::format("{} bytes is too large for a plan (limit {})", st.st_size, kMaxPlanBytes));
  std::string bytes(static_cast<size_t>(st.st_size), '\0');
  size_t got = 0;
  while (got < bytes.size()) {
    ssize_t n = read(fd, bytes.data() + got, bytes.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) fail(path, fmt::format("cannot read: {}", std::strerror(errno)));
    if (n == 0) break;  // the file shrank while we read it
    got += static_cast<size_t>(n);
  }
  bytes.resize(got);
  return bytes;
}

// The host code, loaded: dlclose'd and its memfd closed when the Program lets go. The fd
// stays open while the code is loaded, so that no other plan's "/proc/self/fd/N" can name
// the same path (dlopen would hand back this object).
struct LoadedCode {
  void* handle = nullptr;
  int fd = -1;
  ~LoadedCode() {
    if (handle) dlclose(handle);
    if (fd >= 0) close(fd);
  }
};

std::shared_ptr<LoadedCode> load_code(const std::string& path, const std::string& so) {
  auto code = std::make_shared<LoadedCode>();
  code->fd = memfd_create("modelc-plan-code", MFD_CLOEXEC);
  if (code->fd < 0) fail(path, fmt::format("cannot load the host code: memfd_create: {}", std::strerror(errno)));
  for (size_t done = 0; done < so.size();) {
    ssize_t n = write(code->fd, so.data() + done, so.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) fail(path, fmt::format("cannot load the host code: {}", std::strerror(errno)));
    done += static_cast<size_t>(n);
  }
  const std::string name = fmt::format("/proc/self/fd/{}", code->fd);
  code->handle = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!code->handle) {
    const char* e = dlerror();
    fail(path, fmt::format("section 'code' cannot be loaded: {}", e ? e : "dlopen failed"));
  }
  return code;
}

struct Feature {
  const char* name;
  bool (*supported)();
};
#define MODELC_FEATURE(n) Feature{n, [] { return __builtin_cpu_supports(n) != 0; }}

// The x86 features the host code may use that __builtin_cpu_supports can check, under
// their LLVM names (which here equal GCC's).
const std::vector<Feature>& known_features() {
  static const std::vector<Feature> features = {
#if defined(__x86_64__)
      MODELC_FEATURE("sse3"), MODELC_FEATURE("ssse3"), MODELC_FEATURE("sse4.1"), MODELC_FEATURE("sse4.2"),
      MODELC_FEATURE("popcnt"), MODELC_FEATURE("avx"), MODELC_FEATURE("avx2"), MODELC_FEATURE("fma"),
      MODELC_FEATURE("bmi"), MODELC_FEATURE("bmi2"), MODELC_FEATURE("avx512f"), MODELC_FEATURE("avx512cd"),
      MODELC_FEATURE("avx512bw"), MODELC_FEATURE("avx512dq"), MODELC_FEATURE("avx512vl"),
      MODELC_FEATURE("avx512vnni"), MODELC_FEATURE("avx512bf16"), MODELC_FEATURE("avx512vbmi"),
      MODELC_FEATURE("avx512vbmi2"), MODELC_FEATURE("avx512ifma"), MODELC_FEATURE("avx512bitalg"),
      MODELC_FEATURE("avx512vpopcntdq"), MODELC_FEATURE("fma4"), MODELC_FEATURE("xop"), MODELC_FEATURE("sse4a"),
      MODELC_FEATURE("gfni"), MODELC_FEATURE("vpclmulqdq"), MODELC_FEATURE("pclmul"), MODELC_FEATURE("aes"),
#if !defined(__clang__)  // GCC knows these too; clang 14 does not
      MODELC_FEATURE("f16c"), MODELC_FEATURE("lzcnt"), MODELC_FEATURE("movbe"), MODELC_FEATURE("avx512fp16"),
      MODELC_FEATURE("avxvnni"), MODELC_FEATURE("adx"),
#endif
#endif
  };
  return features;
}
#undef MODELC_FEATURE

const char* host_arch() {
#if defined(__x86_64__)
  return "x86_64";
#elif defined(__aarch64__)
  return "aarch64";
#else
  return "";
#endif
}

void check_target(const std::string& path, const PlanTarget& t) {
  if (t.arch.empty()) return;
  if (t.arch != host_arch())
    fail(path, fmt::format("compiled for {} (cpu '{}'), but this machine is {}; recompile the .model here",
                           plan_detail::printable(t.arch), plan_detail::printable(t.cpu),
                           host_arch()));
  std::vector<std::string> missing = missing_cpu_features(t.features);
  if (!missing.empty()) {
    std::string list;
    for (const std::string& f : missing) {
      if (!list.empty()) list += ", ";
      list += plan_detail::printable(f);
    }
    fail(path, fmt::format("compiled for cpu '{}', whose features {} this CPU lacks; recompile the .model on this "
                           "machine (modelc FILE.model -o FILE.plan)",
                           plan_detail::printable(t.cpu), list));
  }
}

}  // namespace

std::vector<std::string> checkable_cpu_features() {
  std::vector<std::string> out;
  for (const Feature& f : known_features()) out.push_back(f.name);
  return out;
}

std::vector<std::string> missing_cpu_features(const std::vector<std::string>& features) {
#if defined(__x86_64__)
  __builtin_cpu_init();
#endif
  std::vector<std::string> missing;
  for (const std::string& name : features)
    for (const Feature& f : known_features())
      if (name == f.name && !f.supported()) missing.push_back(name);
  return missing;
}

std::string encode_plan(const Program& p, const std::string& shared_object, const PlanTarget& target) {
  const std::string program = plan_detail::encode_program(p, target);
  const std::pair<uint32_t, const std::string*> sections[] = {{kProgram, &program}, {kPtx, &p.ptx}, {kCode, &shared_object}};
  const size_t count = std::size(sections);
  std::string table(count * kEntrySize, '\0');
  size_t pos = align_up(kHeaderSize + table.size());
  std::vector<size_t> offsets;
  for (size_t i = 0; i < count; ++i) {
    if (i > 0) pos = align_up(pos);
    const std::string& s = *sections[i].second;
    offsets.push_back(pos);
    put32(table, i * kEntrySize, sections[i].first);
    put64(table, i * kEntrySize + 8, pos);
    put64(table, i * kEntrySize + 16, s.size());
    put32(table, i * kEntrySize + 24, crc(s.data(), s.size()));
    pos += s.size();
  }
  std::string out(pos, '\0');
  std::memcpy(out.data(), kMagic, sizeof kMagic);
  put32(out, 8, kPlanVersion);
  put32(out, 12, 0);
  put32(out, 16, static_cast<uint32_t>(count));
  put32(out, 20, crc(table.data(), table.size()));
  put64(out, 24, kHeaderSize);
  put64(out, 32, pos);
  put32(out, 44, crc(out.data(), 44));
  out.replace(kHeaderSize, table.size(), table);
  for (size_t i = 0; i < count; ++i) out.replace(offsets[i], sections[i].second->size(), *sections[i].second);
  return out;
}

void write_plan(const Program& program, const std::string& shared_object, const std::string& path,
                const PlanTarget& target) {
  try {
    check_program(program);
  } catch (const RuntimeError& e) {
    fail(path, fmt::format("will not write an inconsistent program: {}", e.what()));
  }
  if (shared_object.empty()) fail(path, "will not write a plan without host code (the shared object is empty)");
  const std::string bytes = encode_plan(program, shared_object, target);
  write_file_atomically(path, bytes);
}

bool is_plan_file(const std::string& path) {
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);  // a FIFO must not block us
  if (fd < 0) return false;
  char head[sizeof kMagic] = {};
  ssize_t n = read(fd, head, sizeof head);
  close(fd);
  return n == static_cast<ssize_t>(sizeof head) && std::memcmp(head, kMagic, sizeof head) == 0;
}

// Long by design: the checks of a plan file in the order its sections come.
std::shared_ptr<Program> read_plan(const std::string& path, PlanTarget* target_out) {
  const std::string f = read_whole_file(path);
  const uint64_t size = f.size();
  if (size == 0) fail(path, "empty file (not a modelc plan)");
  if (size < sizeof kMagic) {
    if (std::memcmp(f.data(), kMagic, size) != 0) fail(path, "not a modelc plan (bad magic)");
    fail(path, fmt::format("truncated: the file has {} bytes, a plan's header has {}", size, kHeaderSize));
  }
  if (std::memcmp(f.data(), kMagic, sizeof kMagic) != 0) fail(path, "not a modelc plan (bad magic)");
  if (size < 12) fail(path, fmt::format("truncated: the file has {} bytes, a plan's header has {}", size, kHeaderSize));
  const uint32_t version = get32(f, 8);
  if (version != kPlanVersion)
    fail(path, fmt::format("plan format version {}, this runtime reads version {}{}", version, kPlanVersion,
                           version > kPlanVersion ? " (a newer modelc wrote it; recompile the .model with this one)"
                                                  : " (an older modelc wrote it, or the header is damaged; recompile "
                                                    "the .model with this one)"));
  if (size < kHeaderSize) fail(path, fmt::format("truncated: the file has {} bytes, a plan's header has {}", size, kHeaderSize));
  if (crc(f.data(), 44) != get32(f, 44)) fail(path, "the header is corrupted (CRC mismatch)");
  const uint32_t flags = get32(f, 12), count = get32(f, 16);
  const uint64_t table = get64(f, 24), total = get64(f, 32);
  if (flags != 0) fail(path, fmt::format("unknown header flags 0x{:x} (version {} defines none)", flags, kPlanVersion));
  if (get32(f, 40) != 0) fail(path, "the header's reserved field is not zero");
  if (count == 0 || count > kMaxSections) fail(path, fmt::format("invalid section count {}", count));
  if (table < kHeaderSize || table > kMaxPlanBytes) fail(path, fmt::format("invalid section table offset {}", table));
  const uint64_t table_end = table + uint64_t{count} * kEntrySize;
  if (table_end > size)
    fail(path, fmt::format("truncated: the section table ends at byte {} but the file has {} bytes", table_end, size));
  if (crc(f.data() + table, table_end - table) != get32(f, 20)) fail(path, "the section table is corrupted (CRC mismatch)");

  struct Section {
    uint32_t kind;
    uint64_t offset, size;
    uint32_t crc;
  };
  std::vector<Section> sections;
  for (uint32_t i = 0; i < count; ++i) {
    const size_t e = table + size_t{i} * kEntrySize;
    Section s{get32(f, e), get64(f, e + 8), get64(f, e + 16), get32(f, e + 24)};
    if (s.kind < kProgram || s.kind > kCode) fail(path, fmt::format("section {} has the unknown kind {}", i, s.kind));
    if (get32(f, e + 4) != 0 || get32(f, e + 28) != 0)
      fail(path, fmt::format("section '{}' has nonzero reserved fields", section_name(s.kind)));
    for (const Section& o : sections)
      if (o.kind == s.kind) fail(path, fmt::format("section '{}' appears twice", section_name(s.kind)));
    if (s.offset < table_end || s.offset > kMaxPlanBytes || s.size > kMaxPlanBytes)
      fail(path, fmt::format("section '{}' has an invalid offset {} or size {}", section_name(s.kind), s.offset, s.size));
    if (s.offset + s.size > size)
      fail(path, fmt::format("truncated: section '{}' ends at byte {} but the file has {} bytes", section_name(s.kind),
                             s.offset + s.size, size));
    if (!sections.empty() && s.offset < sections.back().offset + sections.back().size)
      fail(path, fmt::format("section '{}' overlaps section '{}'", section_name(s.kind), section_name(sections.back().kind)));
    sections.push_back(s);
  }
  if (total > size) fail(path, fmt::format("truncated: the plan has {} bytes but the file has {}", total, size));
  if (total < size) fail(path, fmt::format("{} bytes of unexpected data after the plan's {} bytes", size - total, total));
  const std::string* bytes[4] = {};
  std::string parts[4];
  for (const Section& s : sections) {
    if (crc(f.data() + s.offset, s.size) != s.crc)
      fail(path, fmt::format("section '{}' is corrupted (CRC mismatch)", section_name(s.kind)));
    parts[s.kind] = f.substr(s.offset, s.size);
    bytes[s.kind] = &parts[s.kind];
  }
  for (uint32_t k : {kProgram, kCode})
    if (!bytes[k]) fail(path, fmt::format("the plan has no '{}' section", section_name(k)));

  auto p = std::make_shared<Program>();
  PlanTarget target;
  try {
    plan_detail::decode_program(*bytes[kProgram], *p, target);
  } catch (const RuntimeError& e) {
    fail(path, fmt::format("section 'program' is malformed: {}", e.what()));
  }
  if (bytes[kPtx]) p->ptx = std::move(parts[kPtx]);
  try {
    check_program(*p);
  } catch (const RuntimeError& e) {
    fail(path, fmt::format("inconsistent program: {}", e.what()));
  }
  check_target(path, target);
  std::shared_ptr<LoadedCode> code = load_code(path, *bytes[kCode]);
  for (size_t i = 0; i < p->codelets.size(); ++i) {
    CodeletDesc& k = p->codelets[i];
    dlerror();
    void* sym = dlsym(code->handle, k.name.c_str());
    if (!sym) fail(path, fmt::format("kernel {} '{}' is missing from the plan's host code (section 'code')", i,
                             plan_detail::printable(k.name)));
    k.host = reinterpret_cast<HostCodeletFn>(sym);
  }
  p->code = code;
  if (target_out) *target_out = std::move(target);
  return p;
}

}  // namespace modelc::rt
