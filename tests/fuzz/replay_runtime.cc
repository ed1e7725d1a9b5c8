// Replays a runtime fuzzer's checks (tests/fuzz/runtime_checks.h) over every file of the
// folders given, so that findings stay fixed in every build:
//   fuzz_runtime_replay [-v] plan|checkpoint|data DIR|FILE...
// (-v: print whether each input was accepted, or its error.)
// Prints each failing file with its problems and exits 1 if any failed; a crash leaves
// "replay: FILE" as the last line printed.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "tests/fuzz/runtime_checks.h"

namespace fs = std::filesystem;

namespace {

using Check = modelc::fuzz::Problems (*)(const uint8_t*, size_t, const std::string&);

Check check_named(const std::string& name) {
  if (name == "plan") return modelc::fuzz::check_plan;
  if (name == "checkpoint") return modelc::fuzz::check_checkpoint;
  if (name == "data") return modelc::fuzz::check_data;
  return nullptr;
}

bool collect(const fs::path& p, std::vector<fs::path>& files) {
  if (fs::is_directory(p)) {
    for (const auto& e : fs::directory_iterator(p)) {
      std::string name = e.path().filename().string();
      if (e.is_regular_file() && !name.starts_with(".") && !name.starts_with("README")) files.push_back(e.path());
    }
    return true;
  }
  if (fs::is_regular_file(p)) {
    files.push_back(p);
    return true;
  }
  std::fprintf(stderr, "fuzz_runtime_replay: %s: no such file or folder\n", p.c_str());
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  int first = 1;
  if (argc > 1 && std::string(argv[1]) == "-v") {
    modelc::fuzz::verbose() = true;
    ++first;
  }
  Check check = argc >= first + 2 ? check_named(argv[first]) : nullptr;
  if (!check) {
    std::fprintf(stderr, "usage: fuzz_runtime_replay [-v] plan|checkpoint|data DIR|FILE...\n");
    return 2;
  }
  std::vector<fs::path> files;
  for (int i = first + 1; i < argc; ++i)
    if (!collect(argv[i], files)) return 2;
  std::sort(files.begin(), files.end());
  fs::path dir = fs::temp_directory_path() / ("modelc-replay-rt-" + std::to_string(getpid()));
  fs::create_directories(dir);
  int failed = 0;
  for (const fs::path& f : files) {
    std::fprintf(stderr, "replay: %s\n", f.c_str());
    std::ifstream in(f, std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    modelc::fuzz::Problems problems = check(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), dir.string());
    for (const std::string& p : problems) std::fprintf(stderr, "FAILED %s: %s\n", f.c_str(), p.c_str());
    if (!problems.empty()) ++failed;
  }
  std::error_code ec;
  fs::remove_all(dir, ec);
  std::fprintf(stderr, "fuzz_runtime_replay %s: %zu files, %d failed\n", argv[first], files.size(), failed);
  if (files.empty()) std::fprintf(stderr, "fuzz_runtime_replay: no inputs: the corpus folders are empty\n");
  return failed || files.empty() ? 1 : 0;
}
