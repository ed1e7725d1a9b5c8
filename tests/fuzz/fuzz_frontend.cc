// libFuzzer target for the front end: every input is a .model file, loaded, elaborated,
// printed and verified (tests/fuzz/frontend_checks.h). A verifier problem or a broken API
// contract aborts; an exception escaping (InternalError above all) terminates, which
// libFuzzer reports as a crash with the throwing stack.
//
//   fuzz_frontend -dict=tests/fuzz/model.dict -max_len=4096 WORK_CORPUS tests/fuzz/corpus
//
// With MODELC_FUZZ_SKIP_KNOWN=1 in the environment, inputs that would hit a known, not yet
// fixed bug are skipped (see known_bug below), so that a long run can go past it; each
// such bug has its crasher in tests/fuzz/regressions, which fuzz_replay runs unfiltered.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "tests/fuzz/frontend_checks.h"

namespace {

namespace fs = std::filesystem;

fs::path g_dir;
std::string g_path;
bool g_skip_known = false;

// Inputs that trigger a known, not yet fixed bug.
bool known_bug(const uint8_t* data, size_t size) {
  for (size_t i = 0; i < size; ++i) {
    // utf8_lead_byte_f5_*: load_source (compiler/frontend/parser.cc, utf8_len) takes the
    // bytes 0xF5..0xFF for 3-byte lead bytes, and ANTLRInputStream then throws
    // std::range_error from parse_module. Those bytes are never valid UTF-8.
    if (data[i] >= 0xF5) return true;
  }
  return false;
}

void remove_dir() {
  std::error_code ec;
  fs::remove_all(g_dir, ec);
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  // One folder per process, reused by every iteration: imports in an input resolve against
  // it, so they find nothing but the input itself.
  g_dir = fs::temp_directory_path() / ("modelc-fuzz-" + std::to_string(getpid()));
  fs::create_directories(g_dir);
  g_path = (g_dir / "input.model").string();
  std::atexit(remove_dir);
  const char* skip = std::getenv("MODELC_FUZZ_SKIP_KNOWN");
  g_skip_known = skip && std::string(skip) == "1";
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (g_skip_known && known_bug(data, size)) return -1;  // -1: not added to the corpus
  auto problems = modelc::fuzz::check_frontend(data, size, g_path);
  if (!problems.empty()) {
    for (const std::string& p : problems) std::fprintf(stderr, "fuzz_frontend: %s\n", p.c_str());
    std::abort();
  }
  return 0;
}
