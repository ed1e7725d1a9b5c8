// poison_checkpoint IN OUT TENSOR nan|inf|one-nan: writes checkpoint IN to OUT with tensor TENSOR
// all NaN, all +inf, or NaN in its first element; for the tests of what a run does with a
// checkpoint that is not finite (tests/cmake/eval_nan.cmake).
// poison_checkpoint IN OUT --metadata KEY VALUE: the same checkpoint with metadata KEY set to
// VALUE (tests/cmake/resume_checks.cmake).
#include <cmath>
#include <iostream>
#include <limits>
#include <string>

#include "runtime/session/checkpoint.h"

int main(int argc, char** argv) {
  if (argc == 6 && std::string(argv[3]) == "--metadata") {
    try {
      modelc::rt::Checkpoint c = modelc::rt::load_checkpoint(argv[1]);
      c.metadata[argv[4]] = argv[5];
      modelc::rt::save_checkpoint(argv[2], c.tensors, c.metadata);
    } catch (const std::exception& e) {
      std::cerr << e.what() << "\n";
      return 1;
    }
    return 0;
  }
  if (argc != 5) {
    std::cerr << "usage: poison_checkpoint IN OUT TENSOR nan|inf|one-nan, or IN OUT --metadata KEY VALUE\n";
    return 2;
  }
  const std::string how = argv[4];
  try {
    modelc::rt::Checkpoint c = modelc::rt::load_checkpoint(argv[1]);
    bool found = false;
    for (auto& [name, t] : c.tensors) {
      if (name != argv[3]) continue;
      found = true;
      const float v = how == "inf" ? std::numeric_limits<float>::infinity() : std::numeric_limits<float>::quiet_NaN();
      const int64_t n = how == "one-nan" ? 1 : t.numel();
      for (int64_t i = 0; i < n; ++i) t.f32()[i] = v;
    }
    if (!found) {
      std::cerr << argv[1] << " has no tensor " << argv[3] << "\n";
      return 1;
    }
    modelc::rt::save_checkpoint(argv[2], c.tensors, c.metadata);
  } catch (const std::exception& e) {
    std::cerr << e.what() << "\n";
    return 1;
  }
  return 0;
}
