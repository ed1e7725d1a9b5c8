// A content-addressed cache of compiled host code, so that compiling a model again (modelrun
// train x.model run twice, every test that compiles the same model) loads the machine code
// instead of running LLVM's optimiser and back end again.
//
// An entry is one file, `<key>.o`, in the cache directory: a header (magic, the payload's
// size, the payload's SHA-256) and the payload (a relocatable object). The key is the
// SHA-256 of everything that changes the code (code_key): the LLVM IR before optimisation,
// the target triple, CPU and features, the compile options, the LLVM and modelc versions and
// the build id of the binary that holds the compiler. An entry whose header or checksum does
// not match is removed and compiled again, never loaded. Entries are written to a temporary
// file and renamed into place, so concurrent compilers never see half an entry; the
// directory is pruned to kMaxBytes, least recently used first.
//
// Where: $MODELC_CACHE_DIR, else $XDG_CACHE_HOME/modelc/kernels, else
// $HOME/.cache/modelc/kernels; MODELC_CACHE_DIR=off turns the cache off. A directory that
// cannot be created or written only costs the compile time (docs/performance.md).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace modelc {

// What goes into a key: every input that changes the machine code the compiler produces.
struct CodeKey {
  std::string ir;        // the module's LLVM IR, printed before optimisation
  std::string triple;    // "x86_64-unknown-linux-gnu"
  std::string cpu;       // LLVM's name for the CPU: "znver3"
  std::string features;  // the target features, as the target machine got them
  std::string options;   // optimisation level, relocation model, vector math library, ...
  std::string llvm_version;
  std::string modelc_version;
  std::string build_id;  // of the binary that contains the compiler (its GNU build id)
};

// The hex SHA-256 of the key's fields, each labelled and length-prefixed (so no two
// different keys hash the same bytes).
std::string code_key(const CodeKey& key);

// Process-wide counters (for tests and for `-v` output).
struct CodeCacheStats {
  uint64_t hits = 0;      // entries loaded
  uint64_t misses = 0;    // no entry: compiled
  uint64_t rejected = 0;  // an entry with a bad header or checksum: removed and compiled
  uint64_t stored = 0;    // entries written
};

class CodeCache {
 public:
  static constexpr uint64_t kMaxBytes = uint64_t{512} << 20;

  // The cache the environment names (see above); disabled when it names none.
  static CodeCache from_environment();
  // An empty dir: disabled. max_bytes: the size the entries are pruned to.
  explicit CodeCache(std::string dir, uint64_t max_bytes = kMaxBytes);

  bool enabled() const { return !dir_.empty(); }
  const std::string& dir() const { return dir_; }
  std::string entry_path(const std::string& key) const;

  // The payload of `key`'s entry, verified; nullopt when there is none or it is damaged
  // (then it is removed).
  std::optional<std::string> load(const std::string& key) const;
  // Writes `key`'s entry atomically and prunes the directory. A failure (no space, no
  // permission) leaves no entry and is not an error: the code was compiled.
  void store(const std::string& key, std::string_view payload) const;

  static CodeCacheStats stats();

 private:
  std::string dir_;
  uint64_t max_bytes_;
};

}  // namespace modelc
