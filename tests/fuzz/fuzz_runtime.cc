// libFuzzer targets for the runtime's file readers, one executable per format family, all
// built from this file with MODELC_FUZZ_CHECK naming the check (tests/fuzz/runtime_checks.h):
//   fuzz_plan        check_plan        read_plan (CRCs fixed up first: see the header)
//   fuzz_checkpoint  check_checkpoint  load_checkpoint (safetensors)
//   fuzz_data        check_data        load_idx, load_csv, load_text, load_tokens
// A problem the check reports aborts (libFuzzer saves the input as a crash); a crash or a
// sanitizer report is caught by libFuzzer itself. Commands: tests/fuzz/CMakeLists.txt.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "tests/fuzz/runtime_checks.h"

namespace {

namespace fs = std::filesystem;

fs::path g_dir;

void remove_dir() {
  std::error_code ec;
  fs::remove_all(g_dir, ec);
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  // One folder per process, reused by every iteration.
  g_dir = fs::temp_directory_path() / ("modelc-fuzz-rt-" + std::to_string(getpid()));
  fs::create_directories(g_dir);
  std::atexit(remove_dir);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  modelc::fuzz::Problems problems = modelc::fuzz::MODELC_FUZZ_CHECK(data, size, g_dir.string());
  if (!problems.empty()) {
    for (const std::string& p : problems) std::fprintf(stderr, "fuzz: %s\n", p.c_str());
    std::abort();
  }
  return 0;
}
