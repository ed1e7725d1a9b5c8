// Helpers of the tests against numbers PyTorch recorded (test_torch_optim.cc,
// test_torch_batchnorm.cc): a model text compiled as modelrun compiles it, and the
// relative difference the tolerances are stated in.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>

#include "compiler/pipeline.h"

namespace modelc::test {

// `text` written to NAME.model in a fresh temporary directory (so that imports and relative
// paths resolve as for a file) and compiled with the default options; null after a failure.
inline std::shared_ptr<rt::Program> compile_model_text(const std::string& name, const std::string& text) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("modelc_torch_golden_" + std::to_string(getpid()));
  fs::create_directories(dir);
  const fs::path file = dir / (name + ".model");
  std::ofstream(file) << text;
  Compilation comp(CompileOptions{});
  auto p = compile_program(comp, file.string());
  EXPECT_TRUE(p) << comp.diags().render();
  fs::remove_all(dir);
  return p;
}

inline double rel(double a, double b) { return a == b ? 0.0 : std::fabs(a - b) / std::max(std::fabs(b), 1e-30); }

}  // namespace modelc::test
