// Runs the CUDA toolkit's ptxas over PTX the compiler emitted, for the NVPTX tests: every
// PTX must assemble for sm_80 and sm_90 (docs: DESIGN.md, "Testing without a GPU").
#pragma once

#include <gtest/gtest.h>

#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>

#include <unistd.h>

#include "tests/common/sanitizers.h"

namespace modelc::test {

// ptxas: $MODELC_PTXAS when set, else the CUDA toolkit's; "" when there is none.
inline std::string ptxas_path() {
  const char* env = std::getenv("MODELC_PTXAS");
  std::string p = env && *env ? env : "/usr/local/cuda/bin/ptxas";
  return std::filesystem::exists(p) ? p : "";
}

// Skips the calling test, saying why, when there is no ptxas, and under a sanitizer: what
// ptxas checks does not depend on the build, so the normal build's run is the one that
// counts (it costs the sanitizer build minutes, instrumented, for nothing new).
#define MODELC_REQUIRE_PTXAS()                                                                        \
  do {                                                                                                \
    if (::modelc::test::kSanitized) {                                                                  \
      GTEST_SKIP() << "ptxas is a build-independent check: the normal build runs it";                 \
    }                                                                                                 \
    if (::modelc::test::ptxas_path().empty()) {                                                       \
      std::cerr << "no ptxas (looked at $MODELC_PTXAS and /usr/local/cuda/bin/ptxas): PTX not assembled\n"; \
      GTEST_SKIP() << "no ptxas: install the CUDA toolkit at /usr/local/cuda or set MODELC_PTXAS";    \
    }                                                                                                 \
  } while (0)

// Assembles `ptx` for `sm` ("sm_80"); returns "" when ptxas accepts it, else the command
// and ptxas's output. `label` names the files (left in the test's temp dir for a look).
inline std::string assemble_ptx(const std::string& ptx, const std::string& sm, const std::string& label) {
  std::string name;
  for (char c : label) name += std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
  // One folder per process: test processes of several builds may run at once.
  static const std::string dir = [] {
    std::string d = testing::TempDir();
    d.append("/modelc_ptx_").append(std::to_string(::getpid()));
    std::filesystem::create_directories(d);
    return d;
  }();
  std::string base = dir;
  base.append("/").append(name).append("_").append(sm);
  const std::string file = base + ".ptx";
  const std::string log = base + ".log";
  std::ofstream(file) << ptx;
  std::ostringstream cmd;
  cmd << ptxas_path() << " -arch=" << sm << " " << file << " -o " << base << ".cubin > " << log << " 2>&1";
  const int status = std::system(cmd.str().c_str());
  if (status == 0) return "";
  std::ifstream in(log);
  std::ostringstream out;
  out << "'" << cmd.str() << "' failed (status " << status << "):\n" << in.rdbuf();
  return out.str();
}

}  // namespace modelc::test
