// Replays the front-end fuzzer's checks (tests/fuzz/frontend_checks.h) over every file of
// the folders given (tests/fuzz/corpus and tests/fuzz/regressions), so that crashers found
// by fuzzing stay fixed in every build. Each file is copied to a fresh temporary folder
// first, as the fuzzer does, so that its imports resolve the same way. Prints each failing
// file with its problem and exits 1 if any failed; a crash leaves "replay: FILE" as the
// last line printed.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "tests/fuzz/frontend_checks.h"

namespace fs = std::filesystem;

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: fuzz_replay DIR|FILE...\n");
    return 2;
  }
  std::vector<fs::path> files;
  for (int i = 1; i < argc; ++i) {
    fs::path p = argv[i];
    if (fs::is_directory(p)) {
      for (const auto& e : fs::directory_iterator(p)) {
        std::string name = e.path().filename().string();
        if (!e.is_regular_file() || name.starts_with(".") || name.starts_with("README")) continue;
        files.push_back(e.path());
      }
    } else if (fs::is_regular_file(p)) {
      files.push_back(p);
    } else {
      std::fprintf(stderr, "fuzz_replay: %s: no such file or folder\n", p.c_str());
      return 2;
    }
  }
  std::sort(files.begin(), files.end());

  fs::path dir = fs::temp_directory_path() / ("modelc-replay-" + std::to_string(getpid()));
  fs::create_directories(dir);
  std::string input = (dir / "input.model").string();
  int failed = 0;
  for (const fs::path& f : files) {
    std::fprintf(stderr, "replay: %s\n", f.c_str());
    std::ifstream in(f, std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::vector<std::string> problems;
    try {
      problems = modelc::fuzz::check_frontend(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), input);
    } catch (const modelc::InternalError& e) {
      problems.push_back(std::string("InternalError: ") + e.what());
    } catch (const std::exception& e) {
      problems.push_back(std::string("exception: ") + e.what());
    }
    for (const std::string& p : problems) std::fprintf(stderr, "FAILED %s: %s\n", f.c_str(), p.c_str());
    if (!problems.empty()) ++failed;
  }
  std::error_code ec;
  fs::remove_all(dir, ec);
  std::fprintf(stderr, "fuzz_replay: %zu files, %d failed\n", files.size(), failed);
  return failed ? 1 : 0;
}
